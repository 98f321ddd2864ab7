// The chosen plan's copies back moved earlier, where the budget has room, so that each has
// time to spare (Note [Fetch margin] in policy/offload_placement.cpp).
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

constexpr std::size_t g = 4096;
constexpr std::size_t big = 65536;

// test::make_three_out: launches take 1 s (L_i ends at i + 1), a copy 2 s each way.
using test::three_out;

const link_model two_seconds = test::link_at(big / 2.0);

// Out by deadline (z 1..3, b 3..5, a 5..7), and the copies back as placement times them:
// b queued at 8 is back at 10 as L10 starts, a queued at 10 back at 12 as L12 starts; z,
// queued at 12, is back at 14 with 1 s to spare.
plan three_offloads(const three_out& s) {
  plan p;
  p.offloads.push_back(test::offload_entry(s.z, 0, 3, 11, 15));
  p.offloads.push_back(test::offload_entry(s.a, 2, 7, 9, 12));
  p.offloads.push_back(test::offload_entry(s.b, 2, 5, 7, 10));
  return p;
}

planner::context::evaluation planned(planner::context& ctx, const three_out& s) {
  planner::context::evaluation e;
  e.ok = true;
  e.result = three_offloads(s);
  e.sim = ctx.sim().run(e.result);
  return e;
}

// With a quarter of each copy's time to spare, laid out backwards from the last consumer:
// z keeps its fetch (its window already has it), a's moves one launch earlier and b's
// two, so a link a fifth slower to the device stalls nothing, where the plan as placed
// waits for both.
TEST(FetchMargin, CopiesBackDueAsTheirConsumersStartAreFetchedEarlier) {
  const three_out s = test::make_three_out(g, big);
  offload_settings off;
  off.mode = offload_mode::on;
  off.link = two_seconds;
  planner::context ctx(s.it, true, true, off);
  planner::context::evaluation e = planned(ctx, s);
  ASSERT_TRUE(e.sim.valid) << e.sim.error;
  ASSERT_DOUBLE_EQ(e.sim.predicted_stall_s, 0.0);
  const plan as_placed = e.result;
  const std::size_t budget = e.sim.peak;

  add_fetch_margin(ctx, budget, e, 0.25);
  EXPECT_EQ(e.result.offloads[0].fetch_after, 11u);
  EXPECT_EQ(e.result.offloads[1].fetch_after, 8u);
  EXPECT_EQ(e.result.offloads[2].fetch_after, 5u);
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(e.result.offloads[j].evict_after, as_placed.offloads[j].evict_after);
    EXPECT_EQ(e.result.offloads[j].release_before, as_placed.offloads[j].release_before);
    EXPECT_EQ(e.result.offloads[j].restore_before, as_placed.offloads[j].restore_before);
  }
  EXPECT_TRUE(e.sim.fits(budget));
  EXPECT_DOUBLE_EQ(e.sim.predicted_stall_s, 0.0);
  EXPECT_DOUBLE_EQ(e.result.predicted_stall_s, 0.0);

  link_model slower = two_seconds;
  slower.to_device.bytes_per_s /= 1.2;
  const simulation late = simulate(s.it, as_placed, slower);
  const simulation early = simulate(s.it, e.result, slower);
  ASSERT_TRUE(late.valid && early.valid);
  EXPECT_NEAR(late.predicted_stall_s, 0.8, 1e-9);  // b 0.4 s late at L10, a as late at L12
  EXPECT_DOUBLE_EQ(early.predicted_stall_s, 0.0);

  // No margin, or a plan that does not fit: nothing moves.
  planner::context::evaluation none_asked = planned(ctx, s);
  add_fetch_margin(ctx, budget, none_asked, 0.0);
  planner::context::evaluation over = planned(ctx, s);
  add_fetch_margin(ctx, budget - 1, over, 0.25);
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(none_asked.result.offloads[j].fetch_after, as_placed.offloads[j].fetch_after);
    EXPECT_EQ(over.result.offloads[j].fetch_after, as_placed.offloads[j].fetch_after);
  }
}

