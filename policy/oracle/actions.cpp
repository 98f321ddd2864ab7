// Note [Action oracle] is in actions.hpp.
#include "policy/oracle/actions.hpp"

#include <vector>

#include "policy/planner_detail.hpp"
#include "policy/simulator.hpp"

namespace sublinear::policy::oracle {

action_oracle_result solve_actions(const iteration& it, std::size_t budget, const action_oracle_options& options) {
  action_oracle_result out;
  offload_settings off;
  off.mode = options.link.usable() ? (options.recompute ? offload_mode::on : offload_mode::only) : offload_mode::off;
  off.link = options.link;
  off.host_budget = options.host_budget;
  planner::context ctx(it, false, true, off);
  const std::size_t k = ctx.candidates().size();
  if (k > options.max_candidates) return out;
  // Per candidate: 0 keep, 1 drop, 2 offload over the hidden window, 3 over its whole gap,
  // 4 over the hidden window widened to the launches in its gap where the unplanned
  // iteration is over the budget.
  constexpr unsigned choices = 5;
  std::vector<launch_id> over_lo(k, none), over_hi(k, none);
  {
    const std::vector<std::size_t> during = simulator(it).timeline(plan{});
    for (std::size_t c = 0; c < k; ++c) {
      const candidate& cd = ctx.candidates()[c];
      for (launch_id t = cd.evict_after + 1; t < cd.restore_before && t < during.size(); ++t) {
        if (during[t] <= budget) continue;
        if (over_lo[c] == none) over_lo[c] = t;
        over_hi[c] = t;
      }
    }
  }
  std::vector<unsigned> digit(k, 0);
  std::vector<action> actions(k, action::keep);
  std::vector<launch_id> lo(k, none), hi(k, none);
  bool found = false;
  for (;;) {
    bool usable = true;
    for (std::size_t c = 0; c < k; ++c) {
      const candidate& cd = ctx.candidates()[c];
      lo[c] = hi[c] = none;
      switch (digit[c]) {
        case 0:
          actions[c] = action::keep;
          break;
        case 1:
          actions[c] = action::drop;
          usable = usable && options.recompute;
          break;
        case 2:
          actions[c] = action::offload;
          usable = usable && off.mode != offload_mode::off;
          break;
        case 3:
          actions[c] = action::offload;
          usable = usable && off.mode != offload_mode::off;
          lo[c] = cd.evict_after + 1;
          hi[c] = cd.restore_before - 1;
          break;
        default:
          actions[c] = action::offload;
          // No deficit in its gap: the same plans as choice 2.
          usable = usable && off.mode != offload_mode::off && over_lo[c] != none;
          lo[c] = over_lo[c];
          hi[c] = over_hi[c];
          break;
      }
    }
    if (usable) {
      ++out.plans;
      planner::context::evaluation e = ctx.evaluate_actions(actions, lo, hi);
      if (e.fits(budget) && (!found || e.sim.added_time_s() < out.added_time_s)) {
        found = true;
        out.added_time_s = e.sim.added_time_s();
        out.best = std::move(e.result);
      }
    }
    std::size_t c = 0;
    while (c < k && ++digit[c] == choices) digit[c++] = 0;
    if (c == k) break;
  }
  out.outcome = found ? action_oracle_result::status::optimal : action_oracle_result::status::infeasible;
  if (found) out.best.budget = budget;
  return out;
}

}  // namespace sublinear::policy::oracle
