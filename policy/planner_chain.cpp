// `chain`: the chain solver (Note [Chain solver] in solver_chain.cpp) at the budget, and
// below every drop set the multi-pass schedules (Note [Multi-pass] in solver_multipass.cpp).
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
