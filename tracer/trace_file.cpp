// Trace file writer and reader (Note [Trace file] in trace_file.hpp; the format is
// specified in docs/trace-format.md — keep the two in step).
#include "tracer/trace_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "common/atomic_file.hpp"

namespace sublinear::tracer {

static_assert(std::endian::native == std::endian::little,
              "the trace format is little-endian and is read by memcpy");

namespace {

// ---- constants of the format (docs/trace-format.md) -------------------------------------------

constexpr std::array<char, 8> file_magic = {'S', 'L', 'T', 'R', 'A', 'C', 'E', '\x1a'};
constexpr std::size_t header_size = 64;
constexpr std::size_t dir_entry_size = 32;
constexpr std::size_t event_record_size = 104;
constexpr std::size_t kernel_record_min = 24;
constexpr std::size_t write_record_size = 16;
constexpr std::size_t attribute_record_size = 16 + device::launch_attribute_value_bytes;
constexpr std::size_t meta_fixed_size = 16;
constexpr std::uint32_t max_sections = 64;
constexpr std::uint32_t kernel_flag_never_replay = 1;

enum section_id : std::uint32_t {
  sec_meta = 1,
  sec_kernels = 2,
  sec_streams = 3,
  sec_events = 4,
  sec_arena = 5,
  sec_writes = 6,
  sec_fresh = 7,  // since 1.1; optional
  sec_lattrs = 8,  // since 1.2; optional
};
constexpr std::array<std::uint32_t, 6> required_sections = {sec_meta, sec_kernels, sec_streams,
                                                            sec_events, sec_arena, sec_writes};
constexpr std::size_t written_sections = 8;

const char* section_name(std::uint32_t id) {
  switch (id) {
    case sec_meta: return "META";
    case sec_kernels: return "KERNELS";
    case sec_streams: return "STREAMS";
    case sec_events: return "EVENTS";
    case sec_arena: return "ARENA";
    case sec_writes: return "WRITES";
    case sec_fresh: return "FRESH";
    case sec_lattrs: return "LATTRS";
    default: return "unknown";
  }
}

constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1U) != 0 ? 0xEDB88320U ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto crc_table = make_crc_table();

// ---- encoding helpers ---------------------------------------------------------------------------

class byte_writer {
 public:
  std::vector<std::byte> out;

