// Note [Multi-level schedules]: Rotor's dynamic program over the chain's segments, below
// every drop set, against the two-level grid of Note [Multi-pass].
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy/testing/synthetic.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t kPage = std::size_t{64} << 10;

struct shape {
  std::string name;
  iteration it;
};

// A ResNet-like chain whose first half has activations four times the size of the second
// half's (a ResNet's early stages against its late ones), and a uniform chain.
std::vector<shape> shapes() {
  std::vector<shape> out;
  std::vector<std::size_t> bytes;
  std::vector<double> costs;
  for (std::size_t i = 0; i < 40; ++i) {
    bytes.push_back(i < 20 ? 4 * kPage : kPage);
    costs.push_back(1e-3);
  }
  out.push_back({"two-stage chain of 40", synthetic::build(synthetic::chain(bytes, costs, kPage))});
  out.push_back({"uniform chain of 48", synthetic::build(synthetic::chain(48, kPage, kPage))});
  out.push_back({"resnet of 16 blocks", synthetic::build(synthetic::resnet(16, kPage, kPage))});
  return out;
}

// The smallest budget the drop sets of `planner` meet.
std::size_t drop_set_least(const iteration& it, const std::string& name) {
  planner::options o;
  o.multi_pass = false;
  try {
    (void)make_planner(name)->make_plan(it, 1, o);
  } catch (const infeasible_budget& e) {
    return e.smallest_feasible();
  }
  ADD_FAILURE() << name << " met a budget of one byte";
  return 0;
}

// Budgets from the multi-level least peak up to the drop sets' least, in `steps` steps.
std::vector<std::size_t> budgets_below_drop_sets(const iteration& it, std::size_t steps) {
  planner::context ctx(it);
  const std::size_t least = multi_level_least_peak(ctx);
  const std::size_t drops = drop_set_least(it, "reforward");
  std::vector<std::size_t> out;
  // The smallest feasible budget is found to 1/1024 (smallest_feasible_budget): stay clear.
  const std::size_t top = drops - drops / 512;
  if (least == 0 || least >= top) return out;
  for (std::size_t k = 0; k <= steps; ++k) out.push_back(least + (top - least) * k / steps);
  return out;
}

TEST(MultiLevel, PlansBelowEveryDropSetThatTheSimulatorAccepts) {
  for (const shape& sh : shapes()) {
    SCOPED_TRACE(sh.name);
    const std::vector<std::size_t> budgets = budgets_below_drop_sets(sh.it, 4);
    ASSERT_FALSE(budgets.empty()) << "the dynamic program reaches no budget below every drop set";
    for (std::size_t budget : budgets) {
      SCOPED_TRACE(budget);
      planner::context ctx(sh.it);
      const std::optional<planner::context::evaluation> e = solve_multi_level(ctx, budget);
      ASSERT_TRUE(e.has_value()) << "a budget at or above the least peak was refused";
      // Checked again from scratch, outside the context that made it.
      const simulation s = simulate(sh.it, e->result);
      ASSERT_TRUE(s.valid) << s.error;
      EXPECT_LE(s.peak, budget);
      EXPECT_EQ(s.peak, e->sim.peak);
      EXPECT_GT(s.added_compute_s, 0.0);
    }
    // Below its least peak it has nothing, and says so at once.
    planner::context ctx(sh.it);
    const std::size_t least = multi_level_least_peak(ctx);
    EXPECT_FALSE(solve_multi_level(ctx, least - 1).has_value());
    EXPECT_TRUE(solve_multi_level(ctx, least).has_value());
  }
}

