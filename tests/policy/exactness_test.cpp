// The exact planners against independent references: exhaustive enumeration of drop sets
// and the MILP oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "policy/candidates.hpp"
#include "policy/oracle/milp.hpp"
#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Added compute of `name`'s plan, or nothing when it reports the budget infeasible.
std::optional<double> planned_cost(std::string_view name, const iteration& it, std::size_t budget) {
  try {
    return make_planner(name)->make_plan(it, budget).added_compute_s;
  } catch (const infeasible_budget&) {
    return std::nullopt;
  }
}

bool same_cost(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); }

// Heterogeneous chains: page-multiple activations, uneven costs.
iteration random_chain(std::uint64_t seed, std::size_t layers) {
  std::vector<std::size_t> bytes;
  std::vector<double> costs;
  std::uint64_t s = seed * 2654435761ULL + 17;
  for (std::size_t k = 0; k < layers; ++k) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    bytes.push_back(((s >> 33) % 6 + 1) * MiB);
    costs.push_back(1e-4 * static_cast<double>((s >> 20) % 9 + 1));
  }
  return synthetic::build(synthetic::chain(bytes, costs, MiB));
}

// Small random DAGs whose sizes are page multiples.
iteration small_dag(std::uint64_t seed, std::size_t layers) {
  synthetic::dag_spec spec;
  spec.layers = layers;
  spec.quantum = MiB;
  spec.granularity = MiB;
  spec.max_quanta = 6;
  return synthetic::build(synthetic::random_dag(spec, seed));
}

using test::budgets_for;

TEST(Exactness, ChainEqualsBruteForceOnSmallChains) {
  std::size_t compared = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    const iteration it = random_chain(seed, 7 + seed % 5);
    for (std::size_t budget : budgets_for(it, 7)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const test::reference ref = test::brute_force(it, budget);
      const std::optional<double> chain = planned_cost("chain", it, budget);
      ASSERT_EQ(chain.has_value(), ref.feasible());
      if (chain) {
        EXPECT_TRUE(same_cost(*chain, ref.cost)) << *chain << " vs " << ref.cost;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 40u);
}

TEST(Exactness, ReforwardEqualsBruteForceOnSmallDags) {
  std::size_t compared = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    const iteration it = small_dag(seed, 9 + seed % 4);
    for (std::size_t budget : budgets_for(it, 6)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const test::reference ref = test::brute_force(it, budget);
      const std::optional<double> rf = planned_cost("reforward", it, budget);
      ASSERT_EQ(rf.has_value(), ref.feasible());
      if (rf) {
        EXPECT_TRUE(same_cost(*rf, ref.cost)) << *rf << " vs " << ref.cost;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 20u);
}

TEST(Exactness, ChainAndReforwardEqualTheMilpOptimumOnChains) {
  std::size_t solved = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const iteration it = random_chain(seed, 8);
    for (std::size_t budget : budgets_for(it, 4)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const oracle::milp_result m = oracle::solve_milp(it, budget);
      if (m.outcome == oracle::milp_result::status::time_limit) continue;
      ASSERT_NE(m.outcome, oracle::milp_result::status::too_large);
      const std::optional<double> chain = planned_cost("chain", it, budget);
      const std::optional<double> rf = planned_cost("reforward", it, budget);
      if (m.outcome == oracle::milp_result::status::infeasible) {
        EXPECT_FALSE(chain.has_value());
        EXPECT_FALSE(rf.has_value());
      } else {
        ASSERT_TRUE(chain.has_value());
        ASSERT_TRUE(rf.has_value());
        EXPECT_TRUE(same_cost(*chain, m.objective_s)) << *chain << " vs " << m.objective_s;
        EXPECT_TRUE(same_cost(*rf, m.objective_s)) << *rf << " vs " << m.objective_s;
      }
      ++solved;
    }
  }
  EXPECT_GT(solved, 8u);
}

TEST(Exactness, ReforwardEqualsTheMilpOptimumOnDags) {
  std::size_t solved = 0;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const iteration it = small_dag(seed, 9);
    for (std::size_t budget : budgets_for(it, 4)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const oracle::milp_result m = oracle::solve_milp(it, budget);
      if (m.outcome == oracle::milp_result::status::time_limit) continue;
      const std::optional<double> rf = planned_cost("reforward", it, budget);
      if (m.outcome == oracle::milp_result::status::infeasible) {
        EXPECT_FALSE(rf.has_value());
      } else {
        ASSERT_TRUE(rf.has_value());
        EXPECT_TRUE(same_cost(*rf, m.objective_s)) << *rf << " vs " << m.objective_s;
      }
      ++solved;
    }
  }
  EXPECT_GT(solved, 10u);
}

TEST(Exactness, MilpPlanIsValidAndCostsWhatTheSolverSays) {
  const iteration it = small_dag(3, 9);
  const std::vector<std::size_t> budgets = budgets_for(it, 4);
  const oracle::milp_result m = oracle::solve_milp(it, budgets[2]);
  ASSERT_EQ(m.outcome, oracle::milp_result::status::optimal);
  const simulation s = simulate(it, m.best);
  ASSERT_TRUE(s.valid) << s.error;
  EXPECT_LE(s.peak, budgets[2]);
  EXPECT_TRUE(same_cost(s.added_compute_s, m.objective_s)) << s.added_compute_s << " vs " << m.objective_s;
  EXPECT_EQ(m.best.planner, "oracle");
}

TEST(Exactness, ReforwardIsNeverDearerThanItsStartingPointsOnLargeDags) {
  // Beyond the exact search's size the result is its starting points improved; it must
  // never cost more than any of them. (These graphs do not reproduce the case that made
  // Chen's grid one of them, a traced ResNet-218 at 0.5x where reforward came out 4%
  // dearer than chen; `sublinear plan` on such a trace shows it.)
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const iteration it = small_dag(seed, 48);
    ASSERT_GT(candidate_set(dataflow(it)).size(), 28u) << "the exact search must not apply";
    for (std::size_t budget : budgets_for(it, 5)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const std::optional<double> rf = planned_cost("reforward", it, budget);
      for (std::string_view other : {"chen", "chain", "greedy"}) {
        const std::optional<double> o = planned_cost(other, it, budget);
        if (!o) continue;
        ASSERT_TRUE(rf.has_value()) << other << " found a plan and reforward did not";
        EXPECT_LE(*rf, *o + 1e-12) << other;
      }
    }
  }
}

TEST(Exactness, MilpDeclinesGraphsAboveItsSizeLimit) {
  const iteration it = synthetic::build(synthetic::chain(30, 2 * MiB, MiB));
  oracle::milp_options o;
  o.max_candidates = 10;
  const oracle::milp_result m = oracle::solve_milp(it, std::size_t{1} << 40, o);
  EXPECT_EQ(m.outcome, oracle::milp_result::status::too_large);
  EXPECT_GT(m.candidates, 10u);
}

}  // namespace
}  // namespace sublinear::policy