  template <class T>
  void put(T v) {
    const std::size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  void put_bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  void pad8() { out.resize((out.size() + 7) / 8 * 8, std::byte{0}); }
  template <class T>
  void patch(std::size_t at, T v) {
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
};

// ---- validation with locations ------------------------------------------------------------------

// Where validation found a problem: a section and a record index, so the decoder can
// turn it into a byte offset.
struct invalid {
  std::uint32_t section;
  std::size_t index;
  std::string what;
};

std::string event_label(const trace& t, std::size_t i) {
  const event& e = t.events[i];
  const auto k = static_cast<std::uint8_t>(e.kind);
  const std::string kind = k >= 1 && k <= event_kind_max ? to_string(e.kind) : "kind " + std::to_string(k);
  return "event " + std::to_string(i) + " (seq " + std::to_string(e.seq) + ", " + kind + ")";
}

// The fields of an event its kind does not use, which the format fixes (zero; grid and
// block 1, 1, 1, the value every writer leaves there): the name of the first one that is
// set otherwise, or nullptr.
const char* unused_field_set(const event& e) {
  const bool launch = e.kind == event_kind::launch;
  const bool copy_or_set = e.kind == event_kind::memcpy || e.kind == event_kind::memset;
  const bool block = e.kind == event_kind::alloc || e.kind == event_kind::free;
  if (e.reserved != 0) return "reserved";
  if (launch && e.address != 0) return "address";
  if (!copy_or_set && e.source != 0) return "source";
  if (!(launch || copy_or_set || block) && e.bytes != 0) return "bytes";
  if (!launch && e.correlation != 0) return "correlation";
  if (e.duration_ns != 0 && (e.flags & event_flags::timed) == 0) return "duration_ns (the event is not timed)";
  if (!launch && e.shared_mem != 0) return "shared_mem";
  if (!launch && !(e.grid == dims{} && e.block == dims{})) return "grid/block (1, 1, 1 for every kind but launch)";
  return nullptr;
}

void validate_impl(const trace& t) {
  if (t.granularity > max_granularity) {
    throw invalid{sec_meta, 0, "granularity " + std::to_string(t.granularity) + " exceeds the limit of " +
                                   std::to_string(max_granularity) + " bytes"};
  }
  for (std::size_t k = 0; k < t.kernels.size(); ++k) {
    const kernel_info& ki = t.kernels[k];
    std::uint64_t end = 0;
    for (std::size_t i = 0; i < ki.params.size(); ++i) {
      const param_slot& p = ki.params[i];
      const std::string where = "kernel " + std::to_string(k) + " ('" + ki.name + "') parameter " +
                                std::to_string(i) + " (offset " + std::to_string(p.offset) + ", size " +
                                std::to_string(p.size) + ")";
      if (p.size == 0) throw invalid{sec_kernels, k, where + ": size 0"};
      if (p.offset < end) throw invalid{sec_kernels, k, where + ": overlaps the previous parameter"};
      end = std::uint64_t{p.offset} + p.size;
      if (end > ki.param_bytes) {
        throw invalid{sec_kernels, k, where + ": ends past the parameter block of " +
                                          std::to_string(ki.param_bytes) + " bytes"};
      }
    }
  }
  if (t.streams.empty()) throw invalid{sec_streams, 0, "no streams (index 0, the default stream, must exist)"};

  std::uint64_t allocated = 0;  // every alloc's bytes, against max_allocated_bytes
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const event& e = t.events[i];
    const auto kind = static_cast<std::uint8_t>(e.kind);
    if (kind < 1 || kind > event_kind_max) {
      throw invalid{sec_events, i, event_label(t, i) + ": unknown kind " + std::to_string(kind)};
    }
    if (i > 0 && e.seq <= t.events[i - 1].seq) {
      throw invalid{sec_events, i, event_label(t, i) + ": sequence number not above the previous event's (" +
                                       std::to_string(t.events[i - 1].seq) + ")"};
    }
    if (e.stream >= t.streams.size()) {
      throw invalid{sec_events, i, event_label(t, i) + ": stream index " + std::to_string(e.stream) +
                                       " out of range (" + std::to_string(t.streams.size()) + " streams)"};
    }
    std::uint8_t allowed = 0;
    switch (e.kind) {
      case event_kind::alloc: allowed = event_flags::evictable | event_flags::preexisting; break;
      case event_kind::launch:
        allowed = event_flags::never_replay | event_flags::names_event | event_flags::writes_observed |
                  event_flags::timed;
        break;
      case event_kind::memcpy:
      case event_kind::memset: allowed = event_flags::timed; break;
      default: break;
    }
    if ((e.flags & ~allowed) != 0) {
      throw invalid{sec_events, i, event_label(t, i) + ": flags " + std::to_string(e.flags) +
                                       " not allowed for this kind"};
    }
    const auto copy = static_cast<std::uint8_t>(e.copy);
    if (copy > copy_kind_max || (e.kind != event_kind::memcpy && copy != 0)) {
      throw invalid{sec_events, i, event_label(t, i) + ": invalid copy kind " + std::to_string(copy)};
    }
    if (e.kind == event_kind::launch) {
      if (e.kernel >= t.kernels.size()) {
        throw invalid{sec_events, i, event_label(t, i) + ": kernel index " + std::to_string(e.kernel) +
                                         " out of range (" + std::to_string(t.kernels.size()) + " kernels)"};
      }
      if (e.param_offset % arena_alignment != 0) {
        throw invalid{sec_events, i, event_label(t, i) + ": parameter offset " + std::to_string(e.param_offset) +
                                         " is not 8-aligned"};
      }
      if (e.param_offset > t.arena.size() || e.bytes > t.arena.size() - e.param_offset) {
        throw invalid{sec_events, i, event_label(t, i) + ": parameter bytes [" + std::to_string(e.param_offset) +
                                         ", +" + std::to_string(e.bytes) + ") outside the arena of " +
                                         std::to_string(t.arena.size()) + " bytes"};
      }
    } else if (e.kernel != 0 || e.param_offset != 0) {
      throw invalid{sec_events, i, event_label(t, i) + ": kernel/parameter fields set on a non-launch event"};
    }
    if (const char* field = unused_field_set(e)) {
      throw invalid{sec_events, i, event_label(t, i) + ": field " + field + " is set, but this kind does not use it"};
    }
    if (e.kind == event_kind::memset && e.source > 0xFF) {
      throw invalid{sec_events, i, event_label(t, i) + ": byte value " + std::to_string(e.source) + " above 255"};
    }
    if (e.kind != event_kind::launch && e.bytes > max_event_bytes) {
      throw invalid{sec_events, i, event_label(t, i) + ": " + std::to_string(e.bytes) +
                                       " bytes exceed the limit of " + std::to_string(max_event_bytes)};
    }
    if (e.kind == event_kind::alloc) {
      if (e.bytes > ~std::uint64_t{0} - e.address) {
        throw invalid{sec_events, i, event_label(t, i) + ": block at " + std::to_string(e.address) + " of " +
                                         std::to_string(e.bytes) + " bytes ends past the 64-bit address space"};
      }
      allocated += e.bytes;  // no wrap: each term is at most 2^48 and the sum is checked below 2^56
      if (allocated > max_allocated_bytes) {
        throw invalid{sec_events, i, event_label(t, i) + ": the trace's allocations add up to more than the limit of " +
                                         std::to_string(max_allocated_bytes) + " bytes"};
      }
    }
  }

  const auto check_records = [&](const std::vector<write_record>& records, std::uint32_t section, const char* what) {
    for (std::size_t w = 0; w < records.size(); ++w) {
      const write_record& r = records[w];
      const std::string label = std::string(what) + " " + std::to_string(w);
      if (w > 0 && !(records[w - 1] < r)) {
        throw invalid{section, w, label + ": not in strictly increasing (seq, address) order"};
      }
      auto it = std::lower_bound(t.events.begin(), t.events.end(), r.seq,
                                 [](const event& e, std::uint64_t s) { return e.seq < s; });
      if (it == t.events.end() || it->seq != r.seq || it->kind != event_kind::launch ||
          (it->flags & event_flags::writes_observed) == 0) {
        throw invalid{section, w, label + ": seq " + std::to_string(r.seq) + " is not an observed launch"};
      }
    }
  };
  check_records(t.writes, sec_writes, "write");
  check_records(t.fresh, sec_fresh, "fresh record");

  for (std::size_t a = 0; a < t.launch_attributes.size(); ++a) {
    const launch_attribute_record& r = t.launch_attributes[a];
    const std::string label = "launch attribute " + std::to_string(a);
    if (a > 0 && r.seq < t.launch_attributes[a - 1].seq) {
      throw invalid{sec_lattrs, a, label + ": not in increasing seq order"};
    }
    if (r.attribute.id == device::launch_attribute_id::ignore) {
      throw invalid{sec_lattrs, a, label + ": id 0 (an ignored entry is not recorded)"};
    }
    auto it = std::lower_bound(t.events.begin(), t.events.end(), r.seq,
                               [](const event& e, std::uint64_t s) { return e.seq < s; });
    if (it == t.events.end() || it->seq != r.seq || it->kind != event_kind::launch) {
      throw invalid{sec_lattrs, a, label + ": seq " + std::to_string(r.seq) + " is not a launch"};
    }
  }
}

// ---- decoding helpers ---------------------------------------------------------------------------

class decoder {
 public:
  decoder(std::span<const std::byte> bytes, std::string_view source) : bytes_(bytes), source_(source) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw trace_format_error("trace " + std::string(source_) + ": " + what);
  }
  [[noreturn]] void fail_at(std::uint64_t offset, const std::string& what) const {
    fail(what + " (at byte offset " + std::to_string(offset) + ")");
  }

