// Small helpers of the event model (see Note [Event model] in events.hpp).
#include "tracer/events.hpp"

#include <algorithm>

namespace sublinear::tracer {

const char* to_string(event_kind kind) noexcept {
  switch (kind) {
    case event_kind::alloc: return "alloc";
    case event_kind::free: return "free";
    case event_kind::launch: return "launch";
    case event_kind::memcpy: return "memcpy";
    case event_kind::memset: return "memset";
    case event_kind::event_record: return "event_record";
    case event_kind::event_wait: return "event_wait";
    case event_kind::marker: return "marker";
  }
  return "unknown";
}

const char* to_string(copy_kind kind) noexcept {
  switch (kind) {
    case copy_kind::unknown: return "unknown";
    case copy_kind::host_to_device: return "host_to_device";
    case copy_kind::device_to_host: return "device_to_host";
    case copy_kind::device_to_device: return "device_to_device";
    case copy_kind::host_to_host: return "host_to_host";
  }
  return "unknown";
}

namespace {
// The records of `seq` in a list ordered by (seq, address).
std::span<const write_record> records_of(const std::vector<write_record>& records, std::uint64_t seq) {
  auto lo = std::lower_bound(records.begin(), records.end(), seq,
                             [](const write_record& w, std::uint64_t s) { return w.seq < s; });
  auto hi = std::upper_bound(lo, records.end(), seq,
                             [](std::uint64_t s, const write_record& w) { return s < w.seq; });
  return {records.data() + (lo - records.begin()), static_cast<std::size_t>(hi - lo)};
}
}  // namespace

std::span<const write_record> trace::writes_of(std::uint64_t seq) const { return records_of(writes, seq); }

std::span<const write_record> trace::fresh_of(std::uint64_t seq) const { return records_of(fresh, seq); }

std::span<const launch_attribute_record> trace::attributes_of(std::uint64_t seq) const {
  const auto lo = std::lower_bound(launch_attributes.begin(), launch_attributes.end(), seq,
                                   [](const launch_attribute_record& r, std::uint64_t s) { return r.seq < s; });
  auto hi = lo;
  while (hi != launch_attributes.end() && hi->seq == seq) ++hi;
  return {lo, hi};
}

std::vector<event_range> trace::marked_iterations() const {
  std::vector<event_range> out;
  std::size_t open = events.size();  // index after the last marker seen; size(): none yet
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind != event_kind::marker) continue;
    if (open != events.size()) out.push_back({open, i});
    open = i + 1;
  }
  return out;
}

}  // namespace sublinear::tracer
