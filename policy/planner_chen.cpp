// `sqrtn` and `chen`: Chen et al. 2016's two rules, over the chain solver's segments.
#include <stdexcept>
#include <vector>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

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
// fits the budget at the least added compute (solve_chen; Note [Chen's layers] in
// solver_chen.cpp).
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

std::unique_ptr<planner> make_sqrtn_planner() { return std::make_unique<sqrtn_planner>(); }
std::unique_ptr<planner> make_chen_planner() { return std::make_unique<chen_planner>(); }

}  // namespace sublinear::policy
