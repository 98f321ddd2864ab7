// Online iteration boundaries: where to deliver an iteration marker, decided launch by
// launch, for programs that give none (SUBLINEAR_ITERATION=auto).
//
// Note [Online iteration boundaries]
// Rationale: the engine plans one iteration and applies the plan to the next ones, so it
//   must be told where iterations begin, before the first launch of each, which a program
//   run unchanged under `sublinear run` does not say. The offline detector (Note
//   [Iteration detection] in iterations.hpp) needs a finished trace; here boundaries are
//   needed as launches are queued, with O(1) work per launch once found.
// Approach: each launch is reduced to a signature (kind, kernel, grid, block, shared
//   memory, byte count; never addresses) and paired with the bytes the program had
//   allocated when it was launched. A training step repeats both: the period P is the
//   smallest distance at which the last 2P launches repeat themselves, signature AND live
//   bytes. Live bytes are what rule out the repeating layers inside one step: in the
//   forward pass every block leaves its activations behind, so the same kernels recur
//   at rising live bytes. The phase is the first launch of the low stretch of live bytes
//   in a period, where only persistent state is alive (where an optimizer-step marker
//   goes). Then a marker is due every P launches, and a launch that differs from the
//   signature expected at its phase (an evaluation pass, a new batch shape) drops the
//   period and detection starts again there, while the engine sees its own divergence.
// Limitations: needs two identical consecutive iterations after the first, whose lazily
//   made state usually differs. A step whose launch sequence varies (data-dependent
//   lengths, periodic logging inside every step at another period) is never found: the
//   runtime then keeps tracing and its event cap applies. A period needs `min_evidence`
//   launches of repetition, so a tiny step is found after tens of iterations (why:
//   docs/design-notes.md#online-iteration-boundaries). Pure: no device, clock or locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tracer/events.hpp"

namespace sublinear::tracer {

// A launch's identity for period finding: equal for the same kernel launched the same way.
[[nodiscard]] std::uint64_t launch_signature(event_kind kind, std::uint64_t kernel, const dims& grid,
                                             const dims& block, std::uint32_t shared_mem,
                                             std::uint64_t bytes) noexcept;

struct online_iteration_options {
  std::size_t min_period = 8;            // launches; shorter recurrences are loops inside a step
  // Launches the repetition must span (at least two periods): a short loop that repeats
  // for a while (initialising parameters of one shape) is not taken for the step.
  std::size_t min_evidence = 256;
  std::size_t check_every = 64;          // launches between two searches for a period
  std::size_t max_history = 1u << 20;    // launches kept while searching; older ones are dropped
};

class online_iterations {
 public:
  explicit online_iterations(online_iteration_options options = {});

  // The next launch, in program order, with the bytes the program had allocated when it
  // was launched. True when it is the first launch of a new iteration: deliver the marker
  // before it.
  bool on_launch(std::uint64_t signature, std::size_t live_bytes);

  // Launches per iteration once a period is known; 0 while searching.
  [[nodiscard]] std::size_t period() const noexcept { return period_; }
  // Markers returned so far, and periods dropped because a launch differed.
  [[nodiscard]] std::size_t boundaries() const noexcept { return boundaries_; }
  [[nodiscard]] std::size_t lost() const noexcept { return lost_; }

 private:
  void search();
  [[nodiscard]] bool repeats(std::size_t p) const noexcept;
  void lock(std::size_t p);
  void restart();

  online_iteration_options options_;
  // Searching: the launches since the last restart.
  std::vector<std::uint64_t> signatures_;
  std::vector<std::size_t> live_;
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> positions_;  // signature -> indices
  std::size_t since_check_ = 0;
  // Locked: one period of signatures, starting at the boundary, and where we are in it.
  std::size_t period_ = 0;
  std::vector<std::uint64_t> expected_;
  std::size_t phase_ = 0;  // index in expected_ of the next launch
  std::size_t boundaries_ = 0;
  std::size_t lost_ = 0;
};

}  // namespace sublinear::tracer
