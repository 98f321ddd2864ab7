// The recompute floor (Note [Recompute floor]) against hand-computed minima, every planner
// and the MILP oracle.
#include "policy/recompute_floor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "policy/budget.hpp"
#include "policy/candidates.hpp"
#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"
#include "policy/oracle/milp.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t page = 4096;

std::optional<double> planned_cost(std::string_view name, const iteration& it, std::size_t budget) {
  try {
    return make_planner(name)->make_plan(it, budget).added_compute_s;
  } catch (const infeasible_budget&) {
    return std::nullopt;
  }
}

// x <- in; (a, b) <- x by one launch; c <- a; then a backward that reads them all again.
// A workspace w, live during launch 4 only, is the one place over the budget, so the floor
// is the cheapest way to have `extra` pages out during launch 4.
iteration shared_writer(std::size_t extra_pages) {
  test::hand_iteration h(page);
  const buffer_id in = h.persistent(page);
  const buffer_id loss = h.persistent(page);
  const buffer_id x = h.transient(page, 0, 9);
  const buffer_id a = h.transient(page, 1, 8);
  const buffer_id b = h.transient(page, 1, 8);
  const buffer_id c = h.transient(page, 1, 7);
  const buffer_id w = h.transient(extra_pages * page, 4, 5);
  h.launch({in}, {x}, 1.0);     // 0
  h.launch({x}, {a, b}, 5.0);   // 1: one launch writes a and b
  h.launch({a}, {c}, 3.0);      // 2
  h.launch({b, c}, {loss}, 1.0);  // 3
  h.launch({in}, {w}, 1.0);     // 4: the peak
  h.launch({c}, {}, 1.0);       // 5
  h.launch({a, b, c}, {}, 1.0);  // 6
  h.launch({x, a}, {}, 1.0);    // 7
  h.launch({x}, {}, 1.0);       // 8
  return h.finish(4);
}

constexpr std::size_t base = 6 * page;  // in, loss, x, a, b, c

TEST(RecomputeFloor, PaysALaunchThatWritesTwoDroppedBuffersOnce) {
  // Three pages out during launch 4: {x, a, b} replays launches 0 and 1 (1 + 5); counting
  // launch 1 once per buffer would make {x, a, c} (1 + 5 + 3) the cheapest instead.
  const iteration it = shared_writer(3);
  const recompute_floor f = find_recompute_floor(it, base);
  ASSERT_TRUE(f.feasible);
  EXPECT_DOUBLE_EQ(f.added_s, 6.0);
  EXPECT_EQ(f.at, 4u);
  EXPECT_EQ(f.must_free, 3 * page);
  EXPECT_EQ(f.can_free, 4 * page);
  EXPECT_EQ(f.positions, 1u);
  EXPECT_EQ(f.examined, 1u);
  const std::optional<double> rf = planned_cost("reforward", it, base);
  ASSERT_TRUE(rf.has_value());
  EXPECT_DOUBLE_EQ(*rf, 6.0) << "the floor is reached here";
}

TEST(RecomputeFloor, ChoosesTheCheapestCoverNotTheCheapestBuffers) {
  // Two pages: {x, c} at 1 + 3 beats {a, b} at 5, and no single buffer is enough.
  const recompute_floor f = find_recompute_floor(shared_writer(2), base);
  ASSERT_TRUE(f.feasible);
  EXPECT_DOUBLE_EQ(f.added_s, 4.0);
  // One page: x alone.
  EXPECT_DOUBLE_EQ(find_recompute_floor(shared_writer(1), base).added_s, 1.0);
}

TEST(RecomputeFloor, SharesOfALargeGroupNeverOverstateIt) {
  recompute_floor_options o;
  o.exact_group = 1;  // every group of two or more is priced by shares
  for (std::size_t extra = 1; extra <= 4; ++extra) {
    const iteration it = shared_writer(extra);
    const recompute_floor exact = find_recompute_floor(it, base);
    const recompute_floor shared = find_recompute_floor(it, base, o);
    ASSERT_TRUE(shared.feasible);
    EXPECT_LE(shared.added_s, exact.added_s + 1e-12) << extra << " pages";
  }
  // With shares, a alone is priced at half of launch 1, so {x, a} (1 + 2.5) undercuts the
  // true cheapest cover {x, c} (1 + 3) at two pages: lower, never higher.
  EXPECT_DOUBLE_EQ(find_recompute_floor(shared_writer(2), base, o).added_s, 3.5);
}

