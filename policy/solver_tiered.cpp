// Note [Tiered drop sets]
// Rationale: the chain solver (Note [Chain solver]) keeps or drops a segment's internal
//   activations together, so in a ResNet block it cannot keep the convolution outputs and
//   drop the BatchNorm outputs beside them, which cost far less to rebuild per byte. The
//   cheap activations are what a good plan drops first, and the greedy solver, which
//   ranks one candidate at a time, strands the skip connections' outputs between kept
//   and dropped (docs/design-notes.md#tiered-drop-sets).
// Approach: three tiers over the chain solver's segments, a small grid, every point
//   simulated exactly:
//   - price: a candidate's own recipe cost per byte it frees (cost_s / unplanned_bytes);
//   - tier 1: every internal candidate priced at or below theta is dropped, in every
//     segment; theta runs over quantiles of the internal candidates' prices (the 0th
//     quantile drops none);
//   - segment outputs (the skip connections' chain): every k-th segment's are kept, the
//     others dropped, so a run of k outputs comes back together when its backward needs
//     it;
//   - tier 2: the r segments whose remaining internals are cheapest per byte are dropped
//     whole.
//   For each (theta, k) the leanest point (r = all segments) is tried first; if it fits,
//   r is bisected for the fewest whole segments that fit (peaks fall as r grows, nearly
//   always). The cheapest fitting point over the grid wins. The solver's state in the
//   context keeps the least peak of a search that found nothing, and answers lower
//   budgets at once. `tiered` is the grid on its own; reforward seeds from it too.
// Limitations: a grid with uniform spacing of kept outputs, not an optimum; segments come
//   from chain_segments, so graphs with few articulations (DenseNet's dense blocks) get
//   few choices.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

constexpr double theta_quantiles[] = {0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4};
constexpr std::size_t output_spacings[] = {1, 2, 3, 4, 6, 8, 12, 16, 24};

// What solve_tiered keeps per context: its least peak, once a search found nothing (lower
// budgets are then answered at once).
struct tiered_state {
  std::optional<std::size_t> least;
};

class tier_grid {
 public:
  explicit tier_grid(planner::context& ctx) : ctx_(ctx), segs_(chain_segments(ctx.candidates())) {
    const candidate_set& cs = ctx.candidates();
    std::vector<double> prices;
    for (const chain_segment& s : segs_) {
      for (std::uint32_t c : s.internal) prices.push_back(price(c));
    }
    std::sort(prices.begin(), prices.end());
    for (double q : theta_quantiles) {
      // Below every price: the 0th quantile drops no internal candidate by tier.
      const double theta = q == 0.0 || prices.empty() ? -1.0 : prices[static_cast<std::size_t>(q * static_cast<double>(prices.size() - 1))];
      if (thetas_.empty() || theta != thetas_.back()) thetas_.push_back(theta);
    }
    dropped_.resize(cs.size());
    whole_.resize(segs_.size());
  }

  [[nodiscard]] std::size_t segments() const noexcept { return segs_.size(); }
  [[nodiscard]] const std::vector<double>& thetas() const noexcept { return thetas_; }

  // Ranks the segments for tier 2 under `theta`: cheapest remaining internals per byte
  // first; segments with none left come last.
  void rank(double theta) {
    const candidate_set& cs = ctx_.candidates();
    std::vector<double> per(segs_.size(), 0.0);
    std::vector<std::uint8_t> empty(segs_.size(), 1);
    for (std::size_t j = 0; j < segs_.size(); ++j) {
      double cost = 0.0;
      double bytes = 0.0;
      for (std::uint32_t c : segs_[j].internal) {
        if (price(c) <= theta) continue;
        cost += cs[c].cost_s;
        bytes += static_cast<double>(cs[c].unplanned_bytes);
      }
      if (bytes > 0.0) {
        per[j] = cost / bytes;
        empty[j] = 0;
      }
    }
    order_.resize(segs_.size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
      return empty[a] != empty[b] ? empty[a] < empty[b] : per[a] < per[b];
    });
  }

  // Tier 1 under theta, outputs kept every k-th segment, the first r ranked segments whole.
  planner::context::evaluation evaluate(double theta, std::size_t k, std::size_t r) {
    std::fill(whole_.begin(), whole_.end(), std::uint8_t{0});
    for (std::size_t i = 0; i < r && i < order_.size(); ++i) whole_[order_[i]] = 1;
    std::fill(dropped_.begin(), dropped_.end(), std::uint8_t{0});
    for (std::size_t j = 0; j < segs_.size(); ++j) {
      for (std::uint32_t c : segs_[j].internal) {
        if (whole_[j] != 0 || price(c) <= theta) dropped_[c] = 1;
      }
      if (k > 1 && j % k != 0) {
        for (std::uint32_t c : segs_[j].outputs) dropped_[c] = 1;
      }
    }
    return ctx_.evaluate_keeping_refused(dropped_);
  }

 private:
  [[nodiscard]] double price(std::uint32_t c) const {
    const candidate& cd = ctx_.candidates()[c];
    return cd.cost_s / static_cast<double>(std::max<std::size_t>(cd.unplanned_bytes, 1));
  }

  planner::context& ctx_;
  std::vector<chain_segment> segs_;
  std::vector<double> thetas_;
  std::vector<std::size_t> order_;
  std::vector<std::uint8_t> dropped_;
  std::vector<std::uint8_t> whole_;
};

}  // namespace

std::optional<planner::context::evaluation> solve_tiered(planner::context& ctx, std::size_t budget) {
  using evaluation = planner::context::evaluation;
  std::optional<std::size_t>& cached = ctx.state<tiered_state>().least;
  if (cached && (*cached == 0 || budget < *cached)) return std::nullopt;
  tier_grid grid(ctx);
  const std::size_t m = grid.segments();
  if (m == 0) {
    cached = 0;
    return std::nullopt;
  }
  std::optional<evaluation> best;
  std::size_t least = 0;
  const auto better = [&](const evaluation& e) {
    return !best || e.sim.added_compute_s < best->sim.added_compute_s ||
           (e.sim.added_compute_s == best->sim.added_compute_s && e.sim.peak < best->sim.peak);
  };
  for (double theta : grid.thetas()) {
    grid.rank(theta);
    for (std::size_t k : output_spacings) {
      if (k > 1 && k >= m) break;
      evaluation lean = grid.evaluate(theta, k, m);
      if (lean.ok && (least == 0 || lean.sim.peak < least)) least = lean.sim.peak;
      if (!lean.fits(budget)) continue;
      // Fewest whole segments that fit: lo does not fit (or is -1), hi fits.
      std::optional<evaluation> fit = std::move(lean);
      std::size_t hi = m;
      std::ptrdiff_t lo = -1;
      while (static_cast<std::ptrdiff_t>(hi) - lo > 1) {
        const auto mid = static_cast<std::size_t>(lo + (static_cast<std::ptrdiff_t>(hi) - lo) / 2);
        evaluation e = grid.evaluate(theta, k, mid);
        if (e.fits(budget)) {
          hi = mid;
          if (e.sim.added_compute_s <= fit->sim.added_compute_s) fit = std::move(e);
        } else {
          lo = static_cast<std::ptrdiff_t>(mid);
        }
      }
      if (better(*fit)) best = std::move(fit);
    }
  }
  if (!best) cached = least;
  return best;
}

std::size_t tiered_least_peak(planner::context& ctx) {
  const std::optional<std::size_t>& cached = ctx.state<tiered_state>().least;
  if (!cached) (void)solve_tiered(ctx, 0);  // fits nothing: sees the whole grid
  return cached.value_or(0);
}

}  // namespace sublinear::policy