TEST(MultiLevel, RecomputesLessThanTheTwoLevelGridWhereBothFit) {
  // The grid spaces its checkpoints uniformly; the dynamic program puts them where they
  // are cheap. Never dearer where both fit by much, and cheaper somewhere on every shape.
  for (const shape& sh : shapes()) {
    SCOPED_TRACE(sh.name);
    std::size_t cheaper = 0, compared = 0;
    for (std::size_t budget : budgets_below_drop_sets(sh.it, 6)) {
      planner::context ctx(sh.it);
      const auto two = solve_two_level(ctx, budget);
      const auto many = solve_multi_level(ctx, budget);
      ASSERT_TRUE(many.has_value()) << budget;
      if (!two) continue;
      ++compared;
      if (many->sim.added_compute_s < two->sim.added_compute_s * (1 - 1e-9)) ++cheaper;
      // The model's memory is approximate, so a grid point may land on a better peak; but
      // never by more than a segment's forward (1 ms here) in recomputation.
      EXPECT_LE(many->sim.added_compute_s, two->sim.added_compute_s + 1.5e-3) << budget;
    }
    EXPECT_GT(compared, 0u);
    EXPECT_GT(cheaper, 0u) << "the dynamic program never beat the uniform grid";
  }
}

TEST(MultiLevel, ChainAndReforwardTakeTheCheaperOfTheTwoBelowEveryDropSet) {
  for (const shape& sh : shapes()) {
    for (const std::string name : {"chain", "reforward"}) {
      SCOPED_TRACE(sh.name + ", " + name);
      for (std::size_t budget : budgets_below_drop_sets(sh.it, 2)) {
        planner::context ctx(sh.it);
        const auto two = solve_two_level(ctx, budget);
        const auto many = solve_multi_level(ctx, budget);
        ASSERT_TRUE(many.has_value());
        double best = many->sim.added_compute_s;
        if (two) best = std::min(best, two->sim.added_compute_s);
        const plan p = make_planner(name)->make_plan(sh.it, budget);
        EXPECT_LE(p.predicted_peak, budget);
        EXPECT_DOUBLE_EQ(p.added_compute_s, best) << budget;
      }
      // Their smallest feasible budget is the lower of the two least peaks.
      planner::context ctx(sh.it);
      const std::size_t least = multi_pass_least_peak(ctx);
      try {
        (void)make_planner(name)->make_plan(sh.it, 1);
        FAIL() << "met a budget of one byte";
      } catch (const infeasible_budget& e) {
        EXPECT_LE(e.smallest_feasible(), least + least / 1024 + 1);  // found to 1/1024
        EXPECT_NO_THROW((void)make_planner(name)->make_plan(sh.it, e.smallest_feasible()));
      }
    }
  }
}

// Blocks whose internals include a sub-page buffer (BatchNorm's saved statistics): layer A
// makes a page, S reads it and makes 512 bytes, B reads the block's input, A and S and
// makes the block's output. A and S are internal to the block's segment.
iteration blocks_with_statistics(std::size_t blocks) {
  synthetic::network net;
  net.granularity = kPage;
  net.input_bytes = kPage;
  std::uint32_t prev = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    const auto id = static_cast<std::uint32_t>(net.layers.size() + 1);  // tensor id of A
    net.layers.push_back({.inputs = {prev}, .output_bytes = kPage, .cost_s = 1e-3, .kernel = "a"});
    net.layers.push_back({.inputs = {id}, .output_bytes = 512, .cost_s = 2e-4, .kernel = "s"});
    net.layers.push_back({.inputs = {prev, id, id + 1}, .output_bytes = kPage, .cost_s = 1e-3, .kernel = "b"});
    prev = id + 2;
  }
  return synthetic::build(net);
}

TEST(MultiLevel, KeepsSubPageInternalsResident) {
  // Regenerated, a 512-byte buffer holds a 64 KiB page and its recipe re-runs its
  // producer; kept, it holds 512 bytes. No multi-level plan drops one.
  const iteration it = blocks_with_statistics(24);
  const std::vector<std::size_t> budgets = budgets_below_drop_sets(it, 4);
  ASSERT_FALSE(budgets.empty());
  std::size_t evicted = 0;
  for (std::size_t budget : budgets) {
    SCOPED_TRACE(budget);
    planner::context ctx(it);
    const auto e = solve_multi_level(ctx, budget);
    ASSERT_TRUE(e.has_value());
    EXPECT_LE(simulate(it, e->result).peak, budget);
    for (const eviction& ev : e->result.evictions) {
      ++evicted;
      EXPECT_GT(it.buffers[ev.target].size, kPage / 16) << "buffer " << ev.target << " was dropped";
    }
  }
  EXPECT_GT(evicted, 0u);
}

