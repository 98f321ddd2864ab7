// Budget arithmetic: how much of a budget the planner gets, once the allocator's caching
// is kept back, and the smallest budget that gives it a given share. The engine
// (runtime/engine_plan.cpp) and `sublinear plan` (runtime/report/report_plan.cpp) both
// plan for `budget - planning_overhead(...)`.
//
// Note [Planning overhead]
// Rationale: the planners count live bytes (at page granularity for what they evict); the
//   budget limits mapped bytes, which also hold the allocator's cache: free space inside
//   partly used segments, and whole segments nobody asked back. Keeping too much of the
//   budget out of the planner's share costs recomputation and makes small budgets
//   infeasible; keeping too little runs the allocator out of room in a planned iteration,
//   which the pressure valve (Note [Pressure valve]) cannot always relieve, and runs it
//   against the budget more often, which costs time even when the valve succeeds.
// Approach: the share kept back is the cache the traced iteration showed at its peak
//   (mapped bytes minus live bytes as the plans count them, each buffer rounded to 512
//   bytes, so that rounding is kept back once, in the plan), one page, and a sixteenth of
//   the budget, for fragmentation the trace cannot show and for prefetches. The page is
//   what a sub-page allocation costs under pressure when no free block fits: a fresh
//   page-sized segment. The sixteenth is capped at the most bytes the traced iteration
//   held in sub-page buffers at once: that fragmentation is of pages that sub-page
//   buffers share (larger blocks get segments of their own size, evicted ones whole pages
//   the plans count), and prefetches wait for room.
// Limitations: the sixteenth is measured, not derived (docs/runtime.md, "Budget
//   arithmetic", compares the alternatives): the fragmentation of thousands of sub-page
//   buffers does not shrink with the budget.
//
// Note [Scaled cache allowance]
// Rationale: the traced cache (Note [Planning overhead]) is what the allocator held beside
//   the live bytes of an unbudgeted iteration at its peak: mostly blocks and segments it
//   kept because nothing asked for them back. A planned iteration under a small budget
//   runs with a fraction of those live bytes, and the budget's pressure gives idle
//   segments back, so keeping the whole traced cache out of a small budget makes budgets
//   infeasible that hold (DenseNet-121 at batch 32 on the host device: the traced cache
//   kept reforward's smallest budget at 31.5 MiB; planned at 18.5-22 MiB with the cache
//   scaled, it held the budget and trained bit-identically). Every budget the traced cache
//   admits has held in every stress run, so it stays the rule there.
// Approach: `traced` keeps the whole traced cache back. Only when the planner finds that
//   share infeasible does the engine plan again with `scaled`: the traced cache times
//   budget / traced mapped peak (at most all of it), the page and the capped sixteenth as
//   before. If a planned iteration of such a plan still runs out of room after the
//   pressure valve and every fallback, the engine lifts the budget for the rest of that
//   iteration (iteration_report::budget_lifted), plans again with the traced cache, and
//   without a plan runs plain caching (make_plan in runtime/engine_plan.cpp, overrun in
//   runtime/engine_pressure.cpp). A plan made with the traced cache never lifts the
//   budget, nor does a request the device's memory or the address space refused
//   (out_of_memory::cause). SUBLINEAR_SCALED_CACHE=0 (settings::scaled_cache) refuses
//   such budgets instead.
// Limitations: a budget below the traced cache's smallest is held only as long as its
//   plan does not run out; the time a plan costs is not monotone across that smallest
//   budget (just below it the planner gets more bytes than just above).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace sublinear::policy {

struct iteration;

// What the traced iteration showed of memory: its peak of mapped bytes, its peak of live
// bytes as the plans count them (the simulator's peak with nothing evicted) and the
// allocator's page granularity.
struct traced_memory {
  std::size_t mapped_peak = 0;
  std::size_t live_peak = 0;
  std::size_t granularity = 0;
  // The most bytes held at once in buffers smaller than a page (each rounded to 512
  // bytes); the largest value when unknown, which leaves the sixteenth uncapped.
  std::size_t sub_page_peak = std::numeric_limits<std::size_t>::max();
};
[[nodiscard]] traced_memory traced_memory_of(const iteration& graph, std::size_t traced_mapped_peak);

// How much of the traced cache the planner keeps back (Note [Scaled cache allowance]).
enum class cache_allowance_mode : std::uint8_t { traced, scaled };
[[nodiscard]] const char* to_string(cache_allowance_mode m) noexcept;

// The traced cache (what `sublinear plan` adds to a plan's live bytes to predict mapped
// bytes); with `scaled`, that cache times budget / traced mapped peak, at most all of it.
[[nodiscard]] std::size_t cache_allowance(const traced_memory& traced);
[[nodiscard]] std::size_t cache_allowance(const traced_memory& traced, std::size_t budget, cache_allowance_mode mode);
[[nodiscard]] std::size_t planning_overhead(std::size_t budget, const traced_memory& traced,
                                            cache_allowance_mode mode = cache_allowance_mode::traced);
// The smallest budget whose share for the planner (budget - planning_overhead) is at least
// `planner_bytes`: what to tell a user whose budget was infeasible.
[[nodiscard]] std::size_t budget_for_planner_bytes(std::size_t planner_bytes, const traced_memory& traced,
                                                   cache_allowance_mode mode = cache_allowance_mode::traced);

}  // namespace sublinear::policy
