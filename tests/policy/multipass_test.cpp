// Note [Multi-pass]: drop sets with horizons, and the two-level schedules the chain and
// reforward planners fall back on below every drop set.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "policy/candidates.hpp"
#include "policy/planner.hpp"
#include "policy/recipe.hpp"
#include "policy/simulator.hpp"
#include "policy/planner_detail.hpp"
#include "policy/solvers.hpp"
#include "policy/testing/synthetic.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t kPage = std::size_t{64} << 10;

// The smallest budget `planner` meets, from its infeasible_budget at a budget of one byte.
std::size_t smallest_feasible(const iteration& it, const std::string& name, bool multi_pass) {
  planner::options o;
  o.multi_pass = multi_pass;
  try {
    (void)make_planner(name)->make_plan(it, 1, o);
  } catch (const infeasible_budget& e) {
    return e.smallest_feasible();
  }
  ADD_FAILURE() << name << " met a budget of one byte";
  return 0;
}

// Buffers a recipe rebuilds in scratch although the plan evicts them (a second pass over
// them): what no drop-set plan has.
std::size_t scratch_rebuilds(const plan& p) {
  std::vector<buffer_id> targets;
  for (const eviction& e : p.evictions) targets.push_back(e.target);
  std::sort(targets.begin(), targets.end());
  std::size_t n = 0;
  for (const eviction& e : p.evictions)
    for (buffer_id t : e.temporaries) n += std::binary_search(targets.begin(), targets.end(), t) ? 1 : 0;
  return n;
}

TEST(MultiPass, AHorizonRebuildsADroppedInputInScratchUntilItIsDue) {
  // A chain x1 -> x2 -> x3 -> x4, all dropped. As a drop set, x4's recipe regenerates x1..x3
  // at their own addresses and they stay resident. With x2's horizon at x2's own restore
  // point, x4's recipe rebuilds x2 in scratch and x2 comes back with its own recipe.
  const iteration it = synthetic::build(synthetic::chain(6, kPage, kPage));
  const dataflow df(it);
  const candidate_set cs(df);
  ASSERT_GE(cs.size(), 4u);
  std::vector<std::uint8_t> all(cs.size(), 1);
  drop_plan_builder builder(cs);
  const auto once = builder.build(all);
  ASSERT_TRUE(once.ok) << once.error;
  // The chain's deepest dropped activation carries the others.
  const auto carrier = std::find_if(once.result.evictions.begin(), once.result.evictions.end(),
                                    [](const eviction& e) { return !e.recipe.empty(); });
  ASSERT_NE(carrier, once.result.evictions.end());
  ASSERT_GE(carrier->also_regenerates.size(), 2u);
  const buffer_id held = carrier->also_regenerates[1];
  const std::uint32_t c = cs.index_of(held);
  std::vector<launch_id> horizons(cs.size(), none);
  horizons[c] = cs[c].restore_before;
  const auto twice = builder.build(all, horizons);
  ASSERT_TRUE(twice.ok) << twice.error;
  const eviction* first = nullptr;
  const eviction* own = nullptr;
  for (const eviction& e : twice.result.evictions) {
    if (e.target == carrier->target) first = &e;
    if (e.target == held) own = &e;
  }
  ASSERT_NE(first, nullptr);
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(std::count(first->also_regenerates.begin(), first->also_regenerates.end(), held), 0);
  EXPECT_EQ(std::count(first->temporaries.begin(), first->temporaries.end(), held), 1);
  EXPECT_FALSE(own->recipe.empty()) << "the held-back buffer has no recipe of its own";
  EXPECT_EQ(own->restore_before, cs[c].restore_before);
  const simulation s = simulator(it).run(twice.result);
  ASSERT_TRUE(s.valid) << s.error;
  EXPECT_GT(s.added_compute_s, simulator(it).run(once.result).added_compute_s) << "nothing was recomputed twice";
  // Horizons must match the candidates.
  const std::vector<launch_id> short_list(cs.size() - 1, none);
  const auto refused = builder.build(all, short_list);
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.error.find("horizons"), std::string::npos) << refused.error;
}

struct shape {
  std::string name;
  iteration it;
};

std::vector<shape> shapes() {
  std::vector<shape> out;
  out.push_back({"chain of 48", synthetic::build(synthetic::chain(48, kPage, kPage))});
  out.push_back({"resnet of 12 blocks", synthetic::build(synthetic::resnet(12, kPage, kPage))});
  return out;
}

