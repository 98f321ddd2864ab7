// Note [Exact drop sets on arbitrary graphs]
// Rationale: Re-forwarding (Feng & Huang) solves arbitrary graphs exactly by reasoning
//   over closed vertex sets, for its own objective (least memory at one re-forward). Ours
//   is the least added compute under a byte budget over the same plan space (Note [Drop
//   sets]); it contains a knapsack, so no polynomial method is exact in general. We use
//   an exact search instead and say where it stops being exact.
// Approach: depth-first branch and bound over keep/drop decisions, largest candidates
//   first. Two admissible bounds prune it:
//   - memory: during every launch, the bytes that are mapped whatever the undecided
//     candidates become (non-candidates; decided-kept candidates; every candidate outside
//     its gap; a dropped candidate from the restore point of a dropped candidate whose
//     recipe reads it; no credit for temporaries), kept in a segment tree with range add
//     and global max, so each decision costs O(log launches);
//   - compute: every launch of a dropped candidate's own recipe is replayed at least once.
//   Leaves are built into plans and simulated exactly; the incumbent starts as the best
//   of the chain solver's, the greedy planner's (ranked both ways, greedy_rank), Chen's
//   grid plans (Chen's was added when a traced ResNet-218 at 0.5x showed reforward 4%
//   dearer than chen with more room) and the tiered grid's (Note [Tiered drop sets]).
//   When the search completes (up to a million nodes
//   and 40,000 simulated leaves), the plan is optimal over drop sets, the same space the
//   MILP oracle solves; tests check the two agree.
// Limitations: with more than 28 candidates, or when the node budget runs out, the
//   result is the incumbent improved by a bounded pass that keeps candidates back (most
//   expensive first) while the plan still fits: good, not proven optimal.
//
// Note [Blind searches]
// Rationale: where no seed fits, the memory bound (optimistic footprints, no scratch)
//   lets most leaves through and the simulator refuses them, so the search runs to its
//   leaf limit without an answer. Refusing a budget made several such searches: one at
//   the budget, one for the least peak, and one per step of the bisection for the
//   smallest feasible budget, each running to its leaf limit (seconds on the small traced
//   Transformer's 27 candidates at 0.6x).
// Approach: until some drop set fits, a search simulates at most 4,000 leaves; once one
//   does, the limit is the usual 40,000. The bisection asks only whether a budget is met
//   (meets(): the seeds, then a search stopped at its first fitting leaf), which gives
//   the same answer as attempt(): the seeds are deterministic and, with no incumbent,
//   both searches visit the same leaves in the same order up to the first that fits.
// Limitations: a plan that only the search can find beyond 4,000 blind leaves is missed
//   (it is found if a seed fits at that budget).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

using i64 = std::int64_t;

// Range add, global maximum.
class max_tree {
 public:
  explicit max_tree(const std::vector<i64>& base) : n_(base.size()), max_(4 * std::max<std::size_t>(n_, 1), 0), add_(max_.size(), 0) {
    if (n_ > 0) build(1, 0, n_ - 1, base);
  }
  void add(std::size_t lo, std::size_t hi, i64 v) {  // inclusive range
    if (n_ == 0 || lo > hi || v == 0) return;
    update(1, 0, n_ - 1, lo, std::min(hi, n_ - 1), v);
  }
  [[nodiscard]] i64 max() const { return n_ == 0 ? 0 : max_[1]; }

 private:
  void build(std::size_t node, std::size_t l, std::size_t r, const std::vector<i64>& base) {
    if (l == r) {
      max_[node] = base[l];
      return;
    }
    const std::size_t m = l + (r - l) / 2;
    build(2 * node, l, m, base);
    build(2 * node + 1, m + 1, r, base);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
  }
  void update(std::size_t node, std::size_t l, std::size_t r, std::size_t lo, std::size_t hi, i64 v) {
    if (hi < l || r < lo) return;
    if (lo <= l && r <= hi) {
      max_[node] += v;
      add_[node] += v;
      return;
    }
    const std::size_t m = l + (r - l) / 2;
    update(2 * node, l, m, lo, hi, v);
    update(2 * node + 1, m + 1, r, lo, hi, v);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }

  std::size_t n_;
  std::vector<i64> max_;
  std::vector<i64> add_;
};

class branch_and_bound {
 public:
  enum class goal { least_compute, least_peak, any_fit };

  // least_compute: the cheapest drop set within `budget`. least_peak: the drop set with
  // the smallest peak below `budget` (the budget is then tightened as better ones appear).
  // any_fit: the first drop set found within `budget`.
  branch_and_bound(planner::context& ctx, std::size_t budget, goal g)
      : ctx_(ctx), cs_(ctx.candidates()), it_(ctx.graph()), budget_(static_cast<i64>(budget)), goal_(g) {}

