// What mapping a block's pages again costs the host on a device: a short probe of the VMM
// calls an evicted block's pages go through between its eviction and its regeneration.
//
// Note [VMM cost probe]
// Rationale: a planned iteration gives an evicted block's pages back and maps them again
//   before its next use; a traced iteration does neither. The prediction of a plan no
//   iteration has run (Note [Predicted iteration time] in runtime/iteration_time.hpp)
//   needs the host time of that round trip on the device actually used.
// Approach: in a reservation of its own, the probe runs map, set_access and unmap cycles of
//   one chunk (a restore mostly takes a chunk handed off or pooled: the ResNet-434 demo's
//   steady iterations create a chunk for about one map in ten) at two sizes, one granule
//   and `large_granules`, `rounds` times each, and keeps the median of each size. The line
//   through the two medians gives a cost per cycle and a cost per byte (the host device's
//   set_access pre-faults every page, so bytes matter there).
// Limitations: raw device calls, not the allocator's bookkeeping around them, nor the
//   batching of unmaps (Note [Batched unmap]), nor create_chunk/release_chunk. A failed
//   call ends the probe with `error` set and zero costs. The probe holds `large_granules`
//   granules of physical memory while it runs.
#pragma once

#include <cstddef>
#include <string>

#include "device/vmm.hpp"

namespace sublinear::device {

struct vmm_cycle_cost {
  double cycle_s = 0.0;             // per map-back cycle, whatever its size
  double byte_s = 0.0;              // per byte mapped back
  std::size_t calls_per_cycle = 3;  // map, set access, unmap
  std::string device;               // vmm::name() of the device probed
  std::string error;                // why there are no costs ("" if measured)
  // The host time of `cycles` cycles mapping `bytes` in all.
  [[nodiscard]] double cost_s(std::size_t cycles, std::size_t bytes) const noexcept {
    return cycle_s * static_cast<double>(cycles) + byte_s * static_cast<double>(bytes);
  }
};

// Runs the probe on `device` (Note [VMM cost probe]). Never throws on a device failure.
[[nodiscard]] vmm_cycle_cost probe_vmm_cycle_cost(vmm& device, std::size_t large_granules = 16, int rounds = 9);

}  // namespace sublinear::device
