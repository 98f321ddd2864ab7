// Note [Multi-pass]
// Rationale: a drop set regenerates a dropped buffer once and keeps it until its last use
//   (Note [Drop sets]), so when the backward pass reaches a dropped run the whole run is
//   resident at once: its peak cannot fall below the kept checkpoints plus the largest
//   run, often far above the bytes no plan can evict (candidate_set::lower_bound_bytes).
//   Chen et al. (2016, §4.3) and Rotor (Beaumont et al., 2019) go lower by recomputing a
//   segment more than once and storing only some of its outputs the first time.
// Approach: a drop set with horizons. A dropped candidate with horizon h is rebuilt in
//   scratch (and stays evicted) by every recipe that restores before h, and regenerated at
//   its own address by the first recipe at or after h (its own, at the latest); the
//   runtime already replays scratch rebuilds of evicted inputs (Note [Replay recipes]).
//   Over the chain solver's segments that expresses a two-level schedule: every k-th
//   segment's outputs kept; of the other outputs, every s-th stored during its run's
//   first recomputation and the rest rebuilt when the next segment's backward begins;
//   every segment's internals rebuilt together when its backward begins. Memory is the
//   top checkpoints, one run's stored outputs and one segment's internals; compute is
//   about two forwards plus s/2 segments per segment. The schedule in detail:
//   docs/design-notes.md#multi-pass.
// Limitations: two levels and uniform spacing. Rotor's multi-level dynamic program is
//   Note [Multi-level schedules] (solver_multilevel.cpp); solve_multi_pass takes the
//   cheaper of the two.
#include <algorithm>
#include <cstdint>
#include <set>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

// A drop set that recomputes less than this share of the forward pass is left alone:
// multi-level schedules beat drop sets only near the drop sets' least peak, where they
// rebuild most of the forward (docs/policy.md, "Multi-level schedules").
constexpr double multi_level_share = 0.75;

// What solve_two_level keeps per context: its least peak, once a search has seen the whole
// grid (every budget below it is then answered at once).
struct two_level_state {
  std::optional<std::size_t> least;
};

// The grid of Note [Multi-pass] over one iteration's segments.
class two_level_grid {
 public:
  explicit two_level_grid(planner::context& ctx) : ctx_(ctx), segs_(chain_segments(ctx.candidates())) {
    const candidate_set& cs = ctx.candidates();
    const std::size_t m = segs_.size();
    // When each segment's backward begins: the first restore point among its internals
    // (its outputs when it has none).
    begins_.assign(m, none);
    for (std::size_t j = 0; j < m; ++j) {
      const auto& members = segs_[j].internal.empty() ? segs_[j].outputs : segs_[j].internal;
      for (std::uint32_t c : members) begins_[j] = std::min(begins_[j], cs[c].restore_before);
    }
    for (std::size_t k = 1; k <= m; k = k < 16 ? k + 1 : k + k / 4) spacings_.insert(k);
    if (m > 0) spacings_.insert(m);
    dropped_.resize(cs.size());
    horizons_.resize(cs.size());
  }

  [[nodiscard]] bool usable() const noexcept { return segs_.size() >= 2; }
  [[nodiscard]] const std::set<std::size_t>& spacings() const noexcept { return spacings_; }
  static constexpr std::size_t sub[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};

  // Top checkpoints every k segments, every s-th output of a run stored.
  planner::context::evaluation evaluate(std::size_t k, std::size_t s) {
    const std::size_t m = segs_.size();
    std::fill(dropped_.begin(), dropped_.end(), std::uint8_t{1});
    std::fill(horizons_.begin(), horizons_.end(), none);
    std::size_t in_run = 0;  // position of the segment within its run of dropped outputs
    for (std::size_t j = 0; j < m; ++j) {
      for (std::uint32_t c : segs_[j].internal) horizons_[c] = begins_[j];
      if ((j + 1) % k == 0) {
        for (std::uint32_t c : segs_[j].outputs) dropped_[c] = 0;
        in_run = 0;
        continue;
      }
      ++in_run;
      if (in_run % s == 0 || j + 1 == m) continue;  // stored by the first recipe that reads it
      for (std::uint32_t c : segs_[j].outputs) horizons_[c] = begins_[j + 1];
    }
    return ctx_.evaluate(dropped_, horizons_);
  }