  // Returns true when the search completed (the best is optimal, or none exists).
  bool run(std::optional<planner::context::evaluation>& best) {
    const std::size_t n = it_.launches.size();
    const std::size_t k = cs_.size();
    if (best && goal_ == goal::least_compute) best_cost_ = best->sim.added_compute_s;
    if (best && goal_ == goal::least_peak) budget_ = std::min<i64>(budget_, static_cast<i64>(best->sim.peak) - 1);
    // Base: what is mapped whatever the decisions.
    std::vector<i64> delta(n + 1, 0);
    auto range = [&](std::size_t lo, std::size_t hi, i64 v) {  // [lo, hi)
      if (lo >= hi) return;
      delta[lo] += v;
      delta[hi] -= v;
    };
    lifetime_.resize(k);
    for (buffer_id b = 0; b < it_.buffers.size(); ++b) {
      const buffer& buf = it_.buffers[b];
      const std::size_t lo = std::min<std::size_t>(buf.alloc_at, n);
      const std::size_t hi = buf.free_at == none ? n : std::min<std::size_t>(buf.free_at, n);
      const std::uint32_t c = cs_.index_of(b);
      if (c == none) {
        range(lo, hi, static_cast<i64>(round_up(buf.size, unplanned_rounding)));
        continue;
      }
      lifetime_[c] = {lo, hi};
      const candidate& cd = cs_[c];
      const auto floor = static_cast<i64>(std::min(cd.bytes, cd.unplanned_bytes));
      range(lo, cd.evict_after + 1, floor);
      range(cd.restore_before, hi, floor);
    }
    std::vector<i64> base(n, 0);
    i64 level = 0;
    for (std::size_t t = 0; t < n; ++t) {
      level += delta[t];
      base[t] = level;
    }
    tree_ = std::make_unique<max_tree>(base);
    order_.resize(k);
    for (std::uint32_t c = 0; c < k; ++c) order_[c] = c;
    std::sort(order_.begin(), order_.end(), [&](std::uint32_t a, std::uint32_t b) {
      return cs_[a].bytes != cs_[b].bytes ? cs_[a].bytes > cs_[b].bytes : a < b;
    });
    uses_.assign(n, 0);
    dropped_.assign(k, 0);
    pull_at_.assign(k, none);
    readers_.assign(k, {});
    for (std::uint32_t q = 0; q < k; ++q) {
      for (std::uint32_t d : cs_[q].deps) readers_[d].push_back(q);
    }
    best_ = &best;
    search(0);
    return !aborted_;
  }

 private:
  void keep(std::uint32_t c, int sign) {
    const candidate& cd = cs_[c];
    const auto floor = static_cast<i64>(std::min(cd.bytes, cd.unplanned_bytes));
    const auto extra = static_cast<i64>(cd.unplanned_bytes) - floor;
    tree_->add(cd.evict_after + 1, cd.restore_before - 1, sign * static_cast<i64>(cd.unplanned_bytes));
    if (extra != 0) {
      tree_->add(lifetime_[c].first, cd.evict_after, sign * extra);
      if (cd.restore_before < lifetime_[c].second) tree_->add(cd.restore_before, lifetime_[c].second - 1, sign * extra);
    }
  }
  void drop(std::uint32_t c, int sign) {
    const candidate& cd = cs_[c];
    const auto floor = static_cast<i64>(std::min(cd.bytes, cd.unplanned_bytes));
    const auto extra = static_cast<i64>(cd.bytes) - floor;
    if (extra != 0) {
      tree_->add(lifetime_[c].first, cd.evict_after, sign * extra);
      if (cd.restore_before < lifetime_[c].second) tree_->add(cd.restore_before, lifetime_[c].second - 1, sign * extra);
    }
    for (launch_id l : cd.recipe) {
      if (sign > 0) {
        if (uses_[l]++ == 0) cost_bound_ += it_.launches[l].cost_s;
      } else {
        if (--uses_[l] == 0) cost_bound_ -= it_.launches[l].cost_s;
      }
    }
    if (sign > 0) {
      dropped_[c] = 1;
      marks_.push_back(pulls_.size());
      // Two dropped candidates where one's recipe reads the other: the one read comes back
      // when the reader does, if that is before its own restore point.
      for (std::uint32_t d : cd.deps) {
        if (dropped_[d] != 0 && cs_[d].evict_after < cd.restore_before && cd.restore_before < cs_[d].restore_before) {
          pull(d, cd.restore_before);
        }
      }
      for (std::uint32_t q : readers_[c]) {
        if (dropped_[q] != 0 && cd.evict_after < cs_[q].restore_before && cs_[q].restore_before < cd.restore_before) {
          pull(c, cs_[q].restore_before);
        }
      }
    } else {
      const std::size_t mark = marks_.back();
      marks_.pop_back();
      while (pulls_.size() > mark) {
        const auto [b, before] = pulls_.back();
        pulls_.pop_back();
        set_pull(b, before);
      }
      dropped_[c] = 0;
    }
  }
  // Candidate b is resident from `at` (not later than its restore point) on.
  void pull(std::uint32_t b, launch_id at) {
    if (pull_at_[b] != none && pull_at_[b] <= at) return;
    pulls_.emplace_back(b, pull_at_[b]);
    set_pull(b, at);
  }
  void set_pull(std::uint32_t b, launch_id at) {
    const candidate& cd = cs_[b];
    const auto bytes = static_cast<i64>(cd.bytes);
    if (pull_at_[b] != none) tree_->add(pull_at_[b], cd.restore_before - 1, -bytes);
    pull_at_[b] = at;
    if (at != none) tree_->add(at, cd.restore_before - 1, bytes);
  }

