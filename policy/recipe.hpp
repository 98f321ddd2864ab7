// Replay recipes: which recorded launches regenerate a dropped buffer, computed as a
// closure over the analysed iteration. Shared by every planner, the simulator's checks and
// the runtime (which rebuilds recipes when the set of evicted buffers changes).
//
// Note [Recipe closure]
// Rationale: a recipe is only correct if every launch it re-runs sees the same inputs as
//   when it first ran (Note [Replay recipes] in plan.hpp). Which launches that takes
//   depends on what else is evicted at restore time, so the closure is a function of
//   (iteration, evicted set, targets, restore point) and nothing else.
// Approach: a backward sweep from the restore point r over candidate launches, highest
//   position first. Every buffer a recipe launch touches gets one role:
//   - regenerated: a target, or (mode `regenerate`) an evicted input unchanged since the
//     reading launch; rebuilt at its own address with all its writers since allocation,
//     and resident afterwards;
//   - needed scratch: its value before some recipe launch matters but it is not resident
//     and unchanged; a temporary, and every launch that wrote it between its allocation
//     and that reader joins the recipe (the closure);
//   - side output: written by a recipe launch, needed by no later one (a workspace,
//     BatchNorm's running statistics): a temporary whose prior contents do not matter;
//   - in place: resident at r and not written by any launch in [reader, r).
//   A launch that writes a buffer is taken to read it too, except before its first write
//   since allocation (the tracer's rule). In-place updates and buffers without a known
//   producer can refuse the recipe: docs/design-notes.md#recipe-closure has the rules.
// Limitations: the contents a side output had before the launch are taken not to
//   influence the launch's other outputs (true of running statistics, not of an
//   accumulator the same kernel reads back); the runtime's validation hash catches the
//   exceptions. A value from before the iteration (a persistent buffer written during the
//   iteration before the reader) cannot be rebuilt; such recipes are refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "policy/iteration.hpp"

namespace sublinear::policy {

// Per-buffer writer lists and liveness queries over one iteration. Built once in
// O(launches + touches); keeps a reference to the iteration, which must outlive it.
class dataflow {
 public:
  explicit dataflow(const iteration& it);

  [[nodiscard]] const iteration& graph() const noexcept { return *it_; }
  [[nodiscard]] std::size_t buffer_count() const noexcept { return it_->buffers.size(); }
  [[nodiscard]] std::size_t launch_count() const noexcept { return it_->launches.size(); }

  // Launches that write `b`, ascending.
  [[nodiscard]] std::span<const launch_id> writers(buffer_id b) const noexcept;
  // Writers of `b` at positions in [lo, hi).
  [[nodiscard]] std::span<const launch_id> writers_in(buffer_id b, launch_id lo, launch_id hi) const noexcept;
  [[nodiscard]] bool written_in(buffer_id b, launch_id lo, launch_id hi) const noexcept {
    return !writers_in(b, lo, hi).empty();
  }
  // Whether launch `l` writes `b` (b must be one of its touched buffers to be true).
  [[nodiscard]] bool writes(launch_id l, buffer_id b) const noexcept;
  // Whether `b` is allocated at the moment just before launch `r` (after the allocations
  // and frees positioned before r): alloc_at <= r < free_at.
  [[nodiscard]] bool allocated_at(buffer_id b, launch_id r) const noexcept;
  // Whether some user of `b` lies strictly inside (lo, hi).
  [[nodiscard]] bool used_between(buffer_id b, launch_id lo, launch_id hi) const noexcept;
  // First user of `b` strictly after `l`, or none.
  [[nodiscard]] launch_id next_use_after(buffer_id b, launch_id l) const noexcept;

 private:
  const iteration* it_;
  std::vector<std::uint32_t> offsets_;  // CSR: writers of buffer b are writers_[offsets_[b], offsets_[b+1])
  std::vector<launch_id> writers_;
};

// Whether `recipe` (ascending launches) needs the bytes `b` holds when it starts: the
// first of its launches touching b reads it, as every launch touching b does but the one
// that writes b first since its allocation (the tracer's rule). The runtime starts a
// temporary's scratch from the live buffer's bytes exactly then (Note [Recipe scratch]),
// so an offloaded one must be back (Note [Offloaded recipe inputs]).
[[nodiscard]] bool reads_on_entry(const iteration& it, std::span<const launch_id> recipe, buffer_id b);

// Whether launch `l` writes `b` first since b's allocation (so reads none of its bytes).
[[nodiscard]] bool writes_first(const iteration& it, launch_id l, buffer_id b);

// What to do with an evicted (non-target) buffer that a recipe launch reads.
enum class evicted_inputs : std::uint8_t {
  temporary,   // rebuild it in scratch pages for this recipe only; it stays evicted
  regenerate,  // rebuild it at its own address; it is resident from r on (also_regenerates)
};

struct recipe_result {
  bool ok = false;
  std::string error;                 // why not, naming the launch or buffer; empty when ok
  std::vector<launch_id> launches;   // ascending
  std::vector<buffer_id> regenerated;  // the targets (in the order given), then pulled-in inputs ascending
  std::vector<buffer_id> temporaries;  // ascending
  std::vector<buffer_id> inputs;     // buffers read in place (resident, unchanged), ascending
  double cost_s = 0.0;               // sum of the launches' costs
};

// Builds recipes over one dataflow, reusing scratch arrays between calls. Not thread-safe;
// use one per thread.
class recipe_builder {
 public:
  explicit recipe_builder(const dataflow& df);

  // Regenerates `targets` just before launch `restore_before`. `evicted` is either empty
  // (nothing else evicted) or has one entry per buffer, nonzero for a buffer that is not
  // resident at that moment; the targets' own entries are ignored. `regenerate_from` is
  // either empty or has one entry per buffer: in mode `regenerate`, an evicted input whose
  // entry is later than `restore_before` is rebuilt in scratch instead (Note [Multi-pass]
  // in solver_multipass.cpp); `none` never holds one back.
  [[nodiscard]] recipe_result build(std::span<const buffer_id> targets, launch_id restore_before,
                                    std::span<const std::uint8_t> evicted, evicted_inputs mode,
                                    std::span<const launch_id> regenerate_from = {});

 private:
  enum class role : std::uint8_t { unset, regenerated, scratch, side, in_place };
  void require(buffer_id b, launch_id before);
  [[nodiscard]] role role_of(buffer_id b) const noexcept { return role_epoch_[b] == epoch_ ? roles_[b] : role::unset; }
  void set_role(buffer_id b, role r) noexcept { role_epoch_[b] = epoch_; roles_[b] = r; }
  [[nodiscard]] bool forced_scratch(buffer_id b) const noexcept { return forced_epoch_[b] == call_; }

  const dataflow* df_;
  std::uint32_t epoch_ = 0;  // one per sweep
  std::uint32_t call_ = 0;   // one per build()
  std::vector<role> roles_;
  std::vector<std::uint32_t> role_epoch_;
  std::vector<std::uint32_t> need_epoch_;  // buffer already required in this sweep
  std::vector<std::uint32_t> forced_epoch_;
  std::vector<std::uint32_t> queued_epoch_;  // per launch
  std::vector<launch_id> heap_;
  std::string failure_;
};

// One-shot convenience: builds the dataflow index and one recipe.
[[nodiscard]] recipe_result build_recipe(const iteration& it, std::span<const buffer_id> targets,
                                         launch_id restore_before, std::span<const std::uint8_t> evicted = {},
                                         evicted_inputs mode = evicted_inputs::temporary);

}  // namespace sublinear::policy