TEST(MultiLevel, CoarserTablesReachBudgetsAboveTheFinestTablesLevels) {
  // 600 layers make 200 units of three; the finest table's levels then cover about 26
  // pages, short of the drop sets. Above them the plans must keep getting cheaper as the
  // budget grows, which only a coarser table can offer (with max_coarsenings at 0, the
  // last two budgets here get the same plan).
  const iteration it = synthetic::build(synthetic::chain(600, kPage, kPage));
  const std::vector<std::size_t> budgets = budgets_below_drop_sets(it, 6);
  ASSERT_EQ(budgets.size(), 7u);
  planner::context ctx(it);  // the tables are filled once, for every budget
  double previous = 0.0;
  for (std::size_t k = 3; k < budgets.size(); ++k) {
    SCOPED_TRACE(budgets[k]);
    const auto e = solve_multi_level(ctx, budgets[k]);
    ASSERT_TRUE(e.has_value());
    EXPECT_LE(e->sim.peak, budgets[k]);
    if (k > 3) {
      EXPECT_LT(e->sim.added_compute_s, previous) << "no cheaper plan with more room";
    }
    previous = e->sim.added_compute_s;
  }
}

TEST(MultiLevel, NearTheDropSetsLeastPeakReplacesADropSetThatRecomputesMore) {
  // Just above the drop sets' least peak a drop set rebuilds most of the forward pass; a
  // multi-level schedule may rebuild less (prefer_multi_level). Never more.
  std::size_t cheaper = 0;
  std::vector<shape> all = shapes();
  all.push_back({"blocks with statistics", blocks_with_statistics(24)});
  for (const shape& sh : all) {
    const std::size_t drops = drop_set_least(sh.it, "reforward");
    for (const std::string name : {"chain", "reforward"}) {
      for (std::size_t step = 0; step < 4; ++step) {
        const std::size_t budget = drops + drops / 40 * step;
        SCOPED_TRACE(sh.name + ", " + name + ", " + std::to_string(budget));
        planner::options off;
        off.multi_pass = false;
        const plan with = make_planner(name)->make_plan(sh.it, budget);
        const plan without = make_planner(name)->make_plan(sh.it, budget, off);
        EXPECT_LE(with.predicted_peak, budget);
        EXPECT_LE(with.added_compute_s, without.added_compute_s);
        if (with.added_compute_s < without.added_compute_s) {
          ++cheaper;
          // What replaced the drop set is the multi-level schedule for this budget.
          planner::context ctx(sh.it);
          const auto many = solve_multi_level(ctx, budget);
          ASSERT_TRUE(many.has_value());
          EXPECT_DOUBLE_EQ(with.added_compute_s, many->sim.added_compute_s);
        }
      }
    }
  }
  EXPECT_GT(cheaper, 0u) << "no drop set was replaced on any shape";
}

TEST(MultiLevel, IsOffWithMultiPassAndOnGraphsWithoutAChain) {
  const iteration it = synthetic::build(synthetic::chain(48, kPage, kPage));
  planner::context off(it, false);
  EXPECT_FALSE(solve_multi_level(off, it.peak_bytes).has_value());
  EXPECT_EQ(multi_level_least_peak(off), 0u);
  // One layer: no chain of segments to schedule.
  const iteration one = synthetic::build(synthetic::chain(1, kPage, kPage));
  planner::context single(one);
  EXPECT_FALSE(solve_multi_level(single, one.peak_bytes).has_value());
  EXPECT_EQ(multi_level_least_peak(single), 0u);
}

}  // namespace
}  // namespace sublinear::policy
