// The exact oracle for keep/recompute/offload on small graphs: every assignment of an
// action to each candidate, simulated. For tests and benchmarks only.
//
// Note [Action oracle]
// Rationale: the MILP oracle (Note [MILP oracle]) is exact over drop sets; with offload the
//   objective has stalls, which depend on the link's queues, and a linear model of them
//   would be an approximation of its own. On a few candidates enumeration is exact.
// Approach: each candidate is kept, dropped (as in its drop set's plan, Note [Drop sets])
//   or offloaded over one of three windows: the one the link hides (Note [Offload
//   placement]), that one widened to the launches of its gap where the unplanned
//   iteration is over the budget, or its whole gap. Every combination is built and
//   simulated with the link; the least added time (recompute + stalls) within the budget
//   and the host budget wins. Up to 5^k plans for k candidates.
// Limitations: exact over that plan space only (one gap per candidate, those windows, no
//   multi-pass recomputation); beyond max_candidates it declines.
#pragma once

#include <cstddef>

#include "policy/iteration.hpp"
#include "policy/link_model.hpp"
#include "policy/plan.hpp"

namespace sublinear::policy::oracle {

struct action_oracle_options {
  link_model link{};
  std::size_t host_budget = 0;  // 0: no bound
  bool recompute = true;        // false: keep or offload only (offload_mode::only)
  std::size_t max_candidates = 8;
};

struct action_oracle_result {
  enum class status { optimal, infeasible, too_large };
  status outcome = status::too_large;
  double added_time_s = 0.0;  // added_compute_s + predicted_stall_s of `best`
  plan best;                  // simulated (its predicted fields filled)
  std::size_t plans = 0;      // combinations simulated
};

[[nodiscard]] action_oracle_result solve_actions(const iteration& it, std::size_t budget,
                                                 const action_oracle_options& options);

}  // namespace sublinear::policy::oracle
