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
//   - an offloaded buffer (Note [Offload] in link_model.hpp) occupies
//     round_up(size, granularity) except during launches release_before .. fetch_after;
//   - a pack (Note [Packs] in packs.hpp) occupies round_up(bytes, granularity) wherever
//     at least one member is resident, and its members add nothing of their own;
//   - just before launch r the recipes restoring at r run one after another in plan
//     order; while one runs, its regenerated buffers, those of the recipes before it at
//     r, and its scratch (scratch_bytes below) are mapped on top of what launch r sees.
//   The peak is the maximum over every launch and every recipe moment. A plan is
//   validated first (fields, evictability, windows, recipes, packs, offloads). The recipe
//   moments and the checks in detail: docs/design-notes.md#plan-simulation. Time is the
//   link timeline of Note [Link timeline] (simulator_offload.cpp).
// Limitations: allocations and frees between two launches are taken to happen together,
//   so a transient overlap of a free and the next allocation is not modelled (the
//   allocator reuses the freed block in that case); recipe launches on different streams
//   are taken to run one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/round_up.hpp"
#include "policy/link_model.hpp"
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
  // Offloads and time (Note [Link timeline]); the link fields are zero without offloads.
  std::size_t offloaded_buffers = 0;  // plan.offloads.size()
  std::size_t offloaded_bytes = 0;    // bytes copied to host per iteration (= bytes fetched back)
  std::size_t host_bytes = 0;         // the host pool the offloads' slots take (Note [Host pool layout])
  double link_busy_s = 0.0;           // copy time, both directions summed
  double predicted_stall_s = 0.0;     // time launches wait for a copy
  double predicted_time_s = 0.0;      // launch costs + added_compute_s + predicted_stall_s
  // Per plan.offloads entry, in plan order: when each copy runs on the modelled link.
  std::vector<offload_times> copies;

  [[nodiscard]] bool fits(std::size_t budget) const noexcept { return valid && peak <= budget; }
  // What the plan adds to the iteration's time: recomputation and stalls.
  [[nodiscard]] double added_time_s() const noexcept { return added_compute_s + predicted_stall_s; }
};

// Simulates plans over one iteration; reusable across plans (planners call it many
// times). Keeps a reference to the iteration. A plan with offloads needs a usable link;
// a nonzero host_budget bounds host_bytes (a plan over it is invalid); 0: no bound.
class simulator {
 public:
  explicit simulator(const iteration& it, const link_model& link = {}, std::size_t host_budget = 0);

  [[nodiscard]] simulation run(const plan& p) const;
  // Mapped bytes during each launch (index = launch); empty if the plan is invalid.
  [[nodiscard]] std::vector<std::size_t> timeline(const plan& p) const;
  [[nodiscard]] const dataflow& flow() const noexcept { return df_; }
  [[nodiscard]] const link_model& link() const noexcept { return link_; }
  [[nodiscard]] std::size_t host_budget() const noexcept { return host_budget_; }

 private:
  struct prepared;
  [[nodiscard]] bool prepare(const plan& p, prepared& out, std::string& error) const;
  // simulator_offload.cpp: the offloads' own rules, and the link timeline.
  // offload_of: per buffer, its plan.offloads entry or none; planned: per buffer, whether
  // an eviction targets it.
  [[nodiscard]] bool prepare_offloads(const plan& p, const std::vector<std::uint8_t>& planned,
                                      std::vector<std::uint32_t>& offload_of, std::string& error) const;
  [[nodiscard]] bool link_timeline(const plan& p, simulation& out) const;
  // Mapped bytes during each launch; bytes the recipes at each launch bring back; and the
  // (launch << 32 | pack) moments where a pack's pages are mapped by those recipes.
  void levels(const plan& p, const prepared& s, std::vector<std::size_t>& during,
              std::vector<std::size_t>& restored_bytes, std::vector<std::uint64_t>& fresh_packs) const;

  const iteration* it_;
  dataflow df_;
  link_model link_;
  std::size_t host_budget_ = 0;
};

// Bytes mapped for one recipe's temporaries: the most held at once over the recipe's
// launches (see Note [Plan simulation]). `slot` is a table with an entry per buffer, each
// `none`, which it uses and leaves so: a caller that asks for many recipes keeps one.
[[nodiscard]] std::size_t scratch_bytes(const iteration& it, const std::vector<launch_id>& recipe,
                                        const std::vector<buffer_id>& temporaries, std::vector<std::uint32_t>& slot);
// The same with a table of its own.
[[nodiscard]] std::size_t scratch_bytes(const iteration& it, const std::vector<launch_id>& recipe,
                                        const std::vector<buffer_id>& temporaries);

// One-shot simulation, on the iteration with the plan's retentions applied
// (with_retentions). simulator::run refuses a plan whose retentions are not applied.
[[nodiscard]] simulation simulate(const iteration& it, const plan& p, const link_model& link = {},
                                  std::size_t host_budget = 0);

// Simulates and records the result in the plan's predicted fields (predicted_peak,
// added_compute_s, recomputed_launches, the link fields and predicted_time_s; left
// unchanged when the plan is invalid).
simulation simulate_into(const iteration& it, plan& p, const link_model& link = {}, std::size_t host_budget = 0);

// Copies the simulator's predictions into the plan's fields.
void record(const simulation& s, plan& p);

// Basic consistency of an analysed iteration (ids in range, lists ascending, written a
// subset of touched, users matching touched, alloc_at <= free_at). Empty when consistent;
// otherwise the first problem found.
[[nodiscard]] std::string check_iteration(const iteration& it);

}  // namespace sublinear::policy