  void search(std::size_t depth) {
    if (aborted_ || found_) return;
    if (++nodes_ > node_limit || leaves_ > (best_->has_value() ? leaf_limit : blind_leaf_limit)) {
      aborted_ = true;
      return;
    }
    if (tree_->max() > budget_) return;
    if (goal_ == goal::least_compute && cost_bound_ >= best_cost_ * (1.0 - 1e-12)) return;
    if (depth == order_.size()) {
      ++leaves_;
      planner::context::evaluation e = ctx_.evaluate(dropped_);
      if (!e.fits(static_cast<std::size_t>(budget_))) return;
      if (goal_ == goal::least_peak) {
        budget_ = static_cast<i64>(e.sim.peak) - 1;  // from now on, only strictly lower peaks
        *best_ = std::move(e);
      } else if (goal_ == goal::any_fit) {
        *best_ = std::move(e);
        found_ = true;
      } else if (e.sim.added_compute_s < best_cost_) {
        best_cost_ = e.sim.added_compute_s;
        *best_ = std::move(e);
      }
      return;
    }
    const std::uint32_t c = order_[depth];
    keep(c, +1);
    search(depth + 1);
    keep(c, -1);
    drop(c, +1);
    search(depth + 1);
    drop(c, -1);
  }

  planner::context& ctx_;
  const candidate_set& cs_;
  const iteration& it_;
  static constexpr std::size_t node_limit = 1'000'000;
  static constexpr std::size_t leaf_limit = 40'000;
  // Leaves simulated while no drop set is known to fit (Note [Blind searches]).
  static constexpr std::size_t blind_leaf_limit = 4'000;

  i64 budget_;
  goal goal_;
  std::size_t nodes_ = 0;
  std::size_t leaves_ = 0;
  bool aborted_ = false;
  bool found_ = false;  // any_fit: done
  double best_cost_ = std::numeric_limits<double>::infinity();
  double cost_bound_ = 0.0;
  std::unique_ptr<max_tree> tree_;
  std::vector<std::pair<std::size_t, std::size_t>> lifetime_;  // [alloc, free) per candidate
  std::vector<std::uint32_t> order_;
  std::vector<std::uint32_t> uses_;
  std::vector<std::uint8_t> dropped_;
  std::vector<launch_id> pull_at_;                      // per candidate: resident from here (bound)
  std::vector<std::vector<std::uint32_t>> readers_;     // per candidate: candidates whose recipe reads it
  std::vector<std::pair<std::uint32_t, launch_id>> pulls_;  // undo log: (candidate, previous pull)
  std::vector<std::size_t> marks_;
  std::optional<planner::context::evaluation>* best_ = nullptr;
};

constexpr std::size_t exact_candidates = 28;

void keep_back(planner::context& ctx, std::size_t budget, planner::context::evaluation& current) {
  const candidate_set& cs = ctx.candidates();
  std::vector<std::uint8_t> dropped = current.dropped;
  std::vector<std::uint32_t> order;
  for (std::uint32_t c = 0; c < cs.size(); ++c) {
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
    if (e.fits(budget) && e.sim.added_compute_s < current.sim.added_compute_s) {
      current = std::move(e);
    } else {
      dropped[order[i]] = 1;
    }
  }
}