// Where the budget has no room for a fetch moved earlier, that fetch stays: with c, twice
// a's size, live beside a over L5..L7, the budget (the plan's peak, three of a's size)
// leaves no room at L6 for b, back from L8 as placed: it cannot come back two launches
// earlier, and comes back one earlier (halfway), while a still moves.
TEST(FetchMargin, AFetchStaysWhereTheBudgetHasNoRoomForItEarlier) {
  const three_out s = test::make_three_out(g, big, 2 * big);
  const iteration& it = s.it;
  offload_settings off;
  off.mode = offload_mode::on;
  off.link = two_seconds;
  planner::context ctx(it, true, true, off);
  planner::context::evaluation e = planned(ctx, s);
  ASSERT_TRUE(e.sim.valid) << e.sim.error;
  ASSERT_DOUBLE_EQ(e.sim.predicted_stall_s, 0.0);
  const std::size_t budget = e.sim.peak;
  add_fetch_margin(ctx, budget, e, 0.25);
  ASSERT_TRUE(e.sim.fits(budget));
  EXPECT_EQ(e.result.offloads[1].fetch_after, 8u) << "a moves: the budget has room at L9";
  EXPECT_EQ(e.result.offloads[2].fetch_after, 6u) << "b: not to L5 (c and b over L6 leave no room), halfway";
}

// On random DAGs over random links, the margin never moves a fetch later, never changes the
// other three points, keeps every plan within its budget for no more added time than the
// plan without it, and moves some fetches.
TEST(FetchMargin, NeverLaterNeverOverTheBudgetNeverMoreTime) {
  std::mt19937_64 rng(67);  // links fast enough that offloads leave room around their fetches
  std::size_t moved = 0, compared = 0, offloading = 0;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    const iteration it = test::page_dag(seed, 8 + seed % 5);
    const link_model link = test::random_page_link(rng, 1e-4, 1e-2);
    for (std::size_t budget : test::budgets_for(it, 6)) {
      for (const char* name : {"greedy", "reforward"}) {
        SCOPED_TRACE(std::string(name) + " seed " + std::to_string(seed) + " budget " + std::to_string(budget));
        const auto planner = make_planner(name);
        planner::options o;
        o.offload = offload_mode::on;
        o.link = link;
        o.fetch_margin = 0.0;
        std::optional<plan> without;
        try {
          without = planner->make_plan(it, budget, o);
        } catch (const infeasible_budget&) {
        }
        o.fetch_margin = 0.25;
        std::optional<plan> with;
        try {
          with = planner->make_plan(it, budget, o);
        } catch (const infeasible_budget&) {
        }
        ASSERT_EQ(with.has_value(), without.has_value());
        if (!with) continue;
        const simulation r = simulate(it, *with, link);
        ASSERT_TRUE(r.valid) << r.error;
        EXPECT_LE(r.peak, budget);
        EXPECT_LE(with->added_compute_s + with->predicted_stall_s,
                  (without->added_compute_s + without->predicted_stall_s) * (1 + 1e-9) + 1e-12);
        ASSERT_EQ(with->offloads.size(), without->offloads.size());
        bool any = false;
        for (std::size_t j = 0; j < with->offloads.size(); ++j) {
          const offload& x = with->offloads[j];
          const offload& y = without->offloads[j];
          EXPECT_EQ(x.target, y.target);
          EXPECT_EQ(x.evict_after, y.evict_after);
          EXPECT_EQ(x.release_before, y.release_before);
          EXPECT_EQ(x.restore_before, y.restore_before);
          EXPECT_LE(x.fetch_after, y.fetch_after);
          any = any || x.fetch_after < y.fetch_after;
        }
        ++compared;
        offloading += with->offloads.empty() ? 0 : 1;
        moved += any ? 1 : 0;
      }
    }
  }
  EXPECT_GT(moved, 0u) << "no plan had a fetch moved: the check exercises nothing";
  std::printf("%zu of %zu plans (%zu offloading) had fetches moved earlier\n", moved, compared, offloading);
}

}  // namespace
}  // namespace sublinear::policy
