// The recompute floor: a lower bound on the compute any valid plan adds at a budget.
//
// Note [Recompute floor]
// Rationale: a planner's added compute says what it found, not what was there to find.
//   The MILP oracle (Note [MILP oracle]) tells the two apart only on graphs of a few dozen
//   candidates; this bound does it in milliseconds on whole traces, so `sublinear plan`
//   and the benchmarks can print how far each planner is from the floor.
// Approach: at one launch position t, every plan the simulator accepts (Note [Plan
//   simulation]) has at least D(t) = (the bytes mapped for buffers allocated at t) -
//   budget out during t. Only some buffers can be out (allocated and freed in the
//   iteration, not never_evict, not touched by t, not allocated just before or freed just
//   after it). One is free to drop if it has no use after t or no writer before t; else
//   its price is its writers since allocation (Note [Recipe closure]), plus the writers
//   of the freed inputs its recipe must rebuild unless the plan keeps them mapped. The
//   least cost of freeing D(t) is a covering problem over these prices: buffers sharing
//   a writer or a freed input form groups, solved exactly when small and by a share that
//   never overstates when large, and the groups meet in a multiple-choice knapsack
//   rounded so that its optimum never exceeds the true one; its linear relaxation in
//   exact bytes is a second bound, and the larger is kept. The floor is the largest of
//   these minima over the `max_positions` positions with the largest D(t); a position
//   where dropping everything possible frees less than D(t) proves the budget
//   infeasible. In detail: docs/design-notes.md#recompute-floor.
// Limitations: it is a bound, not a plan: what a recipe needs of evicted inputs, its
//   scratch, and a writer paid again for a second position are not counted, so plans
//   usually cost more. Costs are the traced durations, as planners use them. With a
//   usable link in the options it bounds added time (recompute + stalls) over plans that
//   may also offload: see Note [Offload floor] in recompute_floor.cpp.
#pragma once

#include <cstddef>

#include "policy/iteration.hpp"
#include "policy/link_model.hpp"

namespace sublinear::policy {

struct recompute_floor_options {
  std::size_t max_positions = 256;  // positions examined, those with the largest deficit first
  std::size_t exact_group = 12;     // largest group solved by enumerating its subsets
  std::size_t units = 2048;         // knapsack resolution: the deficit in at most this many units
  // Offload (keep/recompute/offload): a usable link makes added_s a floor of added time
  // over plans that may also offload, at most host_budget bytes of host memory (0: no
  // bound). An unusable link (the default): recompute only.
  link_model link{};
  std::size_t host_budget = 0;
};

struct recompute_floor {
  bool feasible = true;       // false: at `at`, dropping everything possible is not enough
  double added_s = 0.0;       // no valid plan at the budget adds less compute (with offload: time) than this
  launch_id at = none;        // the position that gives the floor (none: no deficit anywhere)
  std::size_t must_free = 0;  // bytes that must be out during launch `at`
  std::size_t can_free = 0;   // bytes that could be out during launch `at`
  std::size_t positions = 0;  // positions with a deficit
  std::size_t examined = 0;   // of those, how many were solved
};

// The floor of added compute for plans of `it` whose peak (as the simulator counts it)
// is at most `budget` bytes.
[[nodiscard]] recompute_floor find_recompute_floor(const iteration& it, std::size_t budget,
                                                   const recompute_floor_options& options = {});

}  // namespace sublinear::policy