  template <class T>
  T get(std::size_t at) const {
    T v;
    std::memcpy(&v, bytes_.data() + at, sizeof(T));
    return v;
  }

  std::span<const std::byte> bytes_;
  std::string_view source_;
};

// Reads records inside one section, checking every length against what remains.
class section_cursor {
 public:
  section_cursor(const decoder& d, std::uint32_t id, std::size_t offset, std::size_t size)
      : d_(d), id_(id), begin_(offset), pos_(offset), end_(offset + size) {}

  [[noreturn]] void fail(const std::string& what) const {
    d_.fail_at(pos_, std::string(section_name(id_)) + " section: " + what);
  }
  [[nodiscard]] std::size_t remaining() const { return end_ - pos_; }
  [[nodiscard]] std::size_t position() const { return pos_; }
  void need(std::size_t n, const char* what) const {
    if (remaining() < n) {
      fail(std::string("truncated ") + what + ": needs " + std::to_string(n) + " bytes, " +
           std::to_string(remaining()) + " left in the section");
    }
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v = d_.get<T>(pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> take(std::size_t n, const char* what) {
    need(n, what);
    auto s = d_.bytes_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  const decoder& d_;
  std::uint32_t id_;
  [[maybe_unused]] std::size_t begin_;
  std::size_t pos_;
  std::size_t end_;
};

struct dir_entry {
  std::uint32_t id = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t count = 0;
};

}  // namespace

std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t seed) noexcept {
  std::uint32_t c = ~seed;
  for (std::byte b : bytes) c = crc_table[(c ^ static_cast<std::uint8_t>(b)) & 0xFFU] ^ (c >> 8);
  return ~c;
}

void validate(const trace& t) {
  try {
    validate_impl(t);
  } catch (const invalid& bad) {
    throw trace_format_error("invalid trace: " + bad.what);
  }
}

// ---- writer --------------------------------------------------------------------------------------

std::vector<std::byte> encode_trace(const trace& t) {
  validate(t);
  byte_writer w;
  w.out.reserve(header_size + written_sections * dir_entry_size + t.events.size() * event_record_size +
                t.arena.size() + (t.writes.size() + t.fresh.size()) * write_record_size +
                t.launch_attributes.size() * attribute_record_size + 4096);
  w.out.resize(header_size + written_sections * dir_entry_size, std::byte{0});

  std::vector<dir_entry> dir;
  auto section = [&](std::uint32_t id, std::uint64_t count, auto&& body) {
    w.pad8();
    dir_entry d;
    d.id = id;
    d.offset = w.out.size();
    d.count = count;
    body();
    d.size = w.out.size() - d.offset;
    dir.push_back(d);
  };

  section(sec_meta, 1, [&] {
    w.put<std::uint64_t>(t.granularity);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(t.device.size()));
    w.put<std::uint32_t>(0);
    w.put_bytes(t.device.data(), t.device.size());
  });
  section(sec_kernels, t.kernels.size(), [&] {
    for (const kernel_info& k : t.kernels) {
      w.put<std::uint64_t>(k.handle);
      w.put<std::uint32_t>(k.param_bytes);
      w.put<std::uint32_t>(static_cast<std::uint32_t>(k.name.size()));
      w.put<std::uint32_t>(static_cast<std::uint32_t>(k.params.size()));
      w.put<std::uint32_t>(k.never_replay ? kernel_flag_never_replay : 0);
      w.put_bytes(k.name.data(), k.name.size());
      for (const param_slot& p : k.params) {
        w.put<std::uint32_t>(p.offset);
        w.put<std::uint32_t>(p.size);
      }
    }
  });
  section(sec_streams, t.streams.size(), [&] {
    for (std::uint64_t s : t.streams) w.put<std::uint64_t>(s);
  });
  section(sec_events, t.events.size(), [&] {
    for (const event& e : t.events) {
      w.put<std::uint64_t>(e.seq);
      w.put<std::uint64_t>(e.time_ns);
      w.put<std::uint8_t>(static_cast<std::uint8_t>(e.kind));
      w.put<std::uint8_t>(e.flags);
      w.put<std::uint8_t>(static_cast<std::uint8_t>(e.copy));
      w.put<std::uint8_t>(e.reserved);
      w.put<std::uint32_t>(e.stream);
      w.put<std::uint64_t>(e.address);
      w.put<std::uint64_t>(e.source);
      w.put<std::uint64_t>(e.bytes);
      w.put<std::uint64_t>(e.param_offset);
      w.put<std::uint64_t>(e.correlation);
      w.put<std::uint64_t>(e.duration_ns);
      w.put<std::uint32_t>(e.kernel);
      w.put<std::uint32_t>(e.shared_mem);
      for (std::uint32_t v : {e.grid.x, e.grid.y, e.grid.z, e.block.x, e.block.y, e.block.z}) w.put<std::uint32_t>(v);
    }
  });
  section(sec_arena, t.arena.size(), [&] { w.put_bytes(t.arena.data(), t.arena.size()); });
  const auto records = [&](std::uint32_t id, const std::vector<write_record>& rs) {
    section(id, rs.size(), [&] {
      for (const write_record& r : rs) {
        w.put<std::uint64_t>(r.seq);
        w.put<std::uint64_t>(r.address);
      }
    });
  };
  records(sec_writes, t.writes);
  records(sec_fresh, t.fresh);
  section(sec_lattrs, t.launch_attributes.size(), [&] {
    for (const launch_attribute_record& r : t.launch_attributes) {
      w.put<std::uint64_t>(r.seq);
      w.put<std::uint32_t>(r.attribute.id);
      w.put<std::uint32_t>(0);
      w.put_bytes(r.attribute.value.data(), r.attribute.value.size());
    }
  });

