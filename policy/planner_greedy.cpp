// Note [Cost-aware greedy]
// Rationale: Capuchin (ASPLOS'20) evicts by "memory saved per second of recompute": cheap
//   producers of big tensors first. It needs no search and adapts to where the peak is.
// Approach: start from no eviction; while the simulated peak exceeds the budget, look at
//   the moment it occurs and drop the candidates that are live and idle there (their gap
//   contains it), best bytes-per-second first, until the bytes dropped cover the excess;
//   simulate again. "Bytes" are what a drop frees at the peak: the round_up(size, 512)
//   the buffer would hold if kept, not the whole pages it holds once planned. Ranked by
//   pages, a 16-byte BatchNorm statistic looked like a 64 KiB activation on the host
//   device, and the greedy dropped hundreds of them for 512 bytes each, each costing a
//   BatchNorm replay (History). The tally of bytes dropped against the excess still
//   counts pages, so each round drops no more than the pages could free. Once the plan fits, undo drops that turned out unnecessary, most
//   expensive first (Capuchin's "free time" refinement, done exactly by simulation).
//   When nothing is left to drop at the peak but some buffers are mapped there only
//   because a recipe rebuilt them ahead of their own use, the one needed soonest is kept
//   for good, and so is every sqrt(m)-th of the m such buffers after it, which splits the
//   recomputed run into Chen-sized pieces in one step.
// Limitations: greedy; a drop that helps one peak may move the peak to a recipe moment.
//   The undo pass is bounded (about 5e5 launch-visits of simulation) on large graphs.
// History: ranked by pages until 2026-11-21. `sublinear plan` on traced host iterations,
//   at 0.75x of the live peak: ResNet-434 118.2 -> 19.4 ms of recomputation, 1,639 -> 307
//   evictions; ResNet-152 19.0 -> 5.2 ms. At 0.5x Transformer-8 went 9.4 -> 9.9 ms, so
//   reforward starts from both rankings (greedy_rank in planner_detail.hpp).
#include <algorithm>
#include <numeric>

#include "policy/planner_detail.hpp"

namespace sublinear::policy {

std::optional<planner::context::evaluation> solve_greedy(planner::context& ctx, std::size_t budget, greedy_rank rank) {
  const candidate_set& cs = ctx.candidates();
  const auto ranked_bytes = [&](std::uint32_t c) {
    return rank == greedy_rank::bytes_freed ? cs[c].unplanned_bytes : cs[c].bytes;
  };
  const std::size_t k = cs.size();
  std::vector<std::uint8_t> dropped(k, 0);
  std::vector<std::uint8_t> pinned(k, 0);  // kept for good: they split a recomputation run
  planner::context::evaluation current = ctx.evaluate(dropped);
  std::vector<std::uint32_t> eligible;
  while (!current.fits(budget)) {
    if (!current.ok) return std::nullopt;
    const launch_id t = current.sim.peak_at;
    const std::size_t excess = current.sim.peak - budget;
    eligible.clear();
    for (std::uint32_t c = 0; c < k; ++c) {
      if (dropped[c] == 0 && pinned[c] == 0 && cs[c].evict_after < t && t < cs[c].restore_before) eligible.push_back(c);
    }
    if (eligible.empty()) {
      // Nothing left to drop there. If buffers are mapped there only because an earlier
      // recipe rebuilt them ahead of their own use, keep the one needed soonest: the run
      // behind it then stays evicted until it is needed.
      std::vector<std::uint32_t> early;
      for (const eviction& ev : current.result.evictions) {
        if (ev.restore_before > t) continue;
        for (buffer_id x : ev.also_regenerates) {
          const std::uint32_t c = cs.index_of(x);
          // Brought back early for another buffer's recipe and still waiting for its own use.
          if (cs[c].evict_after < t && t < cs[c].restore_before) early.push_back(c);
        }
      }
      if (early.empty()) return std::nullopt;  // nothing evictable at the peak
      // Keep the one needed soonest, and every sqrt(m)-th after it, so one round splits a
      // long run into sqrt-sized pieces instead of peeling one buffer per simulation.
      std::sort(early.begin(), early.end(), [&](std::uint32_t a, std::uint32_t b) {
        return cs[a].restore_before != cs[b].restore_before ? cs[a].restore_before < cs[b].restore_before : a < b;
      });
      std::size_t stride = 1;
      while ((stride + 1) * (stride + 1) <= early.size()) ++stride;
      for (std::size_t i = 0; i < early.size(); i += stride) {
        dropped[early[i]] = 0;
        pinned[early[i]] = 1;
      }
      current = ctx.evaluate(dropped);
      continue;
    }
    std::sort(eligible.begin(), eligible.end(), [&](std::uint32_t a, std::uint32_t b) {
      const double ra = static_cast<double>(ranked_bytes(a)) / std::max(cs[a].cost_s, 1e-12);
      const double rb = static_cast<double>(ranked_bytes(b)) / std::max(cs[b].cost_s, 1e-12);
      if (ra != rb) return ra > rb;
      return ranked_bytes(a) != ranked_bytes(b) ? ranked_bytes(a) > ranked_bytes(b) : a < b;
    });
    std::size_t freed = 0;
    for (std::uint32_t c : eligible) {
      dropped[c] = 1;
      freed += cs[c].bytes;
      if (freed >= excess) break;
    }
    current = ctx.evaluate(dropped);
  }

  // Undo needless drops, most expensive first.
  std::vector<std::uint32_t> order;
  for (std::uint32_t c = 0; c < k; ++c) {
    if (dropped[c] != 0) order.push_back(c);
  }
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return cs[a].cost_s != cs[b].cost_s ? cs[a].cost_s > cs[b].cost_s : a < b;
  });
  const std::size_t work = ctx.graph().launches.size() + cs.size() + 1;
  const std::size_t trials = std::max<std::size_t>(16, 500'000 / work);
  for (std::size_t i = 0; i < order.size() && i < trials; ++i) {
    dropped[order[i]] = 0;
    planner::context::evaluation e = ctx.evaluate(dropped);
    if (e.fits(budget) && e.sim.added_compute_s <= current.sim.added_compute_s) {
      current = std::move(e);
    } else {
      dropped[order[i]] = 1;
    }
  }
  return current;
}

namespace {

class greedy_planner final : public attempt_planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "greedy"; }

 protected:
  [[nodiscard]] std::optional<plan> attempt(context& ctx, std::size_t budget) const override {
    std::optional<context::evaluation> e = solve_greedy(ctx, budget);
    if (!e) return std::nullopt;
    return std::move(e->result);
  }
};

}  // namespace

std::unique_ptr<planner> make_greedy_planner() { return std::make_unique<greedy_planner>(); }

}  // namespace sublinear::policy
