// `chain`: the chain solver (Note [Chain solver] in solver_chain.cpp) at the budget, and
// below every drop set the multi-pass schedules (Note [Multi-pass] in solver_multipass.cpp).
//
// Note [Chain and per-candidate drop sets]
// Rationale: the chain solver drops a segment's internal candidates together (one I node
//   per segment). Where a segment mixes outputs that are cheap and dear to recompute (an
//   LSTM step: gate products from a GEMM beside elementwise states), the best drop set
//   keeps the dear ones and drops the cheap ones, which no path of the chain model holds:
//   on a traced LSTM-192 at 0.5x the chain model's best plan added +48% of compute where a
//   per-candidate drop set adds +35% (the recompute floor: +23%).
// Approach: the planner also takes the cost-aware greedy drop set (Note [Cost-aware
//   greedy]) at the same budget, both rankings, and keeps the cheapest plan that fits
//   (ties: the lower peak). Each is simulated exactly, so the choice is by the simulator's
//   figures, not the models'. A larger budget can only help each of them, so the minimum
//   is monotone in the budget wherever they are.
// Limitations: the greedy searches cost about as much again as the chain solver on long
//   chains; the chain model itself is unchanged (its node granularity is the gap).
#include <optional>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

class chain_planner final : public attempt_planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "chain"; }

 protected:
  [[nodiscard]] std::optional<plan> attempt(context& ctx, std::size_t budget) const override {
    std::optional<context::evaluation> e = solve_chain(ctx, budget);
    // Note [Chain and per-candidate drop sets]
    for (greedy_rank rank : {greedy_rank::bytes_freed, greedy_rank::footprint}) {
      std::optional<context::evaluation> g = solve_greedy(ctx, budget, rank);
      if (g && g->fits(budget) &&
          (!e || g->sim.added_compute_s < e->sim.added_compute_s ||
           (g->sim.added_compute_s == e->sim.added_compute_s && g->sim.peak < e->sim.peak))) {
        e = std::move(g);
      }
    }
    if (!e) {
      e = solve_multi_pass(ctx, budget);  // Note [Multi-pass]: below every drop set
    } else {
      prefer_multi_level(ctx, budget, e);  // near the drop sets' least peak
    }
    if (!e) return std::nullopt;
    return std::move(e->result);
  }
  [[nodiscard]] bool deepens() const noexcept override { return true; }
};

}  // namespace

std::unique_ptr<planner> make_chain_planner() { return std::make_unique<chain_planner>(); }

}  // namespace sublinear::policy
