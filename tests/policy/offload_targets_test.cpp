// The offload search run again at targets around the budget where its plan stalls (Note
// [Targets around the budget] in policy/solver_offload_starts.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

// On random DAGs over links slow enough to stall, planning with the reruns never adds more
// time than without them, every plan fits its budget, and some budgets plan cheaper.
TEST(TargetsAroundTheBudget, NeverAddMoreTimeAndSometimesLess) {
  std::mt19937_64 rng(65);
  std::size_t reran_cheaper = 0, compared = 0;
  for (std::uint64_t seed = 0; seed < 36; ++seed) {
    const iteration it = test::page_dag(seed, 8 + seed % 5);
    const link_model link = test::random_page_link(rng, 1e-3, 5e-2);
    for (std::size_t budget : test::budgets_for(it, 8)) {
      for (const char* name : {"greedy", "reforward"}) {
        SCOPED_TRACE(std::string(name) + " seed " + std::to_string(seed) + " budget " + std::to_string(budget));
        const auto planner = make_planner(name);
        planner::options o;
        o.offload = offload_mode::on;
        o.link = link;
        o.rerun_targets = false;
        std::optional<plan> without;
        try {
          without = planner->make_plan(it, budget, o);
        } catch (const infeasible_budget&) {
        }
        o.rerun_targets = true;
        std::optional<plan> with;
        try {
          with = planner->make_plan(it, budget, o);
        } catch (const infeasible_budget&) {
        }
        ASSERT_EQ(with.has_value(), without.has_value()) << "the reruns change which budgets are met";
        if (!with) continue;
        const simulation r = simulate(it, *with, link);
        ASSERT_TRUE(r.valid) << r.error;
        EXPECT_LE(r.peak, budget);
        const double a = with->added_compute_s + with->predicted_stall_s;
        const double b = without->added_compute_s + without->predicted_stall_s;
        EXPECT_LE(a, b * (1 + 1e-9) + 1e-12);
        ++compared;
        reran_cheaper += a < b * (1 - 1e-9) ? 1 : 0;
      }
    }
  }
  EXPECT_GT(reran_cheaper, 0u) << "no budget planned cheaper with the reruns: the check exercises nothing";
  std::printf("%zu of %zu plans cheaper with the reruns\n", reran_cheaper, compared);
}

// A plan made for a budget 10% larger, brought under this one by simulated changes at its
// peaks (solve_offload_from_larger): every plan it returns fits and simulates valid, and
// on random DAGs over slow links it brings some of them under, some for less added time
// than the search at the budget finds.
TEST(TargetsAroundTheBudget, APlanForALargerBudgetIsBroughtUnderThisOne) {
  std::mt19937_64 rng(66);
  std::size_t tried = 0, brought = 0, cheaper = 0;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    const iteration it = test::page_dag(seed, 8 + seed % 5);
    offload_settings off;
    off.mode = offload_mode::on;
    off.link = test::random_page_link(rng, 1e-3, 5e-2);
    planner::context ctx(it, true, true, off);
    const recompute_search greedy = [](planner::context& c, std::size_t b) { return solve_greedy(c, b); };
    for (std::size_t budget : test::budgets_for(it, 8)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const auto larger = with_offload(ctx, budget + budget / 10, greedy);
      if (!larger || larger->fits(budget)) continue;
      ++tried;
      const auto under = solve_offload_from_larger(ctx, budget, *larger);
      if (!under) continue;
      ++brought;
      ASSERT_TRUE(under->fits(budget));
      const simulation r = simulate(it, under->result, off.link);
      ASSERT_TRUE(r.valid) << r.error;
      EXPECT_LE(r.peak, budget);
      const auto direct = with_offload(ctx, budget, greedy);
      cheaper += direct && under->sim.added_time_s() < direct->sim.added_time_s() * (1 - 1e-9) ? 1 : 0;
    }
  }
  EXPECT_GT(brought, 0u) << "no plan was brought under its budget: the check exercises nothing";
  EXPECT_GT(cheaper, 0u) << "no plan brought under its budget adds less than the search at it";
  std::printf("%zu of %zu larger plans brought under the budget, %zu cheaper than the search at it\n", brought, tried,
              cheaper);
}

}  // namespace
}  // namespace sublinear::policy
