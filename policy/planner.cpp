#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/text.hpp"
#include "policy/packs.hpp"
#include "policy/planner_detail.hpp"
#include "policy/retention.hpp"

namespace sublinear::policy {

// ---- context ----------------------------------------------------------------------------

planner::context::context(const iteration& it, bool multi_pass, bool packs)
    : it_(&it), flow_(it), candidates_(flow_), sim_(it), drops_(candidates_), multi_pass_(multi_pass), packs_(packs) {}

planner::context::evaluation planner::context::evaluate(std::span<const std::uint8_t> dropped,
                                                        std::span<const launch_id> horizons) {
  evaluation e;
  e.dropped.assign(dropped.begin(), dropped.end());
  e.dropped.resize(candidates_.size(), 0);
  drop_plan_builder::outcome built = drops_.build(e.dropped, horizons);
  if (!built.ok) {
    e.error = std::move(built.error);
    e.refused = std::move(built.refused);
    return e;
  }
  e.result = std::move(built.result);
  if (packs_) add_packs(*it_, e.result);
  e.sim = sim_.run(e.result);
  if (!e.sim.valid) {
    // A drop set always yields a valid plan; anything else is a bug worth a loud error.
    throw std::logic_error("sublinear: internal error: a drop-set plan failed validation: " + e.sim.error);
  }
  e.result.predicted_peak = e.sim.peak;
  e.result.added_compute_s = e.sim.added_compute_s;
  e.result.recomputed_launches = e.sim.recomputed_launches;
  e.ok = true;
  return e;
}

planner::context::evaluation planner::context::evaluate_keeping_refused(std::span<const std::uint8_t> dropped) {
  evaluation e = evaluate(dropped);
  if (e.ok || e.refused.empty()) return e;
  std::vector<std::uint8_t> kept = e.dropped;
  for (std::size_t round = 0; !e.ok && !e.refused.empty() && round < kept.size(); ++round) {
    for (std::uint32_t c : e.refused) kept[c] = 0;
    e = evaluate(kept);
  }
  return e;
}

std::size_t planner::context::unplanned_peak() {
  if (!unplanned_peak_) unplanned_peak_ = sim_.run(plan{}).peak;
  return *unplanned_peak_;
}

// ---- the contract -----------------------------------------------------------------------

plan planner::make_plan(const iteration& it, std::size_t budget, const options& o) const {
  if (const std::string problem = check_iteration(it); !problem.empty()) {
    throw config_error("sublinear: the analysed iteration is malformed: " + problem);
  }
  const auto checked = [&](plan p, const simulation& s) {
    if (!s.valid) {
      throw std::logic_error("sublinear: internal error: planner '" + std::string(name()) +
                             "' produced an invalid plan: " + s.error);
    }
    if (s.peak > budget) {
      throw std::logic_error("sublinear: internal error: planner '" + std::string(name()) + "' returned a plan of " +
                             format_bytes(s.peak) + " for a budget of " + format_bytes(budget));
    }
    p.planner = std::string(name());
    p.budget = budget;
    p.predicted_peak = s.peak;
    p.added_compute_s = s.added_compute_s;
    p.recomputed_launches = s.recomputed_launches;
    return p;
  };
  context ctx(it, o.multi_pass, o.packs);
  std::optional<plan> best;
  std::optional<infeasible_budget> refused;
  try {
    plan p = search(ctx, budget);
    const simulation s = ctx.sim().run(p);
    best = checked(std::move(p), s);
  } catch (const infeasible_budget& e) {
    refused = e;
  }
  // Note [Retention]: plan again with every option applied; keep it if it fits where the
  // first did not, or adds less compute.
  std::vector<retention> offered;
  if (o.retention && !(best && best->evictions.empty())) offered = retention_options(ctx.candidates());
  if (!offered.empty()) {
    const iteration kept = with_retentions(it, offered);
    context with(kept, o.multi_pass, o.packs);
    try {
      plan q = search(with, budget);
      q.retentions = std::move(offered);
      trim_retentions(q, it);
      const simulation s = simulate(it, q);
      // An invalid plan goes through checked() too: it is a bug, and says so.
      if (!best || !s.valid || s.added_compute_s < best->added_compute_s * (1.0 - 1e-9))
        best = checked(std::move(q), s);
    } catch (const infeasible_budget& e) {
      if (!best && refused)
        refused.emplace(name(), budget, std::min(refused->smallest_feasible(), e.smallest_feasible()),
                        std::min(refused->lower_bound(), e.lower_bound()));
    }
  }
  if (best) return std::move(*best);
  throw *refused;
}

plan attempt_planner::search(context& ctx, std::size_t budget) const {
  // Nothing to evict: no planner should recompute anything (their models may be more
  // conservative than the simulator about page rounding).
  if (ctx.unplanned_peak() <= budget) return plan{};
  if (std::optional<plan> p = attempt(ctx, budget)) return std::move(*p);
  // Two-level plans meet exactly the budgets from their least peak up; below it attempt()
  // answers from the cached least peak without repeating their grid.
  const std::size_t two = deepens() ? multi_pass_least_peak(ctx) : 0;
  throw_smallest_feasible(ctx, name(), budget, [&](std::size_t b) {
    return ctx.unplanned_peak() <= b || (two != 0 && two <= b) || attempt(ctx, b).has_value();
  });
}

void throw_smallest_feasible(planner::context& ctx, std::string_view planner_name, std::size_t budget,
                             const std::function<bool(std::size_t)>& meets) {
  const std::size_t floor = ctx.lower_bound();
  std::size_t hi = std::max(ctx.unplanned_peak(), floor);
  std::size_t lo = std::max(floor, budget + 1);  // `budget` itself was just refused
  if (lo > hi) lo = hi;
  // Invariant: meets(hi); every budget below lo is refused.
  while (lo < hi && hi - lo > hi / 1024) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (meets(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  throw infeasible_budget(planner_name, budget, hi, floor);
}

// ---- none, sqrtn, chen -----------------------------------------------------------------

namespace {

class none_planner final : public planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "none"; }

 protected:
  [[nodiscard]] plan search(context& ctx, std::size_t budget) const override {
    if (ctx.unplanned_peak() > budget) {
      throw infeasible_budget(name(), budget, ctx.unplanned_peak(), ctx.lower_bound());
    }
    return plan{};
  }
};

// Chen et al. 2016, §3: split the network into sqrt(k) segments of sqrt(k) layers, keep
// each segment's output, drop the rest. "Layers" are the chain solver's segments (on a
// chain, single candidates; on a ResNet, residual blocks), so checkpoints fall where the
// graph has a single way through.
class sqrtn_planner final : public planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "sqrtn"; }

