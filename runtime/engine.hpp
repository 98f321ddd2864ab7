// The replay engine: traces an iteration, plans, then evicts and regenerates activations
// on every later iteration, under a strict budget. This header is its public face; the
// types it exchanges with collectors, devices and reports are in engine_types.hpp.
//
// Where the engine's code and Notes are:
//   engine.cpp             the lifecycle, interception and this class (Note [Iteration
//                          lifecycle])
//   engine_plan.cpp        the plan from the trace (Note [Recurring allocations]; the
//                          budget arithmetic is policy/planning_overhead.hpp's)
//   engine_regenerate.cpp  eviction, regeneration, validation, prefetch (Note [Replay at
//                          the launch], [Failed recipe], [Recipe prefix], [Recipe scratch],
//                          [Stray pointer words], [Prefetch])
//   engine_pressure.cpp    the pressure valve (Note [Pressure valve])
//   engine_offload.cpp     offloading while tracing (Note [Offloading the traced iteration])
//   detail/engine_impl.hpp the engine's state, engine::impl, shared by those files
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "policy/planning_overhead.hpp"
#include "runtime/engine_types.hpp"
#include "runtime/iteration_time.hpp"

namespace sublinear::tracer {
class recorder;
}  // namespace sublinear::tracer

namespace sublinear::runtime {

// The allocator settings the engine runs with (`on`; off restores PyTorch's): exact
// segments for large and small requests, so that mapped bytes follow live bytes (Note
// [Exact small segments] in allocator/detail/block_pool.hpp). The engine applies them when it starts
// and lifts them when it stops. A program on the host device that allocates its model
// before starting the engine applies them first, as sublinear's allocator in a real
// process has them from its first allocation: parameters left in a 2 MiB small segment
// cost a budget of a few MiB more than it can spare.
void use_engine_allocator_settings(allocator::caching_allocator& alloc, bool on = true);

class engine final : public allocator::allocation_observer {
 public:
  // The engine installs itself as the allocator's observer (forwarding to the recorder)
  // and starts tracing. `device` replays; both must outlive the engine.
  engine(allocator::caching_allocator& alloc, replay_device& device, tracer::recorder& recorder,
         engine_options options);
  ~engine() override;
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Interception, called by a collector at launch ENTER and EXIT.
  void before_launch(const launch_view& op);
  void after_launch(const launch_view& op);
  // An iteration boundary (explicit marker).
  void mark_iteration();

  // allocation_observer
  bool place_evictable(std::size_t size, device::stream_handle stream) override;
  std::optional<allocator::pack_slot> pack_slot_for(std::size_t size, device::stream_handle stream) override;
  void on_allocate(void* ptr, std::size_t size, device::stream_handle stream, bool evictable) override;
  void on_free(void* ptr, std::size_t size, device::stream_handle stream) override;
  bool defer_free(void* ptr, std::size_t size, device::stream_handle stream) override;

  [[nodiscard]] engine_state state() const;
  [[nodiscard]] std::vector<iteration_report> iterations() const;
  [[nodiscard]] std::vector<eviction_record> evictions() const;
  [[nodiscard]] std::vector<timeline_event> timeline() const;
  // Why there is no plan, if there is none ("" otherwise): infeasible budget, etc.
  [[nodiscard]] std::string plan_error() const;
  // The budget in bytes the current plan was made for (0: none).
  [[nodiscard]] std::size_t budget() const;
  // Predicted peak of the current plan (0: none).
  [[nodiscard]] std::size_t predicted_peak() const;
  // Launches the current plan replays per iteration (0: none). A planned iteration
  // replays no more unless the pressure valve evicted something (Note [Prefetch]).
  [[nodiscard]] std::size_t planned_recomputed_launches() const;
  // The current plan's offloads as the simulator predicts them, and the link it was made
  // for (Note [Offload execution] in engine_swap.cpp).
  struct plan_link {
    std::size_t offloads = 0;
    std::size_t offloaded_bytes = 0;  // each way, per iteration
    std::size_t host_bytes = 0;       // the host pool the plan's slots need
    double link_busy_s = 0.0;
    double predicted_stall_s = 0.0;
    // The simulator's iteration, device time only: traced launches, recompute, stalls
    // (the predicted iteration time adds the host's: predicted_time()).
    double predicted_device_s = 0.0;
    double to_host_bytes_per_s = 0.0, to_device_bytes_per_s = 0.0;
    std::string source;   // where the bandwidth came from
    std::string refused;  // why offload is off for the run ("" if it is not)
  };
  [[nodiscard]] plan_link planned_link() const;
  // The current plan's predicted iteration time (Note [Predicted iteration time] in
  // iteration_time.hpp; all zero: no plan).
  struct plan_time {
    iteration_time at_plan;      // made with the plan, from the traced iteration
    iteration_time next;         // for the next planned iteration, from the latest measure
    host_cost_sample traced;     // the traced iteration the plan was made from
    host_cost_sample measured;   // the iteration host_s_per_launch of `next` comes from
    remap_work remaps;           // the plan's map-back cycles per iteration
    device::vmm_cycle_cost vmm_cycle;  // the device's, probed at the first plan (not with a given cost)
    write_check_work checks;     // the plan's write checks per iteration (Note [Write check work])
    hash_cost hash;              // the device's, probed at the first plan (not with a given cost)
    std::string measured_on;     // "traced iteration N", "planned iteration N" or "given"
  };
  [[nodiscard]] plan_time predicted_time() const;
  // The traced iteration's peak of mapped bytes the last plan's overhead was taken from
  // (Note [Planning overhead]; 0 before any). Under an absolute budget the traced
  // iterations offload, and this is the peak they would have mapped without it, not the
  // peak they mapped: `sublinear plan --mapped-peak` needs this one to make the same plan.
  [[nodiscard]] std::size_t planning_mapped_peak() const;
  // The cache allowance the current plan was made with (Note [Scaled cache allowance]).
  [[nodiscard]] policy::cache_allowance_mode plan_allowance() const;
  // What the current plan recomputes against what any plan must (all zero: no plan).
  struct plan_compute {
    double added_s = 0.0;   // the plan's added compute per iteration (traced durations)
    double floor_s = 0.0;   // the recompute floor at the planner's share of the budget
                            // (Note [Recompute floor] in policy/recompute_floor.hpp)
    bool floor_with_offload = false;  // floor_s bounds added time over plans that may also
                                      // offload (Note [Offload floor]), not compute
    double traced_s = 0.0;  // the traced iteration's compute
    // Wall time the program paused at the iteration marker to make this plan: the traced
    // iteration's analysis, the planner, the floor and the host pool (in no iteration's time).
    double planning_s = 0.0;
  };
  [[nodiscard]] plan_compute planned_compute() const;

  // Writes a line of the runtime's log ("sublinear: " + line; warnings marked) where
  // SUBLINEAR_LOG sends it, when its level is enabled: for the layers around the engine.
  void log(log_level level, const std::string& line) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sublinear::runtime
