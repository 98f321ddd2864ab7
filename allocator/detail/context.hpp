// What every component of the caching allocator shares: the device it maps on, the events
// it records, the options (some switched at run time), and the statistics they all count
// into. Not a component: the allocator owns one, and each component keeps a reference.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "allocator/caching_allocator.hpp"
#include "allocator/device_types.hpp"
#include "sublinear/error.hpp"

namespace sublinear::allocator::detail {

struct context {
  // Checks the options (config_error) and rounds the segment sizes to the granularity.
  context(vmm& device, stream_events& events, options opts);
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  vmm& device;
  stream_events& events;
  options opts;
  std::size_t granularity = 0;
  std::size_t physical_capacity = 0;
  stats st;

  // Mapped bytes (the budgeted quantity, Note [Chunk pool]) change by `delta`.
  void note_mapped(std::ptrdiff_t delta) noexcept {
    st.mapped = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(st.mapped) + delta);
    st.mapped_peak = std::max(st.mapped_peak, st.mapped);
  }
  // `bytes` more can be mapped under the budget.
  [[nodiscard]] bool fits(std::size_t bytes) const noexcept { return st.mapped + bytes <= st.budget; }
  // Blocks the host until everything queued on `stream` so far has run.
  void wait_for_stream(stream_handle stream);
  // "sublinear: <what> on the <device> device failed (<status>: <detail>)".
  [[nodiscard]] device_error device_failure(const std::string& what, vmm_status status) const;
};

}  // namespace sublinear::allocator::detail
