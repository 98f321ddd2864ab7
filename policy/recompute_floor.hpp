// The recompute floor: a lower bound on the compute any valid plan adds at a budget.
//
// Note [Recompute floor]
// Rationale: a planner's added compute says what it found, not what was there to find.
//   Whether an overhead target is missed by the planners or is out of reach of every plan
//   the runtime can run is a different question, and the MILP oracle (Note [MILP oracle])
//   answers it only on graphs of a few dozen candidates. This bound answers it in
//   milliseconds on whole traces, so `sublinear plan` and the benchmarks can print how far
//   each planner is from the floor.
// Approach: take one launch position t. Every plan the simulator accepts (Note [Plan
//   simulation]) maps at least round_up(size, 512) (or a page, if smaller) for each
//   buffer resident during t, so at least D(t) = (those bytes of every buffer allocated
//   at t) - budget must be out during t. A buffer can be out during t only if it is
//   allocated and freed in the iteration, not never_evict, not allocated just before t,
//   not freed just after t, and not touched by t. It is free to drop if it has no use
//   after t or no writer before t; otherwise it comes back through a recipe that replays
//   all its writers since its allocation (Note [Recipe closure]), so its writers must
//   all be replayable and each of them runs again at least once. What those writers read
//   and the program freed before t (a dropout output a residual sum read) the recipe
//   needs too: the plan either retains it, so its bytes stay mapped during t, or rebuilds
//   it in scratch, so its writers run again (one level deep; deeper ones are left out,
//   which only lowers the bound). The least cost of
//   freeing D(t) is then a covering problem over buffers whose price is the union of
//   their writer sets: buffers that share a writer or a freed input (attention's
//   probabilities and output, a convolution and its in-place bias) form a group, solved
//   exactly by enumerating its subsets and, for each, every choice of retaining or
//   rebuilding its freed inputs (up to 12 buffers and 14 buffers and inputs together; a
//   larger group gives each buffer an equal share of each writer it shares and leaves
//   its inputs out, which never overstates a subset's price); the groups meet in a
//   multiple-choice knapsack over bytes in units of at most 1/2048 of D(t), weights
//   rounded up, so the knapsack's optimum never exceeds the true one. That rounding
//   loosens it where many small groups meet (ResNet-434's trace: +2% of its compute at
//   0.5x where the exact bytes give +7%), so the linear relaxation in exact bytes (each
//   group's convex hull, cheapest per byte first) is solved too and the larger of the two
//   kept; a position that a greedy cover already prices within the floor so far is
//   skipped. The floor is the
//   largest of these minima over the positions examined: the `max_positions` positions
//   with the largest D(t), where a floor is most likely to bind. A position where even
//   dropping everything possible frees less than D(t) proves the budget infeasible.
// Limitations: it is a bound, not a plan: what a recipe needs of evicted inputs, its
//   scratch, and a writer paid again for a second position are not counted, so plans
//   usually cost more. Costs are the traced durations, as planners use them. It bounds
//   the plans the simulator accepts (recomputation of recorded launches), not
//   offloading, which the planned iterations do not do.
#pragma once

#include <cstddef>

#include "policy/iteration.hpp"

namespace sublinear::policy {

struct recompute_floor_options {
  std::size_t max_positions = 256;  // positions examined, those with the largest deficit first
  std::size_t exact_group = 12;     // largest group solved by enumerating its subsets
  std::size_t units = 2048;         // knapsack resolution: the deficit in at most this many units
};

struct recompute_floor {
  bool feasible = true;       // false: at `at`, dropping everything possible is not enough
  double added_s = 0.0;       // no valid plan at the budget adds less compute than this
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