// Ten one-page buffers, each from its own launch of cost 1; five pages must be out during
// launch 10. With a knapsack of four units (a unit of 1.25 pages, every buffer rounded up
// to one unit) the knapsack alone would say four buffers suffice (4); the relaxation in
// exact bytes says five (5), the true floor.
TEST(RecomputeFloor, ACoarseKnapsackIsCorrectedByItsRelaxationInBytes) {
  test::hand_iteration h(page);
  const buffer_id in = h.persistent(page);
  std::vector<buffer_id> b;
  for (int i = 0; i < 10; ++i) b.push_back(h.transient(page, 0, 22));
  const buffer_id w = h.transient(5 * page, 10, 11);
  for (int i = 0; i < 10; ++i) h.launch({in}, {b[static_cast<std::size_t>(i)]}, 1.0);
  h.launch({in}, {w}, 1.0);  // 10
  for (int i = 0; i < 10; ++i) h.launch({b[static_cast<std::size_t>(i)]}, {}, 1.0);
  h.launch({in}, {}, 1.0);  // 21
  const iteration it = h.finish(10);
  recompute_floor_options coarse;
  coarse.units = 4;
  for (const recompute_floor_options& o : {recompute_floor_options{}, coarse}) {
    const recompute_floor f = find_recompute_floor(it, 11 * page, o);
    ASSERT_TRUE(f.feasible);
    EXPECT_EQ(f.at, 10u);
    EXPECT_EQ(f.must_free, 5 * page);
    EXPECT_DOUBLE_EQ(f.added_s, 5.0) << o.units << " units";
  }
}

// A residual sum m = d + r whose input d (a dropout output) is freed right after: m's own
// writer costs 0.1, but a recipe for m needs d back, so the plan either keeps d (its page
// stays mapped, and dropping m frees nothing) or replays d's writer (5) as well.
TEST(RecomputeFloor, AFreedInputOfTheRecipeIsRetainedOrRebuilt) {
  test::hand_iteration h(page);
  const buffer_id in = h.persistent(page);
  const buffer_id r = h.persistent(page);
  const buffer_id loss = h.persistent(page);
  const buffer_id x = h.transient(page, 0, 2);
  const buffer_id d = h.transient(page, 1, 3);
  const buffer_id m = h.transient(page, 2, 8);
  const buffer_id w = h.transient(2 * page, 3, 4);
  h.launch({in}, {x}, 1.0);      // 0
  h.launch({x}, {d}, 5.0);       // 1: dropout
  h.launch({d, r}, {m}, 0.1);    // 2: the residual add; d is freed after it
  h.launch({in}, {w}, 1.0);      // 3: the peak
  h.launch({in}, {}, 1.0);       // 4
  h.launch({m}, {loss}, 1.0);    // 5
  h.launch({m}, {}, 1.0);        // 6
  h.launch({in}, {}, 1.0);       // 7
  const iteration it = h.finish(3);
  const recompute_floor f = find_recompute_floor(it, 5 * page);
  ASSERT_TRUE(f.feasible);
  EXPECT_EQ(f.at, 3u);
  EXPECT_DOUBLE_EQ(f.added_s, 5.1) << "m's writer and d's";
  for (std::string_view name : planner_names()) {
    const std::optional<double> cost = planned_cost(name, it, 5 * page);
    if (cost) {
      EXPECT_GE(*cost, f.added_s) << name;
    }
  }
}

TEST(RecomputeFloor, ProvesABudgetInfeasibleWhenTooLittleCanBeOut) {
  // Five pages out during launch 4: only x, a, b, c (four) can be.
  const iteration it = shared_writer(5);
  const recompute_floor f = find_recompute_floor(it, base);
  EXPECT_FALSE(f.feasible);
  EXPECT_TRUE(std::isinf(f.added_s));
  EXPECT_EQ(f.at, 4u);
  EXPECT_EQ(f.must_free, 5 * page);
  EXPECT_EQ(f.can_free, 4 * page);
  for (std::string_view name : planner_names()) {
    EXPECT_FALSE(planned_cost(name, it, base).has_value()) << name;
  }
}

TEST(RecomputeFloor, NonReplayableWritersAndTouchedBuffersCannotBeOut) {
  test::hand_iteration h(page);
  const buffer_id in = h.persistent(page);
  const buffer_id x = h.transient(page, 0, 6);
  const buffer_id y = h.transient(page, 0, 6);
  const buffer_id w = h.transient(page, 2, 3);
  h.launch({in}, {x}, 1.0, /*replayable=*/false);  // 0
  h.launch({in}, {y}, 2.0);                         // 1
  h.launch({y}, {w}, 1.0);                          // 2: touches y
  h.launch({in}, {}, 1.0);                          // 3
  h.launch({x, y}, {}, 1.0);                        // 4
  h.launch({x, y}, {}, 1.0);                        // 5
  const iteration it = h.finish(2);
  // One page out during launch 2: x cannot come back (its writer is not replayable) and
  // y is in use.
  const recompute_floor f = find_recompute_floor(it, 3 * page);
  EXPECT_FALSE(f.feasible);
  EXPECT_EQ(f.at, 2u);
  EXPECT_EQ(f.can_free, 0u);
}

