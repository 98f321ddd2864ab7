// Plan previews: what a budget would cost on a recorded trace, per planner, before any
// training runs (`sublinear plan`).
//
// Note [Plan preview]
// Rationale: users choose a budget and a policy before a long run; the trace of one
//   iteration (SUBLINEAR_TRACE, or any recorder) holds everything a planner needs, so the
//   cost of a budget can be shown in a second instead of discovered in an hour.
// Approach: exactly what the engine does at the end of its traced iteration
//   (engine_plan.cpp, make_plan), on the last iteration of the trace file: analyse it at the trace's
//   granularity, resolve the budget ("x" against the traced peak of mapped bytes, "%"
//   against the device's memory), take off the allocator's overhead (traced mapped peak
//   less the iteration's live-byte peak), run each planner at what is left, and report
//   the simulator's figures. The predicted peak of mapped bytes is the plan's peak plus
//   that overhead, which is what the runtime then measures.
// Limitations: a trace file does not record the allocator's mapped peak; without it
//   (traced_mapped_peak = 0) the overhead is taken as zero and "x" is resolved against the
//   iteration's live-byte peak, so predictions count live buffers only. A planner that the
//   traced cache leaves too little plans again with the cache scaled to the budget, as the
//   engine does (Note [Scaled cache allowance]); its row says so. Beside the planners, the
//   recompute floor (Note [Recompute floor]) says how little any plan could add at the
//   same budget, so a planner's added compute can be read against it; with a link, the
//   offload floor (Note [Offload floor]) does the same for added time. Planning cost and
//   timing-based choices (costs are the traced durations) can differ from a later run
//   whose durations differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/budget.hpp"
#include "policy/link_model.hpp"
#include "tracer/events.hpp"

