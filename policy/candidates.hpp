// Candidate activations and drop sets: the plan space most planners search.
//
// Note [Drop sets]
// Rationale: Chen's segments, Re-forwarding's checkpoints, Capuchin's greedy and the MILP
//   oracle all choose *which activations to drop*; they differ in how. Giving them one plan
//   space, with one construction from a choice to a plan, makes their results comparable
//   and lets the exact solvers be checked against each other.
// Approach: a candidate is an activation allocated and freed within the iteration, not
//   never_evict, live across the turning point, used both before it (last use e) and
//   after it (first use r) with at least one launch between, whose own recipe at r can be
//   built. A drop set D is a subset of the candidates. Its plan: every dropped buffer is
//   evicted after e and regenerated exactly once, at the earliest moment some recipe
//   needs it: its own r, or the restore point of a dropped buffer whose recipe reads it
//   while it is evicted (it is then rebuilt at its own address, listed in that recipe's
//   also_regenerates, and stays resident). One recipe runs per restore point, carrying
//   every buffer due there. On a chain this is exactly Chen's and Re-forwarding's
//   segment recomputation: a dropped run between two kept checkpoints is rebuilt in one
//   go when the backward pass reaches it, so the added compute is at most one forward
//   pass.
// Limitations: one gap per buffer (the one around the turning point) and no repeated
//   recomputation (Rotor's multi-pass schedules); the online `dtr` planner is not bound by
//   either, and horizons (Note [Multi-pass] in planner_multipass.cpp) lift the second. The turning point is the iteration's (the live-byte peak), or computed from the
//   live bytes when the iteration gives 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "policy/plan.hpp"
#include "policy/recipe.hpp"

namespace sublinear::policy {

struct candidate {
  buffer_id buffer = none;
  launch_id evict_after = none;     // last use at or before the turning point
  launch_id restore_before = none;  // first use after it
  launch_id produced_at = none;     // first writer since allocation (alloc_at if none)
  std::size_t bytes = 0;            // footprint once planned: round_up(size, granularity)
  std::size_t unplanned_bytes = 0;  // footprint if never planned: round_up(size, 512)
  double cost_s = 0.0;              // cost of its own recipe at restore_before, nothing else evicted
  std::vector<launch_id> recipe;    // that recipe's launches
  std::vector<buffer_id> temporaries;
  std::vector<std::uint32_t> deps;  // candidate indices that recipe reads in place
};

class candidate_set {
 public:
  // Analyses the iteration behind `df` (which must outlive this object).
  explicit candidate_set(const dataflow& df);

  [[nodiscard]] const dataflow& flow() const noexcept { return *df_; }
  [[nodiscard]] const iteration& graph() const noexcept { return df_->graph(); }
  [[nodiscard]] std::span<const candidate> all() const noexcept { return items_; }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] const candidate& operator[](std::size_t i) const noexcept { return items_[i]; }
  // Candidate index of a buffer, or none.
  [[nodiscard]] std::uint32_t index_of(buffer_id b) const noexcept { return index_[b]; }
  [[nodiscard]] launch_id turning_point() const noexcept { return turning_point_; }
  // No valid plan, by any planner, maps fewer bytes at its peak: during every launch, the
  // buffers that cannot be evicted then (persistent, never_evict, touched by it, or at the
  // edge of their lifetime) are mapped.
  [[nodiscard]] std::size_t lower_bound_bytes() const noexcept { return lower_bound_; }

 private:
  const dataflow* df_;
  std::vector<candidate> items_;  // sorted by (produced_at, buffer)
  std::vector<std::uint32_t> index_;
  launch_id turning_point_ = 0;
  std::size_t lower_bound_ = 0;
};

// Turns drop sets into plans (Note [Drop sets]); reuses scratch space between calls.
class drop_plan_builder {
 public:
  explicit drop_plan_builder(const candidate_set& cs);

  struct outcome {
    bool ok = false;
    std::string error;
    plan result;
  };
  // `dropped` has one entry per candidate index; nonzero drops it. `horizons` is empty or
  // has one entry per candidate: a dropped candidate is rebuilt in scratch by the recipes
  // that restore before its entry and regenerated at its own address by those at or after
  // it (Note [Multi-pass] in planner_multipass.cpp); `none` is the drop set's rule (regenerate at the first).
  [[nodiscard]] outcome build(std::span<const std::uint8_t> dropped, std::span<const launch_id> horizons = {});

 private:
  const candidate_set* cs_;
  recipe_builder recipes_;
  std::vector<std::uint8_t> evicted_;         // per buffer
  std::vector<launch_id> regenerate_from_;  // per buffer
};

}  // namespace sublinear::policy
