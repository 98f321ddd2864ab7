// The predicted time of a planned iteration: the simulator's device time plus the host's
// work per launch, measured on an iteration that ended before it, and, for a plan no
// iteration has run, the VMM work of its evictions and offloads and the engine's write
// checks, at the device's cost.
//
// Note [Predicted iteration time]
// Rationale: the simulator (Note [Link timeline] in policy/simulator_offload.cpp) adds up
//   traced durations, recipes and copy stalls: device time only. A measured iteration also
//   holds the host's work around each launch and, planned, the engine's planned hooks:
//   mapping evicted blocks' pages again, dispatching replays, hashing for unseen writes.
// Approach: host_s_per_launch = max(0, active_s - device_s - observation_s - recording_s) /
//   launches of a measured iteration (active_s: from its first call into the engine to its
//   end; observation_s, recording_s: the collectors' write observation and recording,
//   work only a traced iteration does). The plan's own prediction (at_plan) measures on
//   the traced iteration and adds what a planned one does beyond it: its replayed
//   launches at the same cost per launch; the VMM work of its map-backs (remap_work: one
//   per pack and per evicted or offloaded block outside one, each taking pages a cached
//   free block held, whose next allocation maps again: two map, set access and unmap
//   cycles, at the probed cost, Note [VMM cost probe] in device/vmm_cost_probe.hpp); and
//   its write checks (Note [Write check work]: hashes, bytes and waits at the probed cost).
//   Each planned iteration is given, before it begins, the prediction from the last steady
//   iteration that ran the plan undiverged (whose cost per launch holds its VMM work and
//   checks: no such terms), or at_plan before any; never from itself.
// Limitations: host and device work are added, not overlapped (on the host device the
//   streams are worker threads beside the launching one). The engine's bookkeeping around
//   each map-back and chunk creation are not counted; docs/runtime.md gives the figures.
#pragma once

#include <cstddef>

#include "device/vmm_cost_probe.hpp"
#include "runtime/write_check_work.hpp"

namespace sublinear::policy {
struct iteration;
struct plan;
}  // namespace sublinear::policy

namespace sublinear::runtime {

// What a measured iteration spent (Note [Predicted iteration time]).
struct host_cost_sample {
  double active_s = 0.0;       // from its first call into the engine to its end
  double device_s = 0.0;       // the sum of its launches' traced durations
  std::size_t launches = 0;    // launches, copies and sets the engine intercepted
  double observation_s = 0.0;  // its write observation within active_s (traced only)
  double recording_s = 0.0;    // its collectors' recording within active_s (traced only)
};

// The pages a planned iteration maps again that a traced one does not (Note [Predicted
// iteration time]): one map-back per pack and per evicted or offloaded block outside a
// pack, with their bytes (whole granules), and as many displaced allocations.
struct remap_work {
  std::size_t map_backs = 0;
  std::size_t bytes = 0;  // of the map-backs
  [[nodiscard]] std::size_t cycles() const noexcept { return 2 * map_backs; }
  [[nodiscard]] std::size_t cycle_bytes() const noexcept { return 2 * bytes; }
};

[[nodiscard]] remap_work remaps_of(const policy::plan& plan, const policy::iteration& traced,
                                   std::size_t granularity);

struct iteration_time {
  double device_s = 0.0;           // the simulator's: traced launches, recompute, copy stalls
  double host_s_per_launch = 0.0;  // measured on an iteration before (or given, in tests)
  std::size_t launches = 0;        // the planned iteration's: traced plus replayed
  std::size_t replayed_launches = 0;
  double host_s = 0.0;             // host_s_per_launch * launches
  remap_work remaps;               // counted in vmm_s (none where the measure holds them)
  std::size_t vmm_calls = 0;       // remaps.cycles() * the probe's calls per cycle
  double vmm_s = 0.0;              // the device's cost of remaps.cycles() and cycle_bytes()
  write_check_work checks;         // counted in check_s (none where the measure holds them)
  double check_s = 0.0;            // the device's cost of the checks' hashes, waits and copies
  double predicted_s = 0.0;        // device_s + host_s + vmm_s + check_s
};

// max(0, active_s - device_s - observation_s - recording_s) / launches; 0 without launches.
[[nodiscard]] double host_s_per_launch(const host_cost_sample& s) noexcept;

[[nodiscard]] iteration_time predict_iteration_time(double device_s, double host_s_per_launch,
                                                    std::size_t traced_launches,
                                                    std::size_t replayed_launches,
                                                    const remap_work& remaps = {},
                                                    const device::vmm_cycle_cost& cycle = {},
                                                    const write_check_work& checks = {},
                                                    const hash_cost& hash = {}) noexcept;

}  // namespace sublinear::runtime
