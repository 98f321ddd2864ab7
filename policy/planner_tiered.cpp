// `tiered`: the tiered grid (Note [Tiered drop sets] in solver_tiered.cpp) on its own.
#include <algorithm>
#include <optional>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

// The tiered grid on its own (SUBLINEAR_POLICY=tiered): drop sets only.
class tiered_planner final : public planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "tiered"; }

 protected:
  [[nodiscard]] plan search(context& ctx, std::size_t budget) const override {
    if (ctx.unplanned_peak() <= budget) return plan{};
    if (std::optional<context::evaluation> e = solve_tiered(ctx, budget)) return std::move(e->result);
    // Every fitting grid line fits at its leanest point, so the least peak the failed
    // search saw is the smallest budget it meets: no bisection.
    const std::size_t least = tiered_least_peak(ctx);
    const std::size_t smallest = least == 0 ? ctx.unplanned_peak() : least;
    throw infeasible_budget(name(), budget, std::max(smallest, ctx.lower_bound()), ctx.lower_bound());
  }
};

}  // namespace

std::unique_ptr<planner> make_tiered_planner() { return std::make_unique<tiered_planner>(); }

}  // namespace sublinear::policy
