// Budget arithmetic (Note [Planning overhead], Note [Scaled cache allowance] in
// planning_overhead.hpp).
#include "policy/planning_overhead.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/checked.hpp"
#include "common/round_up.hpp"
#include "policy/iteration.hpp"
#include "policy/plan.hpp"
#include "policy/simulator.hpp"

namespace sublinear::policy {

namespace {
// The share of the budget kept for fragmentation and prefetches (planning_overhead).
constexpr std::size_t margin_divisor = 16;
}  // namespace

traced_memory traced_memory_of(const iteration& g, std::size_t traced_mapped_peak) {
  // Live bytes as every plan's peak counts them (each buffer rounded to 512 bytes), so
  // that rounding is kept back once, in the plan, and not again in the cache (Note
  // [Planning overhead]).
  traced_memory t{traced_mapped_peak, simulate(g, plan{}).peak, g.granularity};
  // Bytes in sub-page buffers, swept over the launches: +size at alloc_at, -size at free_at.
  const std::size_t n = g.launches.size();
  std::vector<std::int64_t> delta(n + 1, 0);
  for (const buffer& b : g.buffers) {
    if (b.size >= g.granularity) continue;
    const auto bytes = static_cast<std::int64_t>(round_up(b.size, unplanned_rounding));
    delta[std::min<std::size_t>(b.alloc_at, n)] += bytes;
    delta[b.free_at == none ? n : std::min<std::size_t>(b.free_at, n)] -= bytes;
  }
  std::int64_t level = 0, most = 0;
  for (std::size_t l = 0; l < n; ++l) {
    level += delta[l];
    most = std::max(most, level);
  }
  t.sub_page_peak = static_cast<std::size_t>(most);
  return t;
}

const char* to_string(cache_allowance_mode m) noexcept {
  return m == cache_allowance_mode::scaled ? "scaled" : "traced";
}

std::size_t cache_allowance(const traced_memory& t) {
  return t.mapped_peak > t.live_peak ? t.mapped_peak - t.live_peak : 0;
}

std::size_t cache_allowance(const traced_memory& t, std::size_t budget, cache_allowance_mode mode) {
  const std::size_t cache = cache_allowance(t);
  if (mode == cache_allowance_mode::traced || budget >= t.mapped_peak) return cache;
  // cache * budget / mapped_peak without overflow: cache < mapped_peak and budget < mapped_peak.
  const long double share = static_cast<long double>(budget) / static_cast<long double>(t.mapped_peak);
  return static_cast<std::size_t>(static_cast<long double>(cache) * share);
}

std::size_t planning_overhead(std::size_t budget, const traced_memory& t, cache_allowance_mode mode) {
  // The page: under pressure a sub-page allocation that finds no free block maps a fresh
  // page-sized segment, whatever the budget (Note [Planning overhead]). Saturating: the
  // figures may come from a command line, and an overhead past every budget is infeasible.
  return saturating_add(saturating_add(cache_allowance(t, budget, mode), t.granularity),
                        std::min(budget / margin_divisor, t.sub_page_peak));
}

std::size_t budget_for_planner_bytes(std::size_t planner_bytes, const traced_memory& t, cache_allowance_mode mode) {
  // budget - planning_overhead(budget) grows with the budget (the overhead takes less than
  // all of each added byte; scaled, the cache takes cache / mapped peak < 1 of it), so the
  // smallest budget that leaves `planner_bytes` is found by bisection. (Stepping up from a
  // closed-form start, as this did before, could start above the answer after rounding,
  // and below the overhead, where the subtraction wraps.) When no budget that fits in a
  // size_t leaves that much, the answer is the largest one: the caller shows it as the
  // smallest feasible budget, which no device has.
  const auto leaves = [&](std::size_t b) {
    return b - std::min(b, planning_overhead(b, t, mode)) >= planner_bytes;
  };
  constexpr std::size_t most = std::numeric_limits<std::size_t>::max();
  if (!leaves(most)) return most;
  std::size_t lo = planner_bytes;
  const std::size_t start = saturating_add(saturating_add(planner_bytes, cache_allowance(t)), t.granularity);
  std::size_t hi = saturating_add(saturating_mul(start / (margin_divisor - 1), margin_divisor), margin_divisor);
  while (!leaves(hi)) hi = saturating_mul(hi, std::size_t{2});  // ends: leaves(most) holds
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (leaves(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

}  // namespace sublinear::policy
