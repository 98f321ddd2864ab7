// The plan simulator: checks a plan against Note [Replay recipes] and computes the exact
// peak of mapped bytes and the compute it adds. Every planner's output goes through it.
//
// Note [Plan simulation]
// Rationale: planners reason with estimates (aggregated gaps, rounded sizes, heuristics);
//   the only number that may be compared with the budget is the one the runtime will see.
//   So one piece of code states the memory model and every plan is measured by it.
// Approach: memory model, in bytes mapped:
//   - a buffer no eviction targets occupies round_up(size, 512) from alloc_at to free_at;
//   - a buffer some eviction targets (the allocator gives it its own pages) occupies
//     round_up(size, granularity) while resident;
//   - it is not resident during launches e+1 .. R-1 of each eviction, where e is
//     evict_after and R the restore point of the recipe that regenerates it (its own
//     restore_before, or its carrier's when it is listed in another entry's
//     also_regenerates);
//   - a pack (Note [Packs] in packs.hpp) occupies round_up(bytes, granularity) wherever
//     at least one member is resident, and its members add nothing of their own;
//   - just before launch r the recipes restoring at r run one after another in plan
//     order; while one runs, its regenerated buffers, those of the recipes before it at
//     r, and its scratch (scratch_bytes below) are mapped on top of what launch r sees.
//   The peak is the maximum over every launch and every recipe moment. A plan is
//   validated first (fields, evictability, windows, recipes, packs). The recipe moments
//   and the checks in detail: docs/design-notes.md#plan-simulation.
// Limitations: allocations and frees between two launches are taken to happen together,
//   so a transient overlap of a free and the next allocation is not modelled (the
//   allocator reuses the freed block in that case); recipe launches on different streams
//   are taken to run one after another.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/round_up.hpp"
#include "policy/plan.hpp"
#include "policy/recipe.hpp"

namespace sublinear::policy {

inline constexpr std::size_t unplanned_rounding = 512;

struct simulation {
  bool valid = false;
  std::string error;                  // the first broken rule; empty when valid
  std::size_t peak = 0;               // predicted peak of mapped bytes
  launch_id peak_at = 0;              // the launch during which, or before which, it occurs
  bool peak_in_recipe = false;        // true: while the recipes before peak_at run
  double added_compute_s = 0.0;       // sum of every recipe launch's cost
  std::size_t recomputed_launches = 0;
  std::size_t evicted_buffers = 0;    // distinct targets

  [[nodiscard]] bool fits(std::size_t budget) const noexcept { return valid && peak <= budget; }
};

// Simulates plans over one iteration; reusable across plans (planners call it many
// times). Keeps a reference to the iteration.
class simulator {
 public:
  explicit simulator(const iteration& it);

  [[nodiscard]] simulation run(const plan& p) const;
  // Mapped bytes during each launch (index = launch); empty if the plan is invalid.
  [[nodiscard]] std::vector<std::size_t> timeline(const plan& p) const;
  [[nodiscard]] const dataflow& flow() const noexcept { return df_; }

 private:
  struct prepared;
  [[nodiscard]] bool prepare(const plan& p, prepared& out, std::string& error) const;
  // Mapped bytes during each launch; bytes the recipes at each launch bring back; and the
  // (launch << 32 | pack) moments where a pack's pages are mapped by those recipes.
  void levels(const plan& p, const prepared& s, std::vector<std::size_t>& during,
              std::vector<std::size_t>& restored_bytes, std::vector<std::uint64_t>& fresh_packs) const;

  const iteration* it_;
  dataflow df_;
};

// Bytes mapped for one recipe's temporaries: the most held at once over the recipe's
// launches (see Note [Plan simulation]).
[[nodiscard]] std::size_t scratch_bytes(const iteration& it, const std::vector<launch_id>& recipe,
                                        const std::vector<buffer_id>& temporaries);

// One-shot simulation, on the iteration with the plan's retentions applied
// (with_retentions). simulator::run refuses a plan whose retentions are not applied.
[[nodiscard]] simulation simulate(const iteration& it, const plan& p);

// Simulates and records the result in p.predicted_peak, p.added_compute_s and
// p.recomputed_launches (left unchanged when the plan is invalid).
simulation simulate_into(const iteration& it, plan& p);

// Basic consistency of an analysed iteration (ids in range, lists ascending, written a
// subset of touched, users matching touched, alloc_at <= free_at). Empty when consistent;
// otherwise the first problem found.
[[nodiscard]] std::string check_iteration(const iteration& it);

}  // namespace sublinear::policy
