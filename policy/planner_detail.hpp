// Internals shared by the planner implementations (planner_*.cpp) and the solvers they call
// (solver_*.cpp, declared in solvers.hpp). Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include "policy/candidates.hpp"
#include "policy/planner.hpp"
#include "policy/simulator.hpp"

namespace sublinear::policy {

// What make_plan() passes on about offload (planner::options): the mode in effect
// (offload_mode::off for planners that do not offload, or without a usable link).
struct offload_settings {
  offload_mode mode = offload_mode::off;
  link_model link{};
  std::size_t host_budget = 0;  // 0: no bound
  std::size_t threads = 0;      // planner::options::threads
  bool offload_packs = false;   // planner::options::offload_packs
  bool rerun_targets = false;  // planner::options::rerun_targets
  double fetch_margin = 0.0;   // planner::options::fetch_margin
};

// One candidate's action in a keep/recompute/offload choice (evaluate_actions).
enum class action : std::uint8_t { keep = 0, drop = 1, offload = 2 };

// Everything a search needs about one iteration, built once per make_plan().
class planner::context {
 public:
  explicit context(const iteration& it, bool multi_pass = true, bool packs = true, const offload_settings& off = {});

  struct evaluation {
    bool ok = false;  // the plan could be built (recipes exist) and is valid
    std::string error;
    std::vector<std::uint32_t> refused;  // when not ok: candidates whose recipe was refused
    std::vector<std::uint8_t> dropped;  // the drop set it came from
    std::vector<launch_id> horizons;    // the drop set's horizons (Note [Multi-pass]); empty: none
    std::vector<launch_id> need_lo, need_hi;  // evaluate_actions' windows, per candidate (empty: none)
    plan result;
    simulation sim;
    [[nodiscard]] bool fits(std::size_t budget) const noexcept { return ok && sim.peak <= budget; }
  };
  // Builds and simulates the plan of a drop set (one entry per candidate index), with
  // horizons when given (drop_plan_builder::build), packed (add_packs) unless packs are off.
  [[nodiscard]] evaluation evaluate(std::span<const std::uint8_t> dropped, std::span<const launch_id> horizons = {});
  // evaluate(), and while a recipe is refused, again with that recipe's targets kept: for
  // the planners whose drop sets come from a rule, not a search (sqrtn, chen, tiered, the
  // chain solver's). A recipe may be refused that rebuilds a block no launch is seen
  // producing, or that updates an evicted or rewritten block in place (docs/policy.md,
  // "Recipes"); keeping its targets is the smallest change to the rule's set that builds.
  [[nodiscard]] evaluation evaluate_keeping_refused(std::span<const std::uint8_t> dropped);
  // Keep/recompute/offload (Note [Offload search] in solver_offload.cpp): `actions` has one
  // action per candidate; the dropped ones are built as a drop set, the offloaded ones
  // placed on the link (place_offloads), their windows covering need_lo..need_hi where
  // those are not `none`. Not ok (no throw) when the combination is invalid, e.g. a recipe
  // reads an offloaded buffer, or the host budget is exceeded. `dropped` is the drop set.
  // `horizons` as for evaluate(): a seed's multi-pass schedule kept under the new actions.
  // `packed`, when given, names per candidate an offloaded pack (Note [Offload packs]):
  // offloaded candidates with the same value other than `none` move as one pack, out over
  // the gap they share (not ok if they share none, or are on different streams).
  [[nodiscard]] evaluation evaluate_actions(std::span<const action> actions, std::span<const launch_id> need_lo,
                                            std::span<const launch_id> need_hi,
                                            std::span<const launch_id> horizons = {},
                                            std::span<const std::uint32_t> packed = {});

  // The action per candidate of an evaluation's plan, evaluate_actions' inverse: its drop
  // set dropped, its offloads' targets (always candidates; each pack member has an
  // offload of its own) offloaded, the rest kept.
  [[nodiscard]] std::vector<action> actions_of(const evaluation& e) const;

  // Plans built and simulated by evaluate() and evaluate_actions() so far (for tests of
  // what a search costs).
  [[nodiscard]] std::size_t evaluations() const noexcept { return evaluations_; }

