// The link between device and host memory, as the planner models it. Plain data.
//
// Note [Offload]
// Rationale: recompute has a floor (the cheapest recipes still cost compute); a copy
//   engine moves bytes while the compute stream runs, so a buffer that is cheap to copy
//   and expensive to recompute is better sent to host memory and fetched back in time.
// Approach: each direction is its own FIFO queue with a bandwidth and a fixed latency
//   per copy; copies overlap compute but not other copies in the same direction. A
//   device->host copy starts when its buffer's last use before the gap is done and the
//   queue is free; the pages are released when it completes. A host->device copy starts
//   at its prefetch point (or when the queue frees) and the consumer waits for it: the
//   wait is a stall, added to the predicted iteration time. Host memory is a pinned pool
//   bounded by host_budget; offloads never hold more than it at once.
// Limitations: the link is modelled, not measured per copy; copies of one direction do
//   not share bandwidth with the other (true of PCIe and NVLink-C2C, full duplex).
#pragma once

#include <cstddef>

namespace sublinear::policy {

struct link_direction {
  double bytes_per_s = 0.0;  // 0: no link (offload impossible)
  double latency_s = 0.0;    // fixed cost per copy
  [[nodiscard]] double copy_s(std::size_t bytes) const noexcept {
    return bytes_per_s > 0.0 ? latency_s + static_cast<double>(bytes) / bytes_per_s : 0.0;
  }
};

struct link_model {
  link_direction to_host;    // device -> host
  link_direction to_device;  // host -> device
  [[nodiscard]] bool usable() const noexcept { return to_host.bytes_per_s > 0.0 && to_device.bytes_per_s > 0.0; }
};

// When one offload's copies run on the modelled link, in seconds from the start of the
// iteration (Note [Link timeline] in simulator_offload.cpp).
struct offload_times {
  double to_host_start = 0.0;
  double to_host_done = 0.0;
  double to_device_start = 0.0;
  double to_device_done = 0.0;
};

// keep/recompute/offload choice given to planners (SUBLINEAR_OFFLOAD).
enum class offload_mode : unsigned char {
  off,   // recompute only (keep or recompute)
  on,    // the planner chooses among keep, recompute and offload ("auto")
  only,  // keep or offload: no recompute
};

}  // namespace sublinear::policy
