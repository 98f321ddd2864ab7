// Retention: keeping a buffer the program frees alive a while longer, so that recipes can
// read it in place instead of rebuilding it.
//
// Note [Retention]
// Rationale: a drop set can only choose which live activations to drop. Some networks
//   free, before the backward pass, small buffers from which large saved ones are cheap to
//   rebuild: a DenseNet block's features die when the block's forward ends, and every
//   concatenation saved for backward is a copy of them, so dropping a concatenation means
//   re-running the whole block. Memory-efficient DenseNet implementations keep the
//   features and rebuild the concatenations; the same holds wherever a small freed buffer
//   feeds a large saved one.
// Approach: a retention defers the free of one buffer until before a later launch; the
//   runtime keeps the block allocated when the program frees it (the allocator asks its
//   observer, allocation_observer::defer_free) and frees it there. For planning, a plan's
//   retentions are applied to the iteration (with_retentions: the buffer's free_at moves
//   later), and everything else (candidates, recipes, simulation) works on that
//   iteration unchanged: a retained buffer is resident and unchanged at the restore
//   points it covers, so recipes read it in place, and it holds its bytes until then.
//   planner::make_plan plans twice, on the iteration as traced and with every retention
//   option applied, trims the second plan's retentions to those its recipes read, and
//   keeps whichever plan adds less compute (or the one that fits). Trimming only shortens
//   retentions, so the trimmed plan needs no more bytes than the one the planner checked.
//   The options and the trimming: docs/design-notes.md#retention.
// Limitations: retentions are all-or-nothing before planning (the planner does not
//   choose among options; trimming removes the unused ones); a retained buffer is never
//   itself evicted; the planners pay for planning twice when options exist.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "policy/candidates.hpp"
#include "policy/plan.hpp"

namespace sublinear::policy {

// The retentions worth offering the planners on this iteration (see the Note).
[[nodiscard]] std::vector<retention> retention_options(const candidate_set& cs);

// The iteration with each retained buffer freed before its release_before instead.
// Throws std::invalid_argument on a retention check_retentions refuses.
[[nodiscard]] iteration with_retentions(const iteration& it, std::span<const retention> r);

// Empty when every retention names a buffer freed within the iteration, once, and moves
// its free later (free_at < release_before <= launches); otherwise the first problem.
[[nodiscard]] std::string check_retentions(const iteration& it, std::span<const retention> r);

// Keeps only the retentions some recipe of `p` reads after the buffer's traced free, each
// until just after the last restore point whose recipe reads it. `it` is the iteration as
// traced (without the retentions).
void trim_retentions(plan& p, const iteration& it);

}  // namespace sublinear::policy
