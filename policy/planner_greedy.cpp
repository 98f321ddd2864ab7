// `greedy`: the cost-aware greedy search (Note [Cost-aware greedy] in solver_greedy.cpp)
// at the budget; with offload, also the keep/recompute/offload search (Note [Offload
// search] in solver_offload.cpp), the plan of least added time kept.
#include <optional>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

class greedy_planner final : public attempt_planner {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "greedy"; }
  [[nodiscard]] bool offloads() const noexcept override { return true; }

 protected:
  [[nodiscard]] std::optional<plan> attempt(context& ctx, std::size_t budget) const override {
    std::optional<context::evaluation> e =
        with_offload(ctx, budget, [](context& c, std::size_t b) { return solve_greedy(c, b); });
    if (!e) return std::nullopt;
    return std::move(e->result);
  }
};

}  // namespace

std::unique_ptr<planner> make_greedy_planner() { return std::make_unique<greedy_planner>(); }

}  // namespace sublinear::policy
