// The predicted time of a planned iteration: the simulator's device time plus the host's
// own work per launch, measured on an iteration that ended before it.
//
// Note [Predicted iteration time]
// Rationale: the simulator (Note [Link timeline] in policy/simulator_offload.cpp) adds up
//   traced durations, recipes and copy stalls: device time only. A measured iteration also
//   holds the host's work around each launch (the launch, interception, the engine's
//   hooks, allocation, a replay's dispatch), most of the time where launches are small.
// Approach: host_s_per_launch = max(0, active_s - device_s - observation_s) / launches of
//   a measured iteration: active_s runs from its first call into the engine to its end
//   (not a paired twin's turn or the data loader before it); observation_s is the write
//   observation a traced iteration does and a planned one does not (the collectors'
//   hashing around each launch, tracer::recorder::observation_ns, and the fill of fresh
//   blocks, Note [Filled fresh blocks]). A planned iteration runs the traced launches plus
//   the plan's replayed ones: predicted = the simulator's device_s + host_s_per_launch *
//   (traced launches + replayed launches). The plan's own prediction (at_plan) measures on
//   the traced iteration it was made from. Each planned iteration is given, before it
//   begins, the prediction from the last steady iteration that ran the plan undiverged
//   (device_s there: traced durations, its recipes', its copy stalls), or the traced one
//   before any; never from itself.
// Limitations: a traced iteration also records each launch and maps its blocks' pages for
//   the first time, and a validating one keeps copies: their host cost differs from a
//   steady iteration's, so at_plan can be off (docs/runtime.md gives the figures), and
//   validating iterations are not measured. Host and device work are added, not
//   overlapped: a device-bound iteration hides host work, which then reads as zero, not
//   negative. The steady-iteration prediction tracks the run it measures: it predicts
//   across plans (a plan made again), not before any planned iteration ran.
#pragma once

#include <cstddef>

namespace sublinear::runtime {

// What the traced iteration measured (Note [Predicted iteration time]).
struct host_cost_sample {
  double active_s = 0.0;       // from its first call into the engine to its end
  double device_s = 0.0;       // the sum of its launches' traced durations
  std::size_t launches = 0;    // launches, copies and sets the engine intercepted
  double observation_s = 0.0;  // its write observation within active_s (traced only)
};

struct iteration_time {
  double device_s = 0.0;           // the simulator's: traced launches, recompute, copy stalls
  double host_s_per_launch = 0.0;  // measured on the traced iteration (or given, in tests)
  std::size_t launches = 0;        // the planned iteration's: traced plus replayed
  double host_s = 0.0;             // host_s_per_launch * launches
  double predicted_s = 0.0;        // device_s + host_s
};

// max(0, active_s - device_s - observation_s) / launches; 0 without launches.
[[nodiscard]] double host_s_per_launch(const host_cost_sample& s) noexcept;

[[nodiscard]] iteration_time predict_iteration_time(double device_s, double host_s_per_launch,
                                                    std::size_t traced_launches,
                                                    std::size_t replayed_launches) noexcept;

}  // namespace sublinear::runtime