  [[nodiscard]] const iteration& graph() const noexcept { return *it_; }
  [[nodiscard]] const dataflow& flow() const noexcept { return flow_; }
  [[nodiscard]] const candidate_set& candidates() const noexcept { return candidates_; }
  [[nodiscard]] const simulator& sim() const noexcept { return sim_; }
  // Peak of the plan that evicts nothing.
  [[nodiscard]] std::size_t unplanned_peak();
  [[nodiscard]] std::size_t lower_bound() const noexcept { return candidates_.lower_bound_bytes(); }
  // Whether plans beyond drop sets may be searched (planner::options::multi_pass).
  [[nodiscard]] bool multi_pass() const noexcept { return multi_pass_; }
  // Whether plans are packed (planner::options::packs).
  [[nodiscard]] bool packs() const noexcept { return packs_; }
  // Offload settings in effect (offload_settings).
  [[nodiscard]] const offload_settings& offload() const noexcept { return offload_; }
  // What one solver keeps about this iteration between its calls (its caches): one T per
  // context, value-initialised on first use. T is private to the solver's file; the
  // context knows no solver's state by name.
  template <class T>
  [[nodiscard]] T& state() {
    std::shared_ptr<void>& slot = states_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<T>();
    return *static_cast<T*>(slot.get());
  }

 private:
  const iteration* it_;
  dataflow flow_;
  candidate_set candidates_;
  simulator sim_;
  drop_plan_builder drops_;
  std::optional<std::size_t> unplanned_peak_;
  struct built_drops {  // evaluate_actions' last drop set and its packed plan
    std::vector<std::uint8_t> dropped;
    std::vector<launch_id> horizons;
    plan result;
  };
  std::optional<built_drops> last_drops_;
  std::size_t evaluations_ = 0;
  const bool multi_pass_;
  const bool packs_;
  const offload_settings offload_;
  std::map<std::type_index, std::shared_ptr<void>> states_;
};

// Planners that can be asked "can you meet budget b?" repeatedly: the search on failure
// looks for the smallest budget they meet and throws infeasible_budget with it.
class attempt_planner : public planner {
 protected:
  // A plan that fits `budget` per the simulator, or nothing.
  [[nodiscard]] virtual std::optional<plan> attempt(context& ctx, std::size_t budget) const = 0;
  // Whether attempt() falls back on solve_two_level (the smallest budget then accounts
  // for it without repeating its grid).
  [[nodiscard]] virtual bool deepens() const noexcept { return false; }
  [[nodiscard]] plan search(context& ctx, std::size_t budget) const override;
};

// The smallest feasible budget of a planner whose search may miss a budget above one it
// meets (greedy rounds and grid searches are not monotone in the budget): `meets` is
// bisected between the lower bound and the unplanned peak (which every planner meets by
// evicting nothing) to 1/1024 relative precision. The bisection does not depend on the
// budget asked for, so every budget on one iteration names the same smallest budget, and
// plan_at_smallest keeps the promise that every budget from it up plans.
[[nodiscard]] std::size_t smallest_feasible_budget(planner::context& ctx, const std::function<bool(std::size_t)>& meets);

// After the planner's search at `budget` failed: the plan `attempt` makes at `smallest`
// (its peak is within it, so within `budget`) when `budget` >= `smallest`; otherwise
// throws infeasible_budget naming `smallest`.
[[nodiscard]] plan plan_at_smallest(planner::context& ctx, std::string_view planner_name, std::size_t budget,
                                    std::size_t smallest,
                                    const std::function<std::optional<plan>(std::size_t)>& attempt);

// Factories, one per planner (planner_*.cpp); make_planner (planner_registry.cpp) calls them.
std::unique_ptr<planner> make_none_planner();
std::unique_ptr<planner> make_sqrtn_planner();
std::unique_ptr<planner> make_chen_planner();
std::unique_ptr<planner> make_chain_planner();
std::unique_ptr<planner> make_reforward_planner();
std::unique_ptr<planner> make_greedy_planner();
std::unique_ptr<planner> make_dtr_planner();
std::unique_ptr<planner> make_tiered_planner();

}  // namespace sublinear::policy
