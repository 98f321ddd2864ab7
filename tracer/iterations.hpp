// Iterations: explicit markers, automatic period detection, divergence detection.
//
// Note [Iteration detection]
// Rationale: the plan is made for one iteration and applied to the next ones, so the
//   tracer must know where iterations begin. A framework hook or the C marker says so
//   exactly; a program that gives no marker still repeats the same sequence of launches
//   and allocations every step, with a few extra events now and then (logging, a data
//   loader, a checkpoint).
// Approach: every allocation, free, launch, copy and set gets a signature (kind, kernel
//   name, dimensions, sizes; never addresses). A signature that occurs once per iteration
//   recurs at a steady distance: the period. We take the signatures whose gaps are all
//   within a tolerance of their median, and the median gap that most of them agree on is
//   the period (noise signatures are irregular and drop out; per-layer signatures recur
//   more than once per iteration and disagree). Of those signatures, the anchor is the
//   one seen at the highest live-byte level: mid-iteration, near the peak. Between two
//   consecutive anchor occurrences the live bytes fall to their low point once, between
//   one iteration's last free and the next one's first allocation; the boundary is the
//   end of that low stretch. Consecutive iterations are accepted when their signature
//   multisets differ in at most max((1 - min_similarity) x length, slack_events) events.
//   Divergence: the traced iteration's signatures are compared one by one with the live
//   stream; the first mismatch (or a premature or missing end) is reported with both
//   events described.
// Limitations: detection needs three occurrences of the anchor (the first iteration often
//   differs: lazily created optimizer state) and yields the complete iterations between
//   them. Divergence is exact: an extra logging launch is a divergence (the runtime then
//   restores everything and traces again, which is always safe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracer/events.hpp"

namespace sublinear::tracer {

// Signatures of significant events (alloc, free, launch, memcpy, memset) of one trace;
// 0 for the rest (markers, event record/wait). Equal across traces for equal events:
// kernels are identified by name.
class signer {
 public:
  explicit signer(const trace& t);
  [[nodiscard]] std::uint64_t operator()(const event& e) const noexcept;
  // The signature of `e` given the hash of its kernel's name (launches only).
  [[nodiscard]] static std::uint64_t sign(const event& e, std::uint64_t kernel_hash) noexcept;
  [[nodiscard]] static std::uint64_t name_hash(const std::string& name) noexcept;

 private:
  std::vector<std::uint64_t> kernel_hashes_;
};

// A short description of an event for messages: "launch conv_fwd grid (4,1,1) block
// (256,1,1) smem 0, 96 param bytes", "alloc 4096 B".
[[nodiscard]] std::string describe(const trace& t, const event& e);

struct period_options {
  double tolerance = 0.10;         // relative spread allowed in an anchor's gaps
  std::size_t slack_events = 8;    // ... plus this many events
  std::size_t min_period_events = 16;  // shorter recurrences are loops inside an iteration
  double min_similarity = 0.90;    // signature multiset overlap of consecutive iterations
                                   // (or at most slack_events differing, if more lenient)
};

struct detected_iterations {
  std::vector<event_range> iterations;  // complete iterations, in order
  std::size_t period = 0;               // significant events per iteration (median gap)
  std::uint64_t anchor = 0;             // the anchor's signature
  double similarity = 0.0;              // lowest overlap between consecutive iterations
  std::string reason;                   // why nothing was found, when nothing was
  [[nodiscard]] bool found() const { return !iterations.empty(); }
};

[[nodiscard]] detected_iterations detect_iterations(const trace& t, const period_options& options = {});

// The marked iterations when the trace has at least two markers, detected ones otherwise.
[[nodiscard]] std::vector<event_range> iterations_of(const trace& t, const period_options& options = {});

struct divergence {
  std::size_t index = 0;  // position among the significant events of the iteration
  std::string expected;   // description of the traced event, or "end of iteration"
  std::string seen;       // description of the live event, or "end of iteration"
};

// Compares a live event stream with a traced iteration, event by event.
class divergence_detector {
 public:
  divergence_detector(const trace& traced, event_range iteration);

  // The next live event (from any trace: kernels are matched by name). Insignificant
  // events are ignored. Returns the divergence when this event is the first that differs;
  // after a divergence every call returns nullopt until restart().
  std::optional<divergence> feed(const trace& source, const event& e);
  // The live iteration ended: a divergence if fewer events were seen than traced.
  std::optional<divergence> finish();
  // Starts comparing the next iteration.
  void restart() noexcept;
  [[nodiscard]] std::size_t position() const noexcept { return position_; }
  [[nodiscard]] std::size_t length() const noexcept { return expected_.size(); }
  [[nodiscard]] bool diverged() const noexcept { return diverged_; }

 private:
  std::vector<std::uint64_t> expected_;
  trace events_;  // the significant traced events and the kernel table, to describe them
  const trace* source_ = nullptr;       // the live trace whose kernel hashes are cached
  std::vector<std::uint64_t> source_hashes_;
  std::size_t position_ = 0;
  bool diverged_ = false;
};

// The first divergence of `seen` (events `seen_range` of `live`) from `expected`.
[[nodiscard]] std::optional<divergence> find_divergence(const trace& traced, event_range expected,
                                                        const trace& live, event_range seen);

}  // namespace sublinear::tracer