TEST(MultiPass, ChainAndReforwardMeetBudgetsBelowEveryDropSet) {
  for (const shape& sh : shapes()) {
    for (const std::string name : {"chain", "reforward"}) {
      SCOPED_TRACE(sh.name + ", " + name);
      const std::size_t drop_sets = smallest_feasible(sh.it, name, false);
      const std::size_t deeper = smallest_feasible(sh.it, name, true);
      ASSERT_GT(drop_sets, 0u);
      EXPECT_LT(static_cast<double>(deeper), 0.9 * static_cast<double>(drop_sets))
          << "two-level schedules cut the smallest budget by less than a tenth";
      // Between the two: refused as a drop set, planned with a second pass.
      const std::size_t budget = deeper + (drop_sets - deeper) / 2;
      planner::options off;
      off.multi_pass = false;
      EXPECT_THROW((void)make_planner(name)->make_plan(sh.it, budget, off), infeasible_budget);
      const plan p = make_planner(name)->make_plan(sh.it, budget);
      const simulation s = simulate(sh.it, p);
      ASSERT_TRUE(s.valid) << s.error;
      EXPECT_LE(s.peak, budget);
      EXPECT_EQ(s.peak, p.predicted_peak);
      EXPECT_GT(scratch_rebuilds(p), 0u) << "the plan is a drop set; it should not fit";
    }
  }
}

TEST(MultiPass, TheOffloadSearchRebuildsATwoLevelSeedWithItsHorizons) {
  // The offload search starts from two-level plans at larger budgets (Note [Offload
  // search]) and rebuilds them from per-candidate actions (evaluate_actions). With the
  // seed's horizons the rebuild is the seed; without them it is the drop set alone,
  // whose dropped runs are resident whole.
  for (const shape& sh : shapes()) {
    SCOPED_TRACE(sh.name);
    offload_settings off;
    off.mode = offload_mode::on;
    off.link.to_host.bytes_per_s = off.link.to_device.bytes_per_s = 1e4 * static_cast<double>(kPage);
    planner::context ctx(sh.it, true, true, off);
    const auto seed = solve_multi_pass(ctx, smallest_feasible(sh.it, "reforward", true));
    ASSERT_TRUE(seed.has_value());
    ASSERT_FALSE(seed->horizons.empty());
    std::vector<action> actions(seed->dropped.size(), action::keep);
    for (std::size_t c = 0; c < actions.size(); ++c) {
      if (seed->dropped[c] != 0) actions[c] = action::drop;
    }
    const std::vector<launch_id> open(actions.size(), none);
    const auto with = ctx.evaluate_actions(actions, open, open, seed->horizons);
    ASSERT_TRUE(with.ok) << with.error;
    EXPECT_EQ(with.sim.peak, seed->sim.peak);
    EXPECT_EQ(with.sim.added_compute_s, seed->sim.added_compute_s);
    EXPECT_EQ(with.horizons, seed->horizons);
    const auto without = ctx.evaluate_actions(actions, open, open);
    ASSERT_TRUE(without.ok) << without.error;
    EXPECT_GT(without.sim.peak, 2 * seed->sim.peak);
    // From that seed at its own budget, the search returns a plan no worse that keeps them.
    const auto again = solve_offload(ctx, seed->sim.peak, true, &*seed);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->horizons, seed->horizons);
    EXPECT_LE(again->sim.added_time_s(), seed->sim.added_time_s());
  }
}

TEST(MultiPass, WhereADropSetFitsOnlyACheaperScheduleReplacesIt) {
  // Where a drop set fits, the two-level grid is not tried; a multi-level schedule
  // replaces the drop set only where it recomputes less (prefer_multi_level,
  // MultiLevel.NearTheDropSetsLeastPeakReplacesADropSetThatRecomputesMore).
  for (const shape& sh : shapes()) {
    SCOPED_TRACE(sh.name);
    const std::size_t drop_sets = smallest_feasible(sh.it, "reforward", false);
    planner::options off;
    off.multi_pass = false;
    const plan with = make_planner("reforward")->make_plan(sh.it, drop_sets);
    const plan without = make_planner("reforward")->make_plan(sh.it, drop_sets, off);
    if (scratch_rebuilds(with) == 0) {
      EXPECT_EQ(with.added_compute_s, without.added_compute_s);
    } else {
      EXPECT_LT(with.added_compute_s, without.added_compute_s);
    }
  }
}

TEST(MultiPass, OtherPlannersStayWithinDropSets) {
  // greedy, chen and sqrtn are the published algorithms; they do not gain a second pass.
  for (const shape& sh : shapes()) {
    for (const std::string name : {"greedy", "chen"}) {
      SCOPED_TRACE(sh.name + ", " + name);
      EXPECT_EQ(smallest_feasible(sh.it, name, true), smallest_feasible(sh.it, name, false));
    }
  }
}

}  // namespace
}  // namespace sublinear::policy