  // Directory.
  std::size_t at = header_size;
  for (const dir_entry& d : dir) {
    const auto body = std::span<const std::byte>(w.out).subspan(d.offset, d.size);
    w.patch<std::uint32_t>(at + 0, d.id);
    w.patch<std::uint32_t>(at + 4, crc32(body));
    w.patch<std::uint64_t>(at + 8, d.offset);
    w.patch<std::uint64_t>(at + 16, d.size);
    w.patch<std::uint64_t>(at + 24, d.count);
    at += dir_entry_size;
  }
  // Header.
  std::memcpy(w.out.data(), file_magic.data(), file_magic.size());
  w.patch<std::uint16_t>(8, trace_version_major);
  w.patch<std::uint16_t>(10, trace_version_minor);
  w.patch<std::uint32_t>(12, static_cast<std::uint32_t>(header_size));
  w.patch<std::uint64_t>(16, w.out.size());
  w.patch<std::uint32_t>(24, static_cast<std::uint32_t>(dir.size()));
  w.patch<std::uint32_t>(28, 0);
  w.patch<std::uint64_t>(32, header_size);
  w.patch<std::uint32_t>(40, crc32(std::span<const std::byte>(w.out).subspan(header_size, dir.size() * dir_entry_size)));
  w.patch<std::uint32_t>(60, crc32(std::span<const std::byte>(w.out).first(60)));
  return std::move(w.out);
}

// ---- reader --------------------------------------------------------------------------------------

trace decode_trace(std::span<const std::byte> bytes, std::string_view source) {
  const decoder d(bytes, source);
  const std::size_t size = bytes.size();

  // Header.
  if (size < header_size) {
    d.fail("truncated: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(header_size) +
           "-byte header");
  }
  if (std::memcmp(bytes.data(), file_magic.data(), file_magic.size()) != 0) {
    d.fail_at(0, "not a sublinear trace (bad magic; expected \"SLTRACE\\x1a\")");
  }
  const auto major = d.get<std::uint16_t>(8);
  const auto minor = d.get<std::uint16_t>(10);
  if (major != trace_version_major) {
    d.fail_at(8, "unsupported format version " + std::to_string(major) + "." + std::to_string(minor) +
                     " (this reader reads " + std::to_string(trace_version_major) + ".x)");
  }
  const auto stored_header_crc = d.get<std::uint32_t>(60);
  const auto header_crc = crc32(bytes.first(60));
  if (stored_header_crc != header_crc) {
    d.fail_at(60, "header checksum mismatch (stored " + std::to_string(stored_header_crc) + ", computed " +
                      std::to_string(header_crc) + ")");
  }
  if (d.get<std::uint32_t>(12) != header_size) {
    d.fail_at(12, "header size " + std::to_string(d.get<std::uint32_t>(12)) + ", expected " +
                      std::to_string(header_size));
  }
  const auto file_bytes = d.get<std::uint64_t>(16);
  if (file_bytes > size) {
    d.fail("truncated: the header says " + std::to_string(file_bytes) + " bytes, the input has " +
           std::to_string(size));
  }
  if (file_bytes < size) {
    d.fail("trailing garbage: the header says " + std::to_string(file_bytes) + " bytes, the input has " +
           std::to_string(size));
  }
  const auto section_count = d.get<std::uint32_t>(24);
  if (section_count > max_sections) {
    d.fail_at(24, "section count " + std::to_string(section_count) + " exceeds the limit of " +
                      std::to_string(max_sections));
  }
  if (d.get<std::uint32_t>(28) != 0) d.fail_at(28, "unknown header flags " + std::to_string(d.get<std::uint32_t>(28)));
  const auto dir_offset = d.get<std::uint64_t>(32);
  const std::uint64_t dir_size = std::uint64_t{section_count} * dir_entry_size;
  if (dir_offset < header_size || dir_offset > size || dir_size > size - dir_offset) {
    d.fail_at(32, "section directory at offset " + std::to_string(dir_offset) + " (" + std::to_string(dir_size) +
                      " bytes) lies outside the file");
  }
  const auto dir_crc = crc32(bytes.subspan(dir_offset, dir_size));
  if (dir_crc != d.get<std::uint32_t>(40)) {
    d.fail_at(40, "section directory checksum mismatch (stored " + std::to_string(d.get<std::uint32_t>(40)) +
                      ", computed " + std::to_string(dir_crc) + ")");
  }

  // Directory.
  std::array<dir_entry, sec_lattrs + 1> found{};
  std::array<bool, sec_lattrs + 1> have{};
  for (std::uint32_t i = 0; i < section_count; ++i) {
    const std::size_t at = dir_offset + std::size_t{i} * dir_entry_size;
    dir_entry e;
    e.id = d.get<std::uint32_t>(at);
    const auto crc = d.get<std::uint32_t>(at + 4);
    e.offset = d.get<std::uint64_t>(at + 8);
    e.size = d.get<std::uint64_t>(at + 16);
    e.count = d.get<std::uint64_t>(at + 24);
    const std::string label = "section " + std::to_string(i) + " (" + section_name(e.id) + ")";
    if (e.offset % 8 != 0 || e.offset < dir_offset + dir_size || e.offset > size || e.size > size - e.offset) {
      d.fail_at(at + 8, label + ": bytes [" + std::to_string(e.offset) + ", +" + std::to_string(e.size) +
                            ") are misaligned, overlap the header or directory, or lie outside the file of " +
                            std::to_string(size) + " bytes");
    }
    const auto actual = crc32(bytes.subspan(e.offset, e.size));
    if (actual != crc) {
      d.fail_at(e.offset, label + ": checksum mismatch (stored " + std::to_string(crc) + ", computed " +
                              std::to_string(actual) + ")");
    }
    if (e.id >= 1 && e.id <= sec_lattrs) {
      if (have[e.id]) d.fail_at(at, label + ": appears twice");
      have[e.id] = true;
      found[e.id] = e;
    }
    // Other ids: sections of a later minor version, checked and skipped.
  }
  for (std::uint32_t id : required_sections) {
    if (!have[id]) d.fail(std::string("missing required section ") + section_name(id));
  }

  trace t;
  // META.
  {
    const dir_entry& e = found[sec_meta];
    section_cursor c(d, sec_meta, e.offset, e.size);
    if (e.count != 1) c.fail("record count " + std::to_string(e.count) + ", expected 1");
    t.granularity = c.get<std::uint64_t>("granularity");
    const auto name_bytes = c.get<std::uint32_t>("device name length");
    if (c.get<std::uint32_t>("reserved field") != 0) c.fail("reserved field is not zero");
    if (name_bytes != c.remaining()) {
      c.fail("device name of " + std::to_string(name_bytes) + " bytes, but " + std::to_string(c.remaining()) +
             " bytes remain");
    }
    auto name = c.take(name_bytes, "device name");
    t.device.assign(reinterpret_cast<const char*>(name.data()), name.size());
  }
  // KERNELS.
  {
    const dir_entry& e = found[sec_kernels];
    section_cursor c(d, sec_kernels, e.offset, e.size);
    if (e.count > e.size / kernel_record_min) {
      c.fail("record count " + std::to_string(e.count) + " cannot fit in " + std::to_string(e.size) + " bytes");
    }
    t.kernels.reserve(static_cast<std::size_t>(e.count));
    for (std::uint64_t k = 0; k < e.count; ++k) {
      kernel_info ki;
      ki.handle = c.get<std::uint64_t>("kernel handle");
      ki.param_bytes = c.get<std::uint32_t>("kernel parameter size");
      const auto name_bytes = c.get<std::uint32_t>("kernel name length");
      const auto param_count = c.get<std::uint32_t>("kernel parameter count");
      const auto flags = c.get<std::uint32_t>("kernel flags");
      if ((flags & ~kernel_flag_never_replay) != 0) {
        c.fail("kernel " + std::to_string(k) + ": unknown flags " + std::to_string(flags));
      }
      ki.never_replay = (flags & kernel_flag_never_replay) != 0;
      auto name = c.take(name_bytes, "kernel name");
      ki.name.assign(reinterpret_cast<const char*>(name.data()), name.size());
      if (param_count > c.remaining() / 8) {
        c.fail("kernel " + std::to_string(k) + " ('" + ki.name + "'): " + std::to_string(param_count) +
               " parameters cannot fit in the " + std::to_string(c.remaining()) + " bytes left");
      }
      ki.params.resize(param_count);
      for (param_slot& p : ki.params) {
        p.offset = c.get<std::uint32_t>("parameter offset");
        p.size = c.get<std::uint32_t>("parameter size");
      }
      t.kernels.push_back(std::move(ki));
    }
    if (c.remaining() != 0) c.fail(std::to_string(c.remaining()) + " bytes left after the last kernel");
  }
  // STREAMS.
  {
    const dir_entry& e = found[sec_streams];
    section_cursor c(d, sec_streams, e.offset, e.size);
    if (e.count > e.size / 8 || e.size != e.count * 8) {
      c.fail(std::to_string(e.count) + " streams need " + std::to_string(e.count * 8) + " bytes, the section has " +
             std::to_string(e.size));
    }
    t.streams.resize(static_cast<std::size_t>(e.count));
    for (std::uint64_t& s : t.streams) s = c.get<std::uint64_t>("stream handle");
  }
  // EVENTS.
  {
    const dir_entry& e = found[sec_events];
    section_cursor c(d, sec_events, e.offset, e.size);
    if (e.count > e.size / event_record_size || e.size != e.count * event_record_size) {
      c.fail(std::to_string(e.count) + " events need " + std::to_string(e.count * event_record_size) +
             " bytes, the section has " + std::to_string(e.size));
    }
    t.events.resize(static_cast<std::size_t>(e.count));
    for (event& ev : t.events) {
      ev.seq = c.get<std::uint64_t>("seq");
      ev.time_ns = c.get<std::uint64_t>("time");
      ev.kind = static_cast<event_kind>(c.get<std::uint8_t>("kind"));
      ev.flags = c.get<std::uint8_t>("flags");
      ev.copy = static_cast<copy_kind>(c.get<std::uint8_t>("copy kind"));
      ev.reserved = c.get<std::uint8_t>("reserved");
      ev.stream = c.get<std::uint32_t>("stream");
      ev.address = c.get<std::uint64_t>("address");
      ev.source = c.get<std::uint64_t>("source");
      ev.bytes = c.get<std::uint64_t>("bytes");
      ev.param_offset = c.get<std::uint64_t>("parameter offset");
      ev.correlation = c.get<std::uint64_t>("correlation");
      ev.duration_ns = c.get<std::uint64_t>("duration");
      ev.kernel = c.get<std::uint32_t>("kernel");
      ev.shared_mem = c.get<std::uint32_t>("shared memory");
      for (std::uint32_t* v : {&ev.grid.x, &ev.grid.y, &ev.grid.z, &ev.block.x, &ev.block.y, &ev.block.z}) {
        *v = c.get<std::uint32_t>("dimension");
      }
    }
  }
  // ARENA.
  {
    const dir_entry& e = found[sec_arena];
    section_cursor c(d, sec_arena, e.offset, e.size);
    if (e.count != e.size) {
      c.fail("record count " + std::to_string(e.count) + " disagrees with the size " + std::to_string(e.size));
    }
    auto body = c.take(static_cast<std::size_t>(e.size), "arena");
    t.arena.assign(body.begin(), body.end());
  }
  // WRITES, and FRESH (1.1; a 1.0 file has none): (seq, address) records.
  const auto read_records = [&](std::uint32_t id, const char* what, std::vector<write_record>& out) {
    const dir_entry& e = found[id];
    section_cursor c(d, id, e.offset, e.size);
    if (e.count > e.size / write_record_size || e.size != e.count * write_record_size) {
      c.fail(std::to_string(e.count) + " " + what + " need " + std::to_string(e.count * write_record_size) +
             " bytes, the section has " + std::to_string(e.size));
    }
    out.resize(static_cast<std::size_t>(e.count));
    for (write_record& r : out) {
      r.seq = c.get<std::uint64_t>("record seq");
      r.address = c.get<std::uint64_t>("record address");
    }
  };
  read_records(sec_writes, "writes", t.writes);
  if (have[sec_fresh]) read_records(sec_fresh, "fresh records", t.fresh);
  // LATTRS (1.2; older files have none): (seq, id, reserved, 64-byte value) records.
  if (have[sec_lattrs]) {
    const dir_entry& e = found[sec_lattrs];
    section_cursor c(d, sec_lattrs, e.offset, e.size);
    if (e.count > e.size / attribute_record_size || e.size != e.count * attribute_record_size) {
      c.fail(std::to_string(e.count) + " launch attributes need " + std::to_string(e.count * attribute_record_size) +
             " bytes, the section has " + std::to_string(e.size));
    }
    t.launch_attributes.resize(static_cast<std::size_t>(e.count));
    for (launch_attribute_record& r : t.launch_attributes) {
      r.seq = c.get<std::uint64_t>("attribute seq");
      r.attribute.id = c.get<std::uint32_t>("attribute id");
      if (c.get<std::uint32_t>("attribute reserved field") != 0) c.fail("reserved field of a launch attribute is not zero");
      auto value = c.take(device::launch_attribute_value_bytes, "attribute value");
      std::copy(value.begin(), value.end(), r.attribute.value.begin());
    }
  }

  try {
    validate_impl(t);
  } catch (const invalid& bad) {
    std::uint64_t offset = 0;
    const dir_entry& e = found[bad.section];
    switch (bad.section) {
      case sec_events: offset = e.offset + bad.index * event_record_size; break;
      case sec_writes:
      case sec_fresh: offset = e.offset + bad.index * write_record_size; break;
      case sec_lattrs: offset = e.offset + bad.index * attribute_record_size; break;
      default: offset = e.offset; break;
    }
    d.fail_at(offset, std::string(section_name(bad.section)) + " section: " + bad.what);
  }
  return t;
}

// ---- files ------------------------------------------------------------------------------------------

namespace {

[[noreturn]] void io_error(const std::string& what, const std::string& path, int err) {
  throw error("trace file " + path + ": " + what + ": " + std::strerror(err));
}

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

void write_trace_file(const trace& t, const std::string& path) {
  const std::vector<std::byte> bytes = encode_trace(t);
  try {
    write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const error& e) {
    throw error(std::string("trace file: ") + e.what());
  }
}

trace read_trace_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) io_error("cannot open", path, errno);
  struct ::stat st {};
  if (::fstat(::fileno(f), &st) != 0) {
    const int err = errno;
    std::fclose(f);
    io_error("cannot stat", path, err);
  }
  // A device (/dev/zero), a pipe or a directory has no size to check in advance and may
  // never end: only regular files are read.
  if (!S_ISREG(st.st_mode)) {
    std::fclose(f);
    throw trace_format_error("trace file " + path + ": not a regular file (" + file_kind(st.st_mode) +
                             "); save the trace to a file and give that file's path");
  }
  const auto too_large = [&](std::uint64_t bytes) {
    std::fclose(f);
    throw trace_format_error("trace file " + path + ": " + std::to_string(bytes) + " bytes, more than the limit of " +
                             std::to_string(max_trace_file_bytes) + " bytes (1 GiB) for a trace file; a trace of the "
                             "iterations sublinear plans from (SUBLINEAR_TRACE_ITERATIONS, at most 2) is far "
                             "smaller: check that this is the trace you meant, or record a shorter run");
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_trace_file_bytes) too_large(static_cast<std::uint64_t>(st.st_size));
  std::vector<std::byte> bytes;
  bytes.reserve(static_cast<std::size_t>(st.st_size));
  std::array<std::byte, 1 << 16> chunk;
  for (;;) {
    const std::size_t n = std::fread(chunk.data(), 1, chunk.size(), f);
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
    if (bytes.size() > max_trace_file_bytes) too_large(bytes.size());  // it grew while being read
    if (n < chunk.size()) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) io_error("read error", path, err);
  return decode_trace(bytes, path);
}

}  // namespace sublinear::tracer
