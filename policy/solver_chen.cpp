// Chen et al. 2016, Alg. 3 with its grid search over the segment budget B (solve_chen):
// the `chen` planner and one of reforward's starting points.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "policy/solvers.hpp"

namespace sublinear::policy {

std::optional<planner::context::evaluation> solve_chen(planner::context& ctx, std::size_t budget) {
  using evaluation = planner::context::evaluation;
  const candidate_set& cs = ctx.candidates();
  const std::size_t k = cs.size();
  double x = 0.0;
  double y = 0.0;
  for (const candidate& c : cs.all()) {
    x += static_cast<double>(c.bytes);
    y = std::max(y, static_cast<double>(c.bytes));
  }
  const double b0 = std::sqrt(x * y);
  std::vector<double> grid{0.0};  // B = 0: every candidate is a checkpoint (no eviction)
  for (int step = -16; step <= 16; ++step) grid.push_back(b0 * std::pow(2.0, step / 4.0));
  grid.push_back(std::numeric_limits<double>::infinity());  // one segment: drop everything

  // Note [Chen's layers]
  // Rationale: Alg. 3 walks a chain of layers, each with one output the next reads. Our
  //   candidates are buffers: an LSTM step produces several (gates, cell, hidden), and a
  //   walk over them keeps whichever comes last in a segment, often a gate that no later
  //   step reads. Every recipe then reaches back to the first step: on a traced LSTM-192
  //   at batch 32 every grid point peaked above the plan that evicts nothing (25-39 MiB
  //   against 11.8), so chen was infeasible at every budget.
  // Approach: walk twice. Once over candidates, as the paper's chain has them (on a plain
  //   chain each candidate is a layer), and once over the graph's segments (the chain
  //   solver's: time steps, residual blocks), where a checkpoint keeps a segment's outputs
  //   and a segment's internal buffers are always dropped. The cheapest fitting plan of
  //   both walks wins.
  const std::vector<chain_segment> segments = chain_segments(cs);
  std::vector<double> segment_bytes(segments.size(), 0.0);
  for (std::size_t s = 0; s < segments.size(); ++s) {
    for (std::uint32_t c : segments[s].internal) segment_bytes[s] += static_cast<double>(cs[c].bytes);
    for (std::uint32_t c : segments[s].outputs) segment_bytes[s] += static_cast<double>(cs[c].bytes);
  }

  std::optional<evaluation> best;
  std::vector<std::uint8_t> dropped(k, 0);
  std::vector<std::vector<std::uint8_t>> tried;
  const auto consider = [&] {
    if (std::find(tried.begin(), tried.end(), dropped) != tried.end()) return;  // grid points often agree
    tried.push_back(dropped);
    evaluation e = ctx.evaluate_keeping_refused(dropped);
    if (!e.fits(budget)) return;
    if (!best || e.sim.added_compute_s < best->sim.added_compute_s ||
        (e.sim.added_compute_s == best->sim.added_compute_s && e.sim.peak < best->sim.peak)) {
      best = std::move(e);
    }
  };
  for (double seg_budget : grid) {
    double temp = 0.0;
    for (std::size_t i = 0; i < k; ++i) {
      temp += static_cast<double>(cs[i].bytes);
      dropped[i] = temp > seg_budget ? 0 : 1;
      if (temp > seg_budget) temp = 0.0;
    }
    consider();
    if (segments.size() == k) continue;  // every segment is one candidate: the same walk
    std::fill(dropped.begin(), dropped.end(), std::uint8_t{0});
    temp = 0.0;
    for (std::size_t s = 0; s < segments.size(); ++s) {
      temp += segment_bytes[s];
      const std::uint8_t drop = temp > seg_budget ? 0 : 1;
      if (temp > seg_budget) temp = 0.0;
      for (std::uint32_t c : segments[s].internal) dropped[c] = 1;
      for (std::uint32_t c : segments[s].outputs) dropped[c] = drop;
    }
    consider();
  }
  return best;
}

}  // namespace sublinear::policy