class reforward_planner final : public attempt_planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "reforward"; }
  [[nodiscard]] bool offloads() const noexcept override { return true; }

 protected:
  [[nodiscard]] std::optional<plan> attempt(context& ctx, std::size_t budget) const override {
    // With offload: the recompute-only search below, then keep/recompute/offload from it,
    // from nothing and from greedy's recompute plans (Note [Offload search]); the least
    // added time wins, so no plan of greedy's adds less.
    std::optional<context::evaluation> best = with_offload(ctx, budget, attempt_recompute, [](context& c, std::size_t b) {
      return solve_greedy(c, b);
    });
    if (!best) return std::nullopt;
    return std::move(best->result);
  }

  [[nodiscard]] static std::optional<context::evaluation> attempt_recompute(context& ctx, std::size_t budget) {
    std::optional<context::evaluation> best = solve_chain(ctx, budget);
    const auto consider = [&](std::optional<context::evaluation> e) {
      if (e && (!best || e->sim.added_compute_s < best->sim.added_compute_s)) best = std::move(e);
    };
    consider(solve_greedy(ctx, budget, greedy_rank::bytes_freed));
    consider(solve_greedy(ctx, budget, greedy_rank::footprint));
    consider(solve_chen(ctx, budget));
    consider(solve_tiered(ctx, budget));
    bool exact = false;
    if (ctx.candidates().size() <= exact_candidates) {
      branch_and_bound search(ctx, budget, branch_and_bound::goal::least_compute);
      exact = search.run(best);
    }
    if (!best) {
      // Note [Multi-pass]: no drop set fits; a two-level schedule may.
      return solve_multi_pass(ctx, budget);
    }
    if (!exact) keep_back(ctx, budget, *best);
    prefer_multi_level(ctx, budget, best);
    return best;
  }

  [[nodiscard]] plan search(context& ctx, std::size_t budget) const override {
    if (ctx.unplanned_peak() <= budget) return plan{};
    if (std::optional<plan> p = attempt(ctx, budget)) return std::move(*p);
    if (ctx.offload().mode != offload_mode::off) {
      // Offloads lower the least peak below the drop sets' own: bisect with the same
      // searches attempt() runs (every budget meets() accepts, attempt() plans).
      const offload_mode mode = ctx.offload().mode;
      const std::size_t two = mode == offload_mode::on ? multi_pass_least_peak(ctx) : 0;
      const std::size_t smallest = smallest_feasible_budget(ctx, [&](std::size_t b) {
        if (ctx.unplanned_peak() <= b || (two != 0 && two <= b)) return true;
        if (mode == offload_mode::on && meets(ctx, b)) return true;
        return solve_offload(ctx, b, mode == offload_mode::on).has_value() ||
               (mode == offload_mode::on && solve_offload(ctx, b, false).has_value());
      });
      return plan_at_smallest(ctx, name(), budget, smallest, [&](std::size_t b) { return attempt(ctx, b); });
    }
    // Two-level schedules meet exactly the budgets from their least peak up (Note
    // [Multi-pass]); below it attempt() answers from the cached least peak at once.
    const std::size_t two = multi_pass_least_peak(ctx);
    if (ctx.candidates().size() <= exact_candidates) {
      // The smallest feasible budget over drop sets is their least peak: search it
      // directly rather than bisecting with repeated searches.
      std::optional<context::evaluation> least;
      branch_and_bound search(ctx, ctx.unplanned_peak(), branch_and_bound::goal::least_peak);
      if (search.run(least)) {
        std::size_t smallest = least ? least->sim.peak : ctx.unplanned_peak();
        if (two != 0) smallest = std::min(smallest, two);
        smallest = std::max(smallest, ctx.lower_bound());
        // At or above the least peak, the plan that has it (or the two-level one) fits.
        if (least && smallest == least->sim.peak && smallest <= budget) return std::move(least->result);
        return plan_at_smallest(ctx, name(), budget, smallest, [&](std::size_t b) { return attempt(ctx, b); });
      }
    }
    // Note [Blind searches]: whether a budget is met needs one plan, not the cheapest.
    const std::size_t smallest = smallest_feasible_budget(ctx, [&](std::size_t b) {
      return ctx.unplanned_peak() <= b || (two != 0 && two <= b) || meets(ctx, b);
    });
    return plan_at_smallest(ctx, name(), budget, smallest, [&](std::size_t b) { return attempt(ctx, b); });
  }

 private:
  // Whether attempt(ctx, budget) has a drop set: the same searches, stopped at the first
  // plan that fits. The seeds are deterministic and the branch and bound sees the same
  // leaves when no seed fits, so attempt() finds a plan exactly when this is true.
  [[nodiscard]] static bool meets(context& ctx, std::size_t budget) {
    if (solve_chain(ctx, budget) || solve_greedy(ctx, budget, greedy_rank::bytes_freed) ||
        solve_greedy(ctx, budget, greedy_rank::footprint) || solve_chen(ctx, budget) || solve_tiered(ctx, budget)) {
      return true;
    }
    if (ctx.candidates().size() > exact_candidates) return false;
    std::optional<context::evaluation> any;
    branch_and_bound search(ctx, budget, branch_and_bound::goal::any_fit);
    (void)search.run(any);
    return any.has_value();
  }
};

}  // namespace

std::unique_ptr<planner> make_reforward_planner() { return std::make_unique<reforward_planner>(); }

}  // namespace sublinear::policy