 private:
  planner::context& ctx_;
  std::vector<chain_segment> segs_;
  std::vector<launch_id> begins_;
  std::set<std::size_t> spacings_;
  std::vector<std::uint8_t> dropped_;
  std::vector<launch_id> horizons_;
};

}  // namespace

// The grid of (k, s), each plan simulated exactly, the cheapest that fits kept; for each k
// the first s that fits ends the row, since larger s only recompute more.
std::optional<planner::context::evaluation> solve_two_level(planner::context& ctx, std::size_t budget) {
  using evaluation = planner::context::evaluation;
  if (!ctx.multi_pass()) return std::nullopt;
  std::optional<std::size_t>& cached = ctx.state<two_level_state>().least;
  if (cached && (*cached == 0 || budget < *cached)) return std::nullopt;
  two_level_grid grid(ctx);
  if (!grid.usable()) {
    cached = 0;
    return std::nullopt;
  }
  std::optional<evaluation> best;
  std::size_t least = 0;  // over every point evaluated: the whole grid when nothing fits
  for (std::size_t k : grid.spacings()) {
    for (std::size_t s : two_level_grid::sub) {
      if (s > k) break;
      evaluation e = grid.evaluate(k, s);
      if (e.ok && (least == 0 || e.sim.peak < least)) least = e.sim.peak;
      if (!e.fits(budget)) continue;
      if (!best || e.sim.added_compute_s < best->sim.added_compute_s ||
          (e.sim.added_compute_s == best->sim.added_compute_s && e.sim.peak < best->sim.peak)) {
        best = std::move(e);
      }
      break;  // a larger s for this k recomputes more
    }
  }
  if (!best) cached = least;
  return best;
}

std::size_t two_level_least_peak(planner::context& ctx) {
  if (!ctx.multi_pass()) return 0;
  const std::optional<std::size_t>& cached = ctx.state<two_level_state>().least;
  if (!cached) (void)solve_two_level(ctx, 0);  // fits nothing: sees the whole grid
  return cached.value_or(0);
}

std::optional<planner::context::evaluation> solve_multi_pass(planner::context& ctx, std::size_t budget) {
  std::optional<planner::context::evaluation> two = solve_two_level(ctx, budget);
  std::optional<planner::context::evaluation> many = solve_multi_level(ctx, budget);
  if (!two || (many && many->sim.added_compute_s < two->sim.added_compute_s)) return many;
  return two;
}

// Planners take plans beyond drop sets where no drop set meets the budget, and here: just
// above the drop sets' least peak the best drop set rebuilds most of the forward pass, and
// a multi-level schedule may rebuild less. The two-level grid is not tried: its uniform
// second pass did not beat a drop set on any trace measured (docs/policy.md).
void prefer_multi_level(planner::context& ctx, std::size_t budget, std::optional<planner::context::evaluation>& best) {
  if (!best || !ctx.multi_pass()) return;
  const iteration& it = ctx.graph();
  double forward_s = 0.0;
  for (launch_id l = 0; l < ctx.candidates().turning_point() && l < it.launches.size(); ++l) forward_s += it.launches[l].cost_s;
  if (best->sim.added_compute_s < multi_level_share * forward_s) return;
  std::optional<planner::context::evaluation> many = solve_multi_level(ctx, budget);
  if (many && many->sim.added_compute_s < best->sim.added_compute_s) best = std::move(many);
}

std::size_t multi_pass_least_peak(planner::context& ctx) {
  const std::size_t two = two_level_least_peak(ctx);
  const std::size_t many = multi_level_least_peak(ctx);
  if (two == 0 || many == 0) return std::max(two, many);
  return std::min(two, many);
}

}  // namespace sublinear::policy
