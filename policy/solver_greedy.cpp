// Note [Cost-aware greedy]
// Rationale: Capuchin (ASPLOS'20) evicts by "memory saved per second of recompute": cheap
//   producers of big tensors first. It needs no search and adapts to where the peak is.
// Approach: start from no eviction; while the simulated peak exceeds the budget, look at
//   the moment it occurs and drop the candidates that are live and idle there (their gap
//   contains it), best bytes-per-second first, until the bytes dropped cover the excess;
//   simulate again. "Bytes" are what a drop frees at the peak: the round_up(size, 512)
//   the buffer would hold if kept, not the whole pages it holds once planned (ranked by
//   pages, a 16-byte BatchNorm statistic looks like a 64 KiB activation on the host
//   device; greedy_rank::footprint still ranks so, as one of reforward's seeds). The tally
//   of bytes dropped against the excess counts pages, so each round drops no more than
//   the pages could free. Once the plan fits, undo drops that turned out unnecessary,
//   most expensive first (Capuchin's "free time" refinement, done exactly by simulation).
//   When nothing is left to drop at the peak but some buffers are mapped there only
//   because a recipe rebuilt them ahead of their own use, the one needed soonest is kept
//   for good, and so is every sqrt(m)-th of the m such buffers after it, which splits the
//   recomputed run into Chen-sized pieces in one step.
// Limitations: greedy; a drop that helps one peak may move the peak to a recipe moment,
//   and the rounds that follow may climb from there. Where the rounds get nowhere (a
//   recipe they cannot build, or nothing left to drop at the peak), steepest descent on
//   the peak takes over (descend_peak). The undo pass and the descent are bounded (about
//   5e5 launch-visits of simulation) on large graphs.
#include <algorithm>
#include <numeric>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

// Steepest descent on the peak (Note [Cost-aware greedy], Limitations): one candidate
// dropped or kept back at a time, each trial simulated exactly, the best taken while it
// lowers the peak. solve_greedy starts it from the lowest peak its rounds passed through,
// then, if that ends above the budget, from no eviction. The moves are the ones that can
// change the peak where it occurs: drop a candidate idle there (its gap contains the
// peak's launch), or keep back a dropped one whose recipe runs there (it restores at that
// launch, or a recipe restoring there regenerates it on the way). Bounded by `trials`
// simulations.
std::optional<planner::context::evaluation> descend_peak(planner::context& ctx, std::size_t budget,
                                                         planner::context::evaluation current, std::size_t& trials) {
  const candidate_set& cs = ctx.candidates();
  std::vector<std::uint8_t> dropped = current.dropped;
  std::vector<std::uint32_t> moves;
  while (current.ok && !current.fits(budget) && trials > 0) {
    const launch_id t = current.sim.peak_at;
    moves.clear();
    for (std::uint32_t c = 0; c < cs.size(); ++c) {
      if (dropped[c] == 0 && cs[c].evict_after < t && t < cs[c].restore_before) moves.push_back(c);
    }
    for (const eviction& ev : current.result.evictions) {
      if (ev.restore_before != t) continue;
      moves.push_back(cs.index_of(ev.target));
      for (buffer_id x : ev.also_regenerates) moves.push_back(cs.index_of(x));
    }
    std::sort(moves.begin(), moves.end());
    moves.erase(std::unique(moves.begin(), moves.end()), moves.end());
    std::optional<planner::context::evaluation> best;
    for (std::uint32_t c : moves) {
      if (c == none || trials == 0) continue;
      --trials;
      dropped[c] ^= 1;
      planner::context::evaluation e = ctx.evaluate(dropped);
      dropped[c] ^= 1;
      if (!e.ok || e.sim.peak >= current.sim.peak) continue;
      if (!best || e.sim.peak < best->sim.peak ||
          (e.sim.peak == best->sim.peak && e.sim.added_compute_s < best->sim.added_compute_s)) {
        best = std::move(e);
      }
    }
    if (!best) break;  // a local minimum of the peak
    current = std::move(*best);
    dropped = current.dropped;
  }
  if (!current.fits(budget)) return std::nullopt;
  return current;
}

}  // namespace

std::optional<planner::context::evaluation> solve_greedy(planner::context& ctx, std::size_t budget, greedy_rank rank) {
  const candidate_set& cs = ctx.candidates();
  const auto ranked_bytes = [&](std::uint32_t c) {
    return rank == greedy_rank::bytes_freed ? cs[c].unplanned_bytes : cs[c].bytes;
  };
  const std::size_t k = cs.size();
  std::vector<std::uint8_t> dropped(k, 0);
  std::vector<std::uint8_t> pinned(k, 0);  // kept for good: they split a recomputation run
  planner::context::evaluation current = ctx.evaluate(dropped);
  const std::size_t work = ctx.graph().launches.size() + cs.size() + 1;
  const std::size_t trials = std::max<std::size_t>(16, 500'000 / work);
  const planner::context::evaluation start = current;
  std::optional<planner::context::evaluation> lowest;  // the lowest peak passed through
  // The greedy got nowhere: descend from the lowest peak it saw, then from no eviction.
  const auto stuck = [&]() -> bool {
    std::size_t left = trials;
    std::optional<planner::context::evaluation> e;
    if (lowest) e = descend_peak(ctx, budget, std::move(*lowest), left);
    if (!e && start.ok) e = descend_peak(ctx, budget, start, left);
    if (!e) return false;
    current = std::move(*e);
    dropped = current.dropped;
    return true;
  };
  std::vector<std::uint32_t> eligible;
  while (!current.fits(budget)) {
    if (!current.ok) {
      if (stuck()) break;
      return std::nullopt;
    }
    if (!lowest || current.sim.peak < lowest->sim.peak) lowest = current;
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
      if (early.empty()) {  // nothing evictable at the peak
        if (stuck()) break;
        return std::nullopt;
      }
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

}  // namespace sublinear::policy
