#include <cstdio>

#include "common/text.hpp"

namespace sublinear {

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

std::string format_bytes_at_least(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  int unit = 0;
  std::size_t scale = 1;
  while (unit < 4 && bytes / scale >= 1024) {
    scale *= 1024;
    ++unit;
  }
  // Hundredths of the unit, rounded up: the smallest h with h * scale >= rest * 100 (rest
  // < scale <= 2^40, so rest * 100 fits).
  const std::size_t whole = bytes / scale;
  const std::size_t rest = bytes % scale;
  std::size_t hundredths = (rest * 100 + scale - 1) / scale;
  std::size_t units_whole = whole + hundredths / 100;
  hundredths %= 100;
  char text[48];
  std::snprintf(text, sizeof text, "%zu.%02zu %s", units_whole, hundredths, units[unit]);
  return text;
}

std::string quote_bounded(std::string_view value, std::size_t limit) {
  if (value.size() <= limit) return "'" + std::string(value) + "'";
  return "'" + std::string(value.substr(0, limit)) + "...' (" + std::to_string(value.size()) + " characters)";
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace sublinear