 protected:
  [[nodiscard]] plan search(context& ctx, std::size_t budget) const override {
    const std::size_t k = ctx.candidates().size();
    std::vector<std::uint8_t> dropped(k, 1);
    const std::vector<chain_segment> segments = chain_segments(ctx.candidates());
    std::size_t seg = 1;
    while (seg * seg < segments.size()) ++seg;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      if ((i + 1) % seg != 0) continue;
      for (std::uint32_t c : segments[i].outputs) dropped[c] = 0;
    }
    // Chen's rule fixes the set; the targets of a refused recipe stay.
    context::evaluation e = ctx.evaluate_keeping_refused(dropped);
    if (!e.ok) throw std::logic_error("sublinear: internal error: sqrtn: " + e.error);
    // The plan does not depend on the budget: it fits or it does not.
    if (e.sim.peak > budget) throw infeasible_budget(name(), budget, e.sim.peak, ctx.lower_bound());
    return std::move(e.result);
  }
};

// Chen et al. 2016, Alg. 3: walk the layers in production order accumulating bytes;
// when a segment exceeds B, its last layer's output becomes a checkpoint and a new segment
// starts. The paper picks B by a grid search around sqrt(x * y), x the bytes of all
// candidates and y the largest; we search the same kind of grid and keep the plan that
// fits the budget at the least added compute. Note [Chen's layers].
class chen_planner final : public attempt_planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "chen"; }

 protected:
  [[nodiscard]] std::optional<plan> attempt(context& ctx, std::size_t budget) const override {
    std::optional<context::evaluation> best = solve_chen(ctx, budget);
    if (!best) return std::nullopt;
    return std::move(best->result);
  }
};

}  // namespace

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

std::unique_ptr<planner> make_none_planner() { return std::make_unique<none_planner>(); }
std::unique_ptr<planner> make_sqrtn_planner() { return std::make_unique<sqrtn_planner>(); }
std::unique_ptr<planner> make_chen_planner() { return std::make_unique<chen_planner>(); }

// ---- the registry -----------------------------------------------------------------------

namespace {

constexpr std::array<std::string_view, 8> names{"none",   "sqrtn",  "chen", "chain",
                                                "tiered", "reforward", "greedy", "dtr"};

}  // namespace

std::span<const std::string_view> planner_names() noexcept { return names; }

std::unique_ptr<planner> make_planner(std::string_view name) {
  if (name == "none") return make_none_planner();
  if (name == "sqrtn") return make_sqrtn_planner();
  if (name == "chen") return make_chen_planner();
  if (name == "chain") return make_chain_planner();
  if (name == "tiered") return make_tiered_planner();
  if (name == "reforward") return make_reforward_planner();
  if (name == "greedy") return make_greedy_planner();
  if (name == "dtr") return make_dtr_planner();
  std::string valid;
  for (std::string_view n : names) {
    if (!valid.empty()) valid += ", ";
    valid += n;
  }
  throw config_error("sublinear: unknown planner '" + std::string(name) + "'; valid planners: " + valid);
}

}  // namespace sublinear::policy
