#include "policy/budget.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "common/text.hpp"

namespace sublinear::policy {

namespace {

constexpr std::string_view accepted_forms =
    "expected a byte count (8GiB, 512MiB, 1.5GB, 1048576; units B, KiB, MiB, GiB, TiB = powers of 1024, "
    "KB, MB, GB, TB = powers of 1000), a percentage of device memory (60%) or a multiple of the traced "
    "peak (0.5x)";

[[noreturn]] void malformed(std::string_view text, std::string_view why) {
  throw config_error("sublinear: invalid budget " + quote_bounded(text) + ": " + std::string(why) + "; " +
                     std::string(accepted_forms));
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

struct unit {
  std::string_view name;
  std::size_t multiplier;
};

constexpr std::array<unit, 9> byte_units{{
    {"B", 1},
    {"KiB", std::size_t{1} << 10},
    {"MiB", std::size_t{1} << 20},
    {"GiB", std::size_t{1} << 30},
    {"TiB", std::size_t{1} << 40},
    {"KB", 1000},
    {"MB", 1000 * 1000},
    {"GB", std::size_t{1000} * 1000 * 1000},
    {"TB", std::size_t{1000} * 1000 * 1000 * 1000},
}};

}  // namespace

budget_spec parse_budget(std::string_view text) {
  const std::string_view s = trim(text);
  if (s.empty()) malformed(text, "the value is empty");
  // Number: digits, optionally '.' and more digits.
  std::size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0) malformed(text, "it does not start with a number");
  const std::size_t int_end = i;
  bool has_fraction = false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const std::size_t frac_begin = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == frac_begin) malformed(text, "a decimal point must be followed by digits");
    has_fraction = true;
  }
  const std::string_view number = s.substr(0, i);
  const std::string_view suffix = trim(s.substr(i));

  double value = 0.0;
  {
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(value)) {
      malformed(text, "the number cannot be read");
    }
  }
  if (!(value > 0.0)) malformed(text, "a budget must be greater than zero");

  budget_spec spec;
  spec.text = std::string(text);
  spec.number = value;
  if (suffix == "%") {
    if (value > 100.0) malformed(text, "a percentage of device memory cannot exceed 100%");
    spec.form = budget_spec::kind::device_fraction;
    spec.fraction = value / 100.0;
    return spec;
  }
  if (suffix == "x" || suffix == "X") {
    spec.form = budget_spec::kind::peak_fraction;
    spec.fraction = value;
    return spec;
  }
  std::size_t multiplier = 0;
  if (suffix.empty()) {
    multiplier = 1;
  } else {
    for (const unit& u : byte_units) {
      if (iequals(suffix, u.name)) multiplier = u.multiplier;
    }
  }
  if (multiplier == 0) {
    malformed(text, "unknown unit '" + std::string(suffix) + "'" +
                        (suffix.size() == 1 ? " (single-letter units are ambiguous: write GiB or GB)" : ""));
  }

  spec.form = budget_spec::kind::bytes;
  if (!has_fraction) {
    // Integer arithmetic: exact for every representable byte count.
    std::size_t whole = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + int_end, whole);
    if (ec != std::errc() || ptr != number.data() + int_end || whole > std::numeric_limits<std::size_t>::max() / multiplier) {
      malformed(text, "the value is too large");
    }
    spec.bytes = whole * multiplier;
  } else {
    const long double bytes = static_cast<long double>(value) * static_cast<long double>(multiplier);
    if (bytes >= static_cast<long double>(std::numeric_limits<std::size_t>::max())) malformed(text, "the value is too large");
    spec.bytes = static_cast<std::size_t>(std::floor(bytes));
  }
  if (spec.bytes == 0) malformed(text, "it is less than one byte");
  return spec;
}

std::size_t resolve_budget(const budget_spec& spec, std::size_t device_capacity, std::size_t traced_peak) {
  switch (spec.form) {
    case budget_spec::kind::bytes:
      return spec.bytes;
    case budget_spec::kind::device_fraction: {
      if (device_capacity == 0) {
        throw config_error("sublinear: budget '" + spec.text +
                           "' is a share of device memory, but the device's capacity is not known; give bytes instead");
      }
      // capacity * 60 / 100 rather than capacity * 0.6: 0.6 has no exact binary form.
      const long double exact = spec.number > 0.0
                                    ? static_cast<long double>(device_capacity) * static_cast<long double>(spec.number) / 100.0L
                                    : static_cast<long double>(device_capacity) * static_cast<long double>(spec.fraction);
      const auto b = static_cast<std::size_t>(std::floor(exact));
      if (b == 0) throw config_error("sublinear: budget '" + spec.text + "' is less than one byte of this device");
      return b;
    }
    case budget_spec::kind::peak_fraction: {
      if (traced_peak == 0) {
        throw config_error("sublinear: budget '" + spec.text +
                           "' is a multiple of the traced peak, but no iteration has been traced yet");
      }
      const long double b = std::floor(static_cast<long double>(traced_peak) *
                                       static_cast<long double>(spec.number > 0.0 ? spec.number : spec.fraction));
      if (b >= static_cast<long double>(std::numeric_limits<std::size_t>::max())) {
        throw config_error("sublinear: budget '" + spec.text + "' is too large");
      }
      if (b < 1) throw config_error("sublinear: budget '" + spec.text + "' is less than one byte");
      return static_cast<std::size_t>(b);
    }
  }
  return spec.bytes;
}

std::size_t parse_budget_bytes(std::string_view text, std::size_t device_capacity, std::size_t traced_peak) {
  return resolve_budget(parse_budget(text), device_capacity, traced_peak);
}

namespace {

std::string exact(std::size_t bytes) { return format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)"; }
// A budget to ask for: rounded up, so that the figure shown, given back, is enough.
std::string at_least(std::size_t bytes) {
  return format_bytes_at_least(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

infeasible_budget::infeasible_budget(std::string_view planner, std::size_t budget, std::size_t smallest_feasible,
                                     std::size_t lower_bound, std::string_view why)
    : config_error("sublinear: budget " + exact(budget) + " is infeasible for planner '" + std::string(planner) +
                   "': the smallest feasible budget for it is " + at_least(smallest_feasible) +
                   "; no plan can go below " + exact(lower_bound) + " for this iteration" +
                   (why.empty() ? std::string() : "; " + std::string(why))),
      budget_(budget),
      smallest_feasible_(smallest_feasible),
      lower_bound_(lower_bound) {}

}  // namespace sublinear::policy
