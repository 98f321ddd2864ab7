// Note [Action oracle] is in actions.hpp.
#include "policy/oracle/actions.hpp"

#include <vector>

#include "policy/planner_detail.hpp"

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
  // Per candidate: 0 keep, 1 drop, 2 offload over the hidden window, 3 over its whole gap.
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
        default:
          actions[c] = action::offload;
          usable = usable && off.mode != offload_mode::off;
          lo[c] = cd.evict_after + 1;
          hi[c] = cd.restore_before - 1;
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
    while (c < k && ++digit[c] == 4) digit[c++] = 0;
    if (c == k) break;
  }
  out.outcome = found ? action_oracle_result::status::optimal : action_oracle_result::status::infeasible;
  if (found) out.best.budget = budget;
  return out;
}

}  // namespace sublinear::policy::oracle
