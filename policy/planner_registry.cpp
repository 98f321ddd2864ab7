// The registry: every planner by name (make_planner, planner_names), and `none`.
#include <array>
#include <string>

#include "policy/planner_detail.hpp"

namespace sublinear::policy {

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

constexpr std::array<std::string_view, 8> names{"none",   "sqrtn",  "chen", "chain",
                                                "tiered", "reforward", "greedy", "dtr"};

}  // namespace

std::unique_ptr<planner> make_none_planner() { return std::make_unique<none_planner>(); }

std::span<const std::string_view> planner_names() noexcept { return names; }

std::string offloading_planner_list() {
  std::string out;
  for (std::string_view n : names) {
    if (!make_planner(n)->offloads()) continue;
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

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
