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
//     none       no eviction;
//     sqrtn      Chen et al. 2016, §3: of the k segments of the graph (those of the chain
//                solver), keep every ceil(sqrt(k))-th output as a checkpoint and drop the
//                rest (budget-blind; fails if that does not fit);
//     chen       Chen et al. 2016, Alg. 3 (greedy segments under a segment budget B) with
//                a grid search over B, keeping the cheapest plan that fits;
//     chain      exact dynamic program over checkpoint choices on a chain (Rotor /
//                Re-forwarding linear case); a DAG is reduced to its chain of segments
//                first (Note [Chain solver] in solver_chain.cpp);
//     tiered     a simulated grid of tiered drop sets (Note [Tiered drop sets] in
//                solver_tiered.cpp);
//     reforward  exact branch and bound over drop sets for arbitrary graphs (up to 28
//                candidates); beyond, the best of its seeds (chain, greedy, chen, tiered)
//                improved locally;
//     greedy     cost-aware (Capuchin-style): drop what frees most bytes per second of
//                recompute at the peak, cheap producers first, then undo needless drops;
//     dtr        DTR's online heuristic h = cost / (size * staleness), simulated over the
//                trace: evict at memory pressure, regenerate on use.
//   All but dtr search drop sets (Note [Drop sets] in candidates.hpp).
// Limitations: planners see one iteration; the plan is valid for iterations that repeat
//   it exactly (the runtime checks that).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "policy/budget.hpp"
#include "policy/iteration.hpp"
#include "policy/plan.hpp"

namespace sublinear::policy {

class planner {
 public:
  virtual ~planner() = default;
  planner() = default;
  planner(const planner&) = delete;
  planner& operator=(const planner&) = delete;

  [[nodiscard]] virtual std::string_view name() const noexcept = 0;

  struct options {
    // Also plan with retentions (Note [Retention] in retention.hpp) and keep the cheaper.
    bool retention = true;
    // chain and reforward: when no drop set meets the budget, try two-level schedules that
    // recompute some buffers more than once (Note [Multi-pass] in solver_multipass.cpp).
    bool multi_pass = true;
    // Let evicted buffers of at most half a page share pages (Note [Packs] in packs.hpp):
    // every plan a search simulates is packed.
    bool packs = true;
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

}  // namespace sublinear::policy
