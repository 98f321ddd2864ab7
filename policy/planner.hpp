// Planners: from an analysed iteration and a byte budget to a plan, side by side behind
// one interface (SUBLINEAR_POLICY selects one by name).
//
// Note [Planner contract]
// Rationale: the runtime must be able to trust a plan without re-deriving it, and users
//   must be able to swap planners to compare them.
// Approach: make_plan() is the same for every planner: check the iteration, let the
//   planner search, run the result through the simulator (Note [Plan simulation]) and
//   return it only if it is valid and its predicted peak is within the budget; the plan's
//   predicted_peak, added_compute_s and recomputed_launches are the simulator's. A budget
//   the planner cannot meet throws infeasible_budget naming the smallest budget it can
//   meet (searched for, never guessed) and the bound no plan can beat. The planners:
//   none (no eviction); sqrtn and chen (Chen et al. 2016, §3 and Alg. 3); chain (an exact
//   dynamic program over the chain of segments, Note [Chain solver]); tiered (Note
//   [Tiered drop sets]); reforward (branch and bound over drop sets, Note [Exact drop
//   sets on arbitrary graphs]); greedy (cost-aware, Note [Cost-aware greedy]); dtr (DTR's
//   online heuristic simulated over the trace, Note [Simulated DTR]). All but dtr search
//   drop sets (Note [Drop sets] in candidates.hpp); greedy and reforward also offload
//   (Note [Offload search] in solver_offload.cpp). Each planner in brief:
//   docs/design-notes.md#planner-contract.
// Limitations: planners see one iteration; the plan is valid for iterations that repeat
//   it exactly (the runtime checks that).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "policy/budget.hpp"
#include "policy/iteration.hpp"
#include "policy/link_model.hpp"
#include "policy/plan.hpp"

namespace sublinear::policy {

class planner {
 public:
  virtual ~planner() = default;
  planner() = default;
  planner(const planner&) = delete;
  planner& operator=(const planner&) = delete;

  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  // Whether the planner chooses offloads (Note [Offload]); the others plan recompute only.
  [[nodiscard]] virtual bool offloads() const noexcept { return false; }

  struct options {
    // Also plan with retentions (Note [Retention] in retention.hpp) and keep the cheaper.
    bool retention = true;
    // chain and reforward: when no drop set meets the budget, try two-level schedules that
    // recompute some buffers more than once (Note [Multi-pass] in solver_multipass.cpp).
    bool multi_pass = true;
    // Let evicted buffers of at most half a page share pages (Note [Packs] in packs.hpp):
    // every plan a search simulates is packed.
    bool packs = true;
    // Offload (Note [Offload] in link_model.hpp): the planners that support it choose
    // among keep, recompute and offload; the others plan recompute only (offload_mode::on
    // is then the same as off, and offload_mode::only is refused with a config_error).
    // offload_mode::on with an unusable link plans recompute only; offload_mode::only with
    // one is refused with a config_error. Plans minimise added time (recompute + stalls).
    offload_mode offload = offload_mode::off;
    link_model link{};                 // unusable link: no offload
    std::size_t host_budget = 0;       // bytes the offloads' pinned host pool may take; 0: no bound
    // Threads the offload search's jobs run on, the calling thread included (Note
    // [Parallel offload starts] in solver_offload_starts.cpp); 0 or 1 runs all on the calling
    // thread. The plan is the same for every count. The runtime and `sublinear plan` pass
    // runtime::planning_threads().
    std::size_t threads = 1;
    // With offload on and packs: small recomputed buffers may become offloaded packs, one
    // copy each way per pack (Note [Offload pack search] in solver_offload_packs.cpp). The
    // runtime and `sublinear plan` set it where both SUBLINEAR_PACKS and
    // SUBLINEAR_OFFLOAD_PACKS are on (their defaults).
    bool offload_packs = false;
    // With offload on: where the best plan stalls for 5% of the iteration's compute or
    // more, run the offload search again at 95-105% of the budget and keep what fits for
    // less (Note [Targets around the budget] in solver_offload_starts.cpp).
    bool rerun_targets = true;
    // With offload: the chosen plan's copies back are moved earlier, where the budget has
    // room, as if each took (1 + fetch_margin) times its modelled time (Note [Fetch
    // margin] in offload_placement.cpp); 0: each as late as the model allows.
    double fetch_margin = 0.25;
  };

  // A validated plan with predicted_peak <= budget. Throws infeasible_budget when the
  // planner cannot meet the budget, config_error when the iteration is malformed.
  [[nodiscard]] plan make_plan(const iteration& it, std::size_t budget) const { return make_plan(it, budget, options{}); }
  [[nodiscard]] plan make_plan(const iteration& it, std::size_t budget, const options& o) const;

  // What a search knows about one iteration (defined in planner_detail.hpp).
  class context;

 protected:
  // The search itself: returns a plan (not yet simulated) whose peak the planner expects
  // to be within the budget, or throws infeasible_budget. make_plan() checks the result.
  [[nodiscard]] virtual plan search(context& ctx, std::size_t budget) const = 0;
};

// The planner with this name (one of planner_names()); throws sublinear::config_error
// listing the valid names otherwise.
[[nodiscard]] std::unique_ptr<planner> make_planner(std::string_view name);

// "none", "sqrtn", "chen", "chain", "tiered", "reforward", "greedy", "dtr".
[[nodiscard]] std::span<const std::string_view> planner_names() noexcept;

// The planners whose offloads() is true, comma-separated ("reforward, greedy").
[[nodiscard]] std::string offloading_planner_list();

}  // namespace sublinear::policy