TEST(RecomputeFloor, DeadAndUnwrittenBuffersAreFree) {
  test::hand_iteration h(page);
  const buffer_id in = h.persistent(page);
  const buffer_id dead = h.transient(page, 0, 5);    // last read at 1, freed at 5
  const buffer_id later = h.transient(page, 0, 5);   // first written at 3
  const buffer_id w = h.transient(2 * page, 2, 3);
  h.launch({in}, {dead}, 4.0);     // 0
  h.launch({dead}, {}, 1.0);       // 1
  h.launch({in}, {w}, 1.0);        // 2: two pages over
  h.launch({in}, {later}, 1.0);    // 3
  h.launch({later}, {}, 1.0);      // 4
  const iteration it = h.finish(2);
  const recompute_floor f = find_recompute_floor(it, 3 * page);
  ASSERT_TRUE(f.feasible);
  EXPECT_DOUBLE_EQ(f.added_s, 0.0);
  EXPECT_EQ(f.must_free, 2 * page);
}

TEST(RecomputeFloor, NothingToFreeWithinThePeak) {
  const iteration it = shared_writer(2);
  const recompute_floor f = find_recompute_floor(it, simulate(it, plan{}).peak);
  EXPECT_TRUE(f.feasible);
  EXPECT_EQ(f.added_s, 0.0);
  EXPECT_EQ(f.at, none);
  EXPECT_EQ(f.positions, 0u);
}

// Graphs of the shapes the planners meet, at budgets between the bytes floor and the
// unplanned peak.
std::vector<iteration> graphs() {
  std::vector<iteration> out;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    synthetic::dag_spec spec;
    spec.layers = 10 + 4 * seed;
    spec.quantum = MiB;
    spec.granularity = MiB;
    spec.max_quanta = 6;
    out.push_back(synthetic::build(synthetic::random_dag(spec, seed)));
  }
  out.push_back(synthetic::build(synthetic::resnet(6, 2 * MiB, MiB)));
  out.push_back(synthetic::build(synthetic::lstm(12, MiB, MiB)));
  out.push_back(synthetic::build(synthetic::chain(24, 2 * MiB, MiB)));
  return out;
}

using test::budgets_for;

TEST(RecomputeFloor, NoPlannerAddsLessAndNoneMeetsABudgetItProvesInfeasible) {
  std::size_t compared = 0;
  std::size_t binding = 0;  // cases where the floor is above zero
  std::size_t g = 0;
  for (const iteration& it : graphs()) {
    ++g;
    for (std::size_t budget : budgets_for(it, 6)) {
      SCOPED_TRACE("graph " + std::to_string(g) + " budget " + std::to_string(budget));
      const recompute_floor f = find_recompute_floor(it, budget);
      if (f.feasible && f.added_s > 0.0) ++binding;
      for (std::string_view name : planner_names()) {
        const std::optional<double> cost = planned_cost(name, it, budget);
        if (!f.feasible) {
          EXPECT_FALSE(cost.has_value()) << name << " met a budget the floor proves infeasible";
          continue;
        }
        if (!cost) continue;
        EXPECT_LE(f.added_s, *cost * (1 + 1e-9) + 1e-15) << name;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 150u);
  EXPECT_GT(binding, 20u) << "the floor must say something on most of these budgets";
}

TEST(RecomputeFloor, NeverAboveTheMilpOptimum) {
  std::size_t solved = 0;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    synthetic::dag_spec spec;
    spec.layers = 9;
    spec.quantum = MiB;
    spec.granularity = MiB;
    spec.max_quanta = 6;
    const iteration it = synthetic::build(synthetic::random_dag(spec, seed));
    for (std::size_t budget : budgets_for(it, 4)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const oracle::milp_result m = oracle::solve_milp(it, budget);
      if (m.outcome != oracle::milp_result::status::optimal) continue;
      const recompute_floor f = find_recompute_floor(it, budget);
      ASSERT_TRUE(f.feasible);
      EXPECT_LE(f.added_s, m.objective_s * (1 + 1e-6) + 1e-12);
      ++solved;
    }
  }
  EXPECT_GT(solved, 8u);
}

TEST(RecomputeFloor, FewerPositionsGiveALowerOrEqualFloor) {
  const iteration it = synthetic::build(synthetic::resnet(6, 2 * MiB, MiB));
  const std::size_t budget = budgets_for(it, 6)[2];
  const recompute_floor all = find_recompute_floor(it, budget);
  recompute_floor_options o;
  o.max_positions = 1;
  const recompute_floor one = find_recompute_floor(it, budget, o);
  EXPECT_EQ(one.examined, 1u);
  EXPECT_EQ(one.positions, all.positions);
  EXPECT_LE(one.added_s, all.added_s);
  EXPECT_GT(all.examined, 1u);
}

}  // namespace
}  // namespace sublinear::policy
