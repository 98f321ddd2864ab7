#include "allocator/detail/context.hpp"

#include "common/round_up.hpp"

namespace sublinear::allocator::detail {

context::context(vmm& d, stream_events& e, options o) : device(d), events(e), opts(o) {
  granularity = device.granularity();
  physical_capacity = device.physical_capacity();
  if (granularity == 0 || (granularity & (granularity - 1)) != 0)
    throw config_error("sublinear: the VMM backend reports a granularity that is not a power of two");
  if (opts.min_block == 0 || (opts.min_block & (opts.min_block - 1)) != 0)
    throw config_error("sublinear: options.min_block must be a power of two");
  if (opts.small_size > opts.small_segment || opts.min_large_alloc > opts.large_segment)
    throw config_error("sublinear: size classes must fit in their segments (small_size <= small_segment, "
                       "min_large_alloc <= large_segment)");
  opts.small_segment = round_up(opts.small_segment, granularity);
  opts.large_segment = round_up(opts.large_segment, granularity);
  opts.round_large = round_up(std::max<std::size_t>(opts.round_large, 1), granularity);
  st.budget = opts.budget == 0 ? physical_capacity : opts.budget;
}

void context::wait_for_stream(stream_handle stream) {
  event_handle e = events.record(stream);
  events.synchronize(e);
  events.release(e);
}

device_error context::device_failure(const std::string& what, vmm_status status) const {
  return device_error("sublinear: " + what + " on the " + device.name() + " device failed (" + to_string(status) +
                      ": " + device.last_error() + ")");
}

}  // namespace sublinear::allocator::detail