namespace sublinear::runtime {

struct plan_preview_options {
  policy::budget_spec budget;          // policy::parse_budget of what the user gave
  std::vector<std::string> policies;   // planner names (policy::planner_names())
  std::size_t device_capacity = 0;     // bytes, for "%" budgets (0: unknown)
  std::size_t traced_mapped_peak = 0;  // the traced iteration's peak of mapped bytes (0: unknown)
  bool packs = true;                   // as SUBLINEAR_PACKS (Note [Packs], policy/packs.hpp; and Note [Offload packs])
  bool offload_packs = true;           // also offloaded packs (as SUBLINEAR_OFFLOAD_PACKS)
  double fetch_margin = 0.25;          // as SUBLINEAR_FETCH_MARGIN (Note [Fetch margin])
  // Offload (Note [Offload] in policy/link_model.hpp): the mode, the link (a trace records
  // none: without one, nothing is offloaded) and the host budget (0: no bound).
  policy::offload_mode offload = policy::offload_mode::on;
  policy::link_model link{};
  std::size_t host_budget = 0;
  std::size_t threads = 0;  // as SUBLINEAR_PLANNING_THREADS (0: the CPUs the process may run on, at most 8)
};

// One planned offload, as `sublinear plan --evictions` lists it (launches as for evictions).
struct plan_preview_offload {
  std::uint32_t alloc_index = 0;
  std::size_t bytes = 0;
  std::string producer;
  std::size_t evict_after = 0;         // copied to host once this launch is done
  std::size_t release_before = 0;      // its pages released before this launch
  std::size_t fetch_after = 0;         // copied back once this launch is done
  std::size_t restore_before = 0;      // resident again before this launch
  std::string restore_kernel;
};

// One planned eviction, as `sublinear plan --evictions` lists it: which buffer, between which
// launches, and what is replayed to bring it back. Launches are positions in the traced
// iteration (0-based); kernels are named as the trace names them.
struct plan_preview_eviction {
  std::uint32_t alloc_index = 0;       // the target's index among the iteration's allocations
  std::size_t bytes = 0;
  std::string producer;                // the kernel of the target's first writer ("" if none)
  std::size_t evict_after = 0;         // dropped once this launch is done
  std::size_t restore_before = 0;      // resident again before this launch
  std::string restore_kernel;          // the kernel of launch restore_before
  std::vector<std::size_t> recipe;     // launches replayed, in order
  std::vector<std::string> recipe_kernels;
  std::vector<std::uint32_t> temporaries;       // alloc indices given scratch
  std::vector<std::uint32_t> also_regenerates;  // alloc indices
  double recipe_s = 0.0;               // the recipe launches' traced durations
};

// The least compute any plan adds at a planner budget (Note [Recompute floor] in
// policy/recompute_floor.hpp), with the launch that forces it.
struct plan_preview_floor {
  bool feasible = true;                // false: no plan can meet the budget (proved at `at`)
  double added_s = 0.0;
  std::size_t at = 0;                  // launch position; meaningful when `bound`
  bool bound = false;                  // some launch is over the budget with nothing evicted
  std::string at_kernel;
  std::size_t must_free = 0;           // bytes that must be out during launch `at`
  std::size_t can_free = 0;            // bytes that can be
  std::size_t planner_budget = 0;      // the budget it bounds
};

struct plan_preview_row {
  std::string planner;
  bool feasible = false;
  std::string error;                   // infeasible: the planner's message
  bool internal_error = false;         // the planner failed (a bug); `error` says how
  std::size_t smallest_feasible = 0;   // infeasible: the smallest budget it meets, as the runtime plans
                                       // (with the cache scaled to the budget where the traced cache is too much)
  // "traced" or "scaled": the cache allowance the row's plan was made with, as the engine
  // would choose it (Note [Scaled cache allowance] in policy/planning_overhead.hpp).
  std::string cache_allowance = "traced";
  std::size_t planner_budget = 0;      // the budget less the overhead of that allowance
  std::size_t predicted_peak = 0;      // the plan's peak (live buffers at page granularity)
  std::size_t predicted_mapped = 0;    // predicted_peak + the allocator's overhead
  double added_compute_s = 0.0;
  std::size_t recomputed_launches = 0;
  std::size_t evicted_buffers = 0;
  std::size_t evicted_bytes = 0;
  bool offload_unsupported = false;    // offload only, and this planner does not offload
  std::size_t offloaded_buffers = 0;
  std::size_t offloaded_bytes = 0;     // bytes over the link per iteration, each way
  std::size_t host_bytes = 0;          // the pinned host pool the offloads' slots take
  double link_busy_s = 0.0;            // both directions
  double predicted_stall_s = 0.0;
  double predicted_time_s = 0.0;       // launch costs + added compute + stalls
  std::vector<plan_preview_offload> offloads;
  double planning_s = 0.0;
  double floor_s = 0.0;                // the recompute floor at this row's planner budget (infinite: infeasible);
                                       // the offload floor of added time where offload is in effect
  std::vector<plan_preview_eviction> evictions;  // in the plan's order
};

// A buffer no recorded launch is seen producing (Note [Unknown producers] in
// tracer/analysis.cpp): never evicted. Listed so a trace shows what its tracer missed.
struct unproduced_buffer {
  std::uint32_t alloc_index = 0;
  std::size_t bytes = 0;
  std::string first_reader;  // the kernel that reads it first
};

// A launch whose attributes a replay cannot reproduce (Note [Launch attributes] in
// device/launch_attributes.hpp): not replayable, what it touches never evicted.
struct unreplayable_launch {
  std::size_t launch = 0;    // position in the traced iteration
  std::string kernel;
  std::string attribute;     // launch_attribute_name
  std::string why;
};

struct plan_preview {
  std::string device;
  bool estimated_times = false;        // a planning trace: every duration is an estimate
  std::size_t granularity = 0;
  std::size_t launches = 0;
  std::size_t observed_launches = 0;   // launches whose writes the trace observed
  std::size_t unproduced_count = 0;
  std::size_t unproduced_bytes = 0;
  std::vector<unproduced_buffer> unproduced;  // the largest ones, at most 16
  // Launches and their attributes (Notes [Launch attributes], [Graph launches] in
  // tracer/analysis.cpp).
  std::size_t graph_launches = 0;
  std::size_t attribute_unreplayable_count = 0;
  std::vector<unreplayable_launch> attribute_unreplayable;  // the first 16
  std::size_t buffers = 0;
  std::size_t candidates = 0;
  double iteration_compute_s = 0.0;    // sum of the launches' costs
  std::size_t live_peak = 0;           // the iteration's peak of live bytes
  std::size_t unplanned_peak = 0;      // simulator's peak with no eviction
  std::size_t traced_mapped_peak = 0;  // as given (0: unknown)
  std::size_t overhead = 0;            // planning_overhead at the budget (Note [Planning overhead])
  std::size_t sub_page_peak = 0;       // most bytes in sub-page buffers at once (caps the sixteenth)
  std::string budget_text;
  std::size_t budget = 0;              // resolved
  std::size_t planner_budget = 0;      // budget - overhead
  plan_preview_floor floor;            // at planner_budget
  // Offload in effect: not off, and a usable link. offload_floor: the floor of added time
  // with offload (Note [Offload floor]) at planner_budget.
  bool offload = false;
  policy::offload_mode offload_mode = policy::offload_mode::off;
  policy::link_model link{};
  std::size_t host_budget = 0;
  double fetch_margin = 0.0;
  plan_preview_floor offload_floor;
  std::vector<plan_preview_row> rows;
};

// Throws config_error for a malformed budget or policy, a trace with no iteration, or
// offload only without a usable link.
[[nodiscard]] plan_preview preview_plans(const tracer::trace& t, const plan_preview_options& options);

// A readable table of the preview, one row per planner; with `evictions`, each feasible
// plan's evictions after it.
[[nodiscard]] std::string render_plan_preview(const plan_preview& p, bool evictions = false);
// The preview as JSON (one object; rows in "planners").
[[nodiscard]] std::string plan_preview_json(const plan_preview& p);

}  // namespace sublinear::runtime
