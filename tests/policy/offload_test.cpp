// The offload action: simulator rules, memory and link arithmetic, and the planners'
// keep/recompute/offload choice (Note [Offload], Note [Link timeline], Note [Offload search]).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "policy/oracle/actions.hpp"
#include "policy/planner.hpp"
#include "policy/recompute_floor.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t g = 4096;
constexpr std::size_t big = 65536;

// L0 P -> a (cost 10) | L1 reads a | L2 filler | L3 P -> c (the peak) | L4 filler | L5 reads a.
// a is idle over L2..L4 (3 s): an expensive recompute, a gap that hides two 0.5 s copies.
struct scenario {
  iteration it;
  buffer_id P, a, c;
};

scenario make_scenario() {
  test::hand_iteration h(g);
  scenario s{};
  s.P = h.persistent(1000);
  s.a = h.transient(big, 0, 6);
  s.c = h.transient(big, 3, 4);
  h.launch({s.P}, {s.a}, 10.0);
  h.launch({s.a}, {}, 1.0);
  h.launch({s.P}, {}, 1.0);
  h.launch({s.P}, {s.c}, 1.0);
  h.launch({s.P}, {}, 1.0);
  h.launch({s.a}, {}, 1.0);
  s.it = h.finish(3);
  return s;
}

using test::link_at;
const link_model fast = link_at(2.0 * big);  // 0.5 s per copy of a
const link_model slow = link_at(big / 100.0);  // 100 s per copy of a

constexpr std::size_t unplanned_peak = 1024 + big + big;  // P + a + c during L3
constexpr std::size_t without_a = 1024 + big;

// ---- simulator ------------------------------------------------------------------------

TEST(OffloadSimulator, HiddenCopiesFreeTheBufferWithoutStalling) {
  const scenario s = make_scenario();
  plan p;
  p.offloads.push_back(test::offload_entry(s.a, 1, 3, 3, 5));
  const simulation r = simulate(s.it, p, fast);
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_EQ(r.peak, without_a);  // a is out during L3
  EXPECT_EQ(r.offloaded_buffers, 1u);
  EXPECT_EQ(r.offloaded_bytes, big);
  EXPECT_EQ(r.host_bytes, big);
  EXPECT_EQ(r.link_busy_s, 1.0);
  EXPECT_EQ(r.predicted_stall_s, 0.0);
  EXPECT_EQ(r.added_compute_s, 0.0);
  EXPECT_EQ(r.predicted_time_s, 15.0);  // the launches' own costs
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].to_host_start, 11.0);  // after L1 ends
  EXPECT_EQ(r.copies[0].to_host_done, 11.5);
  EXPECT_EQ(r.copies[0].to_device_start, 13.0);  // after L3 ends
  EXPECT_EQ(r.copies[0].to_device_done, 13.5);
  const std::vector<std::size_t> during = simulator(s.it, fast).timeline(p);
  ASSERT_EQ(during.size(), 6u);
  EXPECT_EQ(during[2], 1024 + big);        // still resident before release_before
  EXPECT_EQ(during[3], 1024 + big);        // out; c in
  EXPECT_EQ(during[4], 1024 + big);        // fetched back after L3
}

TEST(OffloadSimulator, OffloadedBufferTakesWholePages) {
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  const buffer_id a = h.transient(5000, 0, 4);
  h.launch({P}, {a});
  h.launch({P}, {});
  h.launch({P}, {});
  h.launch({a}, {});
  const iteration it = h.finish(1);
  plan p;
  p.offloads.push_back(test::offload_entry(a, 0, 1, 1, 3));
  const std::vector<std::size_t> during = simulator(it, fast).timeline(p);
  ASSERT_EQ(during.size(), 4u);
  EXPECT_EQ(during[0], 512 + 8192u);  // round_up(5000, 4096) while resident
  EXPECT_EQ(during[1], 512u);         // out
  EXPECT_EQ(during[2], 512 + 8192u);  // back from fetch_after + 1
  EXPECT_EQ(simulate(it, plan{}).peak, 512 + 5120u);  // unplanned: round_up(5000, 512)
}

TEST(OffloadSimulator, LateFetchStallsTheConsumer) {
  const scenario s = make_scenario();
  plan p;
  p.offloads.push_back(test::offload_entry(s.a, 1, 3, 4, 5));  // fetched after L4 ends (14): back at 14.5
  const simulation r = simulate(s.it, p, fast);
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_EQ(r.predicted_stall_s, 0.5);
  EXPECT_EQ(r.predicted_time_s, 15.5);
  EXPECT_EQ(r.copies[0].to_device_start, 14.0);
}

TEST(OffloadSimulator, EarlyReleaseWaitsForTheCopyToHost) {
  const scenario s = make_scenario();
  const link_model two_s = link_at(big / 2.0);  // 2 s per copy
  plan p;
  p.offloads.push_back(test::offload_entry(s.a, 1, 2, 4, 5));
  const simulation r = simulate(s.it, p, two_s);
  ASSERT_TRUE(r.valid) << r.error;
  // d2h 11..13: L2 waits 2 s to release. L2..L4 run 13..16; h2d 16..18: L5 waits 2 s.
  EXPECT_EQ(r.copies[0].to_host_done, 13.0);
  EXPECT_EQ(r.copies[0].to_device_start, 16.0);
  EXPECT_EQ(r.predicted_stall_s, 4.0);
  EXPECT_EQ(r.predicted_time_s, 19.0);
  EXPECT_EQ(r.link_busy_s, 4.0);
  EXPECT_EQ(r.peak, without_a);
}

TEST(OffloadSimulator, CopiesOfOneDirectionQueue) {
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  const buffer_id a = h.transient(big, 0, 5);
  const buffer_id b = h.transient(big, 0, 5);
  h.launch({P}, {a, b}, 1.0);
  h.launch({P}, {}, 1.0);
  h.launch({P}, {}, 1.0);
  h.launch({P}, {}, 1.0);
  h.launch({a, b}, {}, 1.0);
  const iteration it = h.finish(2);
  plan p;
  // Both queued after L0 (t = 1): a 1..1.5, b 1.5..2. Both fetched after L2 (t = 3),
  // deadline order: a and b tie on restore_before, so plan order: a 3..3.5, b 3.5..4.
  p.offloads.push_back(test::offload_entry(a, 0, 2, 2, 4));
  p.offloads.push_back(test::offload_entry(b, 0, 2, 2, 4));
  const simulation r = simulate(it, p, fast);
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_EQ(r.copies[1].to_host_start, 1.5);
  EXPECT_EQ(r.copies[1].to_host_done, 2.0);
  EXPECT_EQ(r.copies[1].to_device_start, 3.5);
  EXPECT_EQ(r.copies[1].to_device_done, 4.0);
  EXPECT_EQ(r.predicted_stall_s, 0.0);
  EXPECT_EQ(r.host_bytes, 2 * big);
  EXPECT_EQ(r.link_busy_s, 2.0);
  // A host budget below both refuses the plan and says so.
  const simulation tight = simulate(it, p, fast, big);
  EXPECT_FALSE(tight.valid);
  EXPECT_THAT(tight.error, HasSubstr("host budget"));
}

TEST(OffloadSimulator, RefusesBrokenOffloads) {
  scenario s = make_scenario();
  const auto error_of = [&](const plan& p, const link_model& l = fast) {
    const simulation r = simulate(s.it, p, l);
    EXPECT_FALSE(r.valid);
    return r.error;
  };
  plan p;
  p.offloads.push_back(test::offload_entry(s.a, 1, 3, 3, 5));
  EXPECT_THAT(error_of(p, link_model{}), HasSubstr("no bandwidth"));
  p.offloads[0] = test::offload_entry(s.a, 0, 3, 3, 5);  // L1 uses a inside the window
  EXPECT_THAT(error_of(p), HasSubstr("used by launch 1"));
  p.offloads[0] = test::offload_entry(s.a, 1, 4, 2, 5);  // release_before > fetch_after + 1
  EXPECT_THAT(error_of(p), HasSubstr("evict_after < release_before"));
  p.offloads[0] = test::offload_entry(s.a, 1, 3, 5, 5);  // fetch_after not before restore_before
  EXPECT_THAT(error_of(p), HasSubstr("fetch_after < restore_before"));
  p.offloads[0] = test::offload_entry(s.P, 1, 3, 3, 5);
  EXPECT_THAT(error_of(p), HasSubstr("not allocated and freed within the iteration"));
  p.offloads[0] = test::offload_entry(s.a, 1, 3, 3, 5);
  p.offloads.push_back(test::offload_entry(s.a, 1, 3, 3, 5));
  EXPECT_THAT(error_of(p), HasSubstr("already offloaded"));
  p.offloads.pop_back();
  eviction ev;
  ev.target = s.a;
  ev.evict_after = 1;
  ev.restore_before = 5;
  ev.recipe = {0};
  p.evictions.push_back(ev);
  EXPECT_THAT(error_of(p), HasSubstr("also an eviction's target"));
  p.evictions.clear();
  s.it.buffers[s.a].never_evict = true;
  EXPECT_THAT(error_of(p), HasSubstr("never_evict"));
}

TEST(OffloadSimulator, RecipeMayNotReadAnOffloadedBuffer) {
  // L0 P -> a | L1 a -> b | L2 P -> c | L3 reads b | L4 reads a
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  const buffer_id a = h.transient(big, 0, 5);
  const buffer_id b = h.transient(big, 1, 4);
  const buffer_id c = h.transient(big, 2, 3);
  h.launch({P}, {a});
  h.launch({a}, {b});
  h.launch({P}, {c});
  h.launch({b}, {});
  h.launch({a}, {});
  const iteration it = h.finish(2);
  plan p;
  eviction ev;
  ev.target = b;
  ev.evict_after = 1;
  ev.restore_before = 3;
  ev.recipe = {1};  // reads a in place before L3
  p.evictions.push_back(ev);
  ASSERT_TRUE(simulate(it, p, fast).valid);
  p.offloads.push_back(test::offload_entry(a, 1, 2, 2, 4));
  const simulation r = simulate(it, p, fast);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("reads buffer 1, which is offloaded"));
}

// ---- planners -------------------------------------------------------------------------

planner::options with(offload_mode mode, const link_model& link, std::size_t host_budget = 0) {
  planner::options o;
  o.offload = mode;
  o.link = link;
  o.host_budget = host_budget;
  return o;
}

class OffloadPlanners : public ::testing::TestWithParam<const char*> {};

TEST_P(OffloadPlanners, OffloadWinsOverAnExpensiveRecomputeWithAHidingGap) {
  const scenario s = make_scenario();
  const plan p = make_planner(GetParam())->make_plan(s.it, without_a, with(offload_mode::on, fast));
  EXPECT_TRUE(p.evictions.empty());
  ASSERT_EQ(p.offloads.size(), 1u);
  EXPECT_EQ(p.offloads[0].target, s.a);
  EXPECT_EQ(p.offloads[0].release_before, 3u);  // the first launch the copy is done by
  EXPECT_EQ(p.offloads[0].fetch_after, 3u);     // the latest that still hides the fetch
  EXPECT_EQ(p.predicted_stall_s, 0.0);
  EXPECT_EQ(p.added_compute_s, 0.0);
  EXPECT_EQ(p.offloaded_bytes, big);
  EXPECT_EQ(p.predicted_time_s, 15.0);
  EXPECT_LE(p.predicted_peak, without_a);
  // Recompute only: the 10 s producer runs again.
  const plan r = make_planner(GetParam())->make_plan(s.it, without_a, with(offload_mode::off, fast));
  EXPECT_TRUE(r.offloads.empty());
  ASSERT_EQ(r.evictions.size(), 1u);
  EXPECT_EQ(r.added_compute_s, 10.0);
  EXPECT_EQ(r.predicted_time_s, 25.0);
}

TEST_P(OffloadPlanners, SlowLinkLosesToRecompute) {
  const scenario s = make_scenario();
  const plan p = make_planner(GetParam())->make_plan(s.it, without_a, with(offload_mode::on, slow));
  EXPECT_TRUE(p.offloads.empty());
  EXPECT_EQ(p.evictions.size(), 1u);
  EXPECT_EQ(p.added_compute_s, 10.0);
}

TEST_P(OffloadPlanners, OnlyNeverRecomputesEvenWhenItStalls) {
  const scenario s = make_scenario();
  const plan p = make_planner(GetParam())->make_plan(s.it, without_a, with(offload_mode::only, slow));
  EXPECT_TRUE(p.evictions.empty());
  EXPECT_EQ(p.recomputed_launches, 0u);
  ASSERT_EQ(p.offloads.size(), 1u);
  EXPECT_GT(p.predicted_stall_s, 0.0);
  const simulation r = simulate(s.it, p, slow);
  ASSERT_TRUE(r.fits(without_a)) << r.error;
  EXPECT_EQ(r.predicted_stall_s, p.predicted_stall_s);
}

// `only` covers the peaks with offloads alone from nothing, launch by launch; where that
// finds no plan, again with each offload chosen or widened at a peak
// out over the whole run of launches over the budget around it (Note [Offload search]).
// A ResNet-like graph at a deep budget, over 300 launches over it: launch by launch finds
// no plan, the second cover does.
TEST(OffloadOnly, WhereLaunchByLaunchFindsNoPlanEachOffloadCoversTheRunAtOnce) {
  const std::size_t q = std::size_t{1} << 20;
  const iteration it = synthetic::build(synthetic::resnet(24, q, q));
  const std::size_t budget = test::budget_at(it, 1, 10);
  const std::vector<std::size_t> during = simulator(it).timeline(plan{});
  const auto over = static_cast<std::size_t>(std::count_if(during.begin(), during.end(), [&](std::size_t d) { return d > budget; }));
  ASSERT_GT(over, 300u);
  offload_settings off;
  off.mode = offload_mode::only;
  off.link = link_at(static_cast<double>(q) / 1e-3);  // a copy takes one launch
  planner::context ctx(it, true, true, off);
  const auto found = solve_offload(ctx, budget, false);
  ASSERT_TRUE(found.has_value());
  EXPECT_LE(found->sim.peak, budget);
  EXPECT_TRUE(found->result.evictions.empty());
  EXPECT_FALSE(found->result.offloads.empty());
}

TEST_P(OffloadPlanners, HostBudgetTooSmallRecomputesOrSaysWhy) {
  const scenario s = make_scenario();
  const plan p = make_planner(GetParam())->make_plan(s.it, without_a, with(offload_mode::on, fast, 4096));
  EXPECT_TRUE(p.offloads.empty());
  EXPECT_EQ(p.evictions.size(), 1u);
  try {
    (void)make_planner(GetParam())->make_plan(s.it, without_a, with(offload_mode::only, fast, 4096));
    ADD_FAILURE() << "expected infeasible_budget";
  } catch (const infeasible_budget& e) {
    EXPECT_EQ(e.smallest_feasible(), unplanned_peak);
    EXPECT_THAT(std::string(e.what()), HasSubstr("offload only (no recompute), offloads limited to a host budget"));
  }
  // Room for a: offloads again.
  const plan q = make_planner(GetParam())->make_plan(s.it, without_a, with(offload_mode::only, fast, big));
  EXPECT_EQ(q.offloads.size(), 1u);
  EXPECT_EQ(q.host_bytes, big);
}

INSTANTIATE_TEST_SUITE_P(Offloading, OffloadPlanners, ::testing::Values("greedy", "reforward"));

TEST(OffloadPlannerOptions, OnlyWithAPlannerThatDoesNotOffloadNamesThoseThatDo) {
  const scenario s = make_scenario();
  EXPECT_EQ(offloading_planner_list(), "reforward, greedy");
  try {
    (void)make_planner("chain")->make_plan(s.it, without_a, with(offload_mode::only, fast));
    ADD_FAILURE() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("'chain' does not offload"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("reforward, greedy"));
  }
  // auto with such a planner plans recompute only.
  const plan p = make_planner("chain")->make_plan(s.it, without_a, with(offload_mode::on, fast));
  EXPECT_TRUE(p.offloads.empty());
}

TEST(OffloadPlannerOptions, OnlyWithoutALinkIsRefused) {
  const scenario s = make_scenario();
  try {
    (void)make_planner("greedy")->make_plan(s.it, without_a, with(offload_mode::only, link_model{}));
    ADD_FAILURE() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("bandwidth in both directions"));
  }
  const plan p = make_planner("greedy")->make_plan(s.it, without_a, with(offload_mode::on, link_model{}));
  EXPECT_TRUE(p.offloads.empty());
}

// ---- floor and oracle ------------------------------------------------------------------

recompute_floor floor_with(const iteration& it, std::size_t budget, const link_model& link, std::size_t host = 0) {
  recompute_floor_options o;
  o.link = link;
  o.host_budget = host;
  return find_recompute_floor(it, budget, o);
}

// The action oracle's optimum over at most 8 candidates, which must exist.
oracle::action_oracle_result optimum(const iteration& it, std::size_t budget, const link_model& link) {
  oracle::action_oracle_result best = oracle::solve_actions(it, budget, {link, 0, true, 8});
  EXPECT_EQ(best.outcome, oracle::action_oracle_result::status::optimal);
  return best;
}

TEST(OffloadFloor, HiddenCopiesLowerTheFloorToZero) {
  const scenario s = make_scenario();
  EXPECT_EQ(find_recompute_floor(s.it, without_a).added_s, 10.0);  // recompute only
  const recompute_floor f = floor_with(s.it, without_a, fast);
  EXPECT_TRUE(f.feasible);
  EXPECT_EQ(f.added_s, 0.0);
  // A link too slow to hide 64 KiB in the 1 s between a's last use and L3, or in the 1 s
  // between L3 and a's next use: recompute is cheaper.
  EXPECT_EQ(floor_with(s.it, without_a, slow).added_s, 10.0);
  // No host memory for a: recompute only.
  EXPECT_EQ(floor_with(s.it, without_a, fast, 4096).added_s, 10.0);
}

TEST(OffloadFloor, LinkTermBoundsTheStallsOfTheBestPlan) {
  // a's producer costs 100 s: recompute is dearer than any wait for the link.
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  const buffer_id a = h.transient(big, 0, 4);
  const buffer_id c = h.transient(big, 2, 3);
  h.launch({P}, {a}, 1.0);
  h.launch({a}, {}, 1.0);
  h.launch({P}, {c}, 1.0);
  h.launch({a}, {}, 1.0);
  iteration it = h.finish(2);
  const std::size_t budget = 512 + big;
  EXPECT_EQ(find_recompute_floor(it, budget).added_s, 1.0);
  it.launches[0].cost_s = 100.0;
  EXPECT_EQ(find_recompute_floor(it, budget).added_s, 100.0);
  // 64 KiB at 16 KiB/s: 4 s each way. The copy to host cannot start before L1 ends, right
  // before L2, and the copy back must be done when L3 starts, right after L2: 4 s of
  // stalls on each side (Note [Offload floor]).
  const recompute_floor f = floor_with(it, budget, link_at(big / 4.0));
  EXPECT_TRUE(f.feasible);
  EXPECT_EQ(f.added_s, 8.0);
  // The best plan: a copied out after L1 (101..105), so L2 waits 4 s to release it, and
  // fetched after L2 (106..110), so L3 waits 4 s: 8 s, below the 100 s recompute.
  const oracle::action_oracle_result best =
      oracle::solve_actions(it, budget, oracle::action_oracle_options{link_at(big / 4.0), 0, true, 8});
  ASSERT_EQ(best.outcome, oracle::action_oracle_result::status::optimal);
  EXPECT_EQ(best.added_time_s, 8.0);
  EXPECT_EQ(best.best.offloads.size(), 1u);
  const plan p = make_planner("greedy")->make_plan(it, budget, with(offload_mode::on, link_at(big / 4.0)));
  EXPECT_EQ(p.added_compute_s + p.predicted_stall_s, 8.0);
  EXPECT_EQ(p.predicted_time_s, 103.0 + 8.0);
}

TEST(OffloadFloor, EachCopyHasItsOwnWindowAndLatency) {
  // a is ready 110 s before L3 (its last use, L0, ends then), b right before it (L2 reads
  // it); both are next used by L4, right after L3. One of them must be out during L3.
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  const buffer_id a = h.transient(big, 0, 5);
  const buffer_id b = h.transient(big, 1, 5);
  const buffer_id c = h.transient(big, 3, 4);
  h.launch({P}, {a}, 100.0);
  h.launch({P}, {b}, 100.0);
  h.launch({b}, {}, 10.0);
  h.launch({P}, {c}, 1.0);
  h.launch({a, b}, {}, 1.0);
  const iteration it = h.finish(3);
  const std::size_t budget = 512 + 2 * big;
  EXPECT_EQ(find_recompute_floor(it, budget).added_s, 100.0);  // recompute only
  link_model link = link_at(big / 4.0);
  link.to_host.latency_s = link.to_device.latency_s = 1.0;  // 5 s per copy
  // a goes out in its 110 s window; coming back, no buffer has any slack: 4 s + 1 s of
  // latency. Bytes against the whole iteration's time, without latency, gave 3 s.
  const recompute_floor f = floor_with(it, budget, link);
  EXPECT_TRUE(f.feasible);
  EXPECT_EQ(f.at, 3u);
  EXPECT_EQ(f.added_s, 5.0);
  const oracle::action_oracle_result best = optimum(it, budget, link);
  EXPECT_EQ(best.added_time_s, 5.0);
  ASSERT_EQ(best.best.offloads.size(), 1u);
  EXPECT_EQ(best.best.offloads[0].target, a);
  const plan p = make_planner("greedy")->make_plan(it, budget, with(offload_mode::on, link));
  EXPECT_EQ(p.added_compute_s + p.predicted_stall_s, 5.0);
}

TEST(OffloadFloor, StallsBeforeThePeakAddToTheRecomputeAfterIt) {
  // a (its writer costs 100 s) and b (3 s) are both read by L2, right before the peak L3,
  // where both must be out. a is next used after a 20 s launch, b right after L3.
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  const buffer_id a = h.transient(big, 0, 7);
  const buffer_id b = h.transient(big, 1, 5);
  const buffer_id c = h.transient(2 * big, 3, 4);
  h.launch({P}, {a}, 100.0);
  h.launch({P}, {b}, 3.0);
  h.launch({a, b}, {}, 1.0);
  h.launch({P}, {c}, 1.0);
  h.launch({b}, {}, 1.0);
  h.launch({P}, {}, 20.0);
  h.launch({a}, {}, 1.0);
  const iteration it = h.finish(3);
  const std::size_t budget = 512 + 2 * big;
  EXPECT_EQ(find_recompute_floor(it, budget).added_s, 103.0);  // recompute only
  // 4 s per copy. Best: a copied out after L2, so L3 waits 4 s for its release, and b
  // recomputed before L4 (3 s), while a comes back during L5. The copy's wait comes
  // before L3 and the recompute after it, so they add up: 7 s, not the larger, 4 s.
  const link_model link = link_at(big / 4.0);
  const recompute_floor f = floor_with(it, budget, link);
  EXPECT_TRUE(f.feasible);
  EXPECT_EQ(f.at, 3u);
  EXPECT_EQ(f.added_s, 7.0);
  const oracle::action_oracle_result best = optimum(it, budget, link);
  EXPECT_EQ(best.added_time_s, 7.0);
  ASSERT_EQ(best.best.offloads.size(), 1u);
  EXPECT_EQ(best.best.offloads[0].target, a);
  const plan p = make_planner("reforward")->make_plan(it, budget, with(offload_mode::on, link));
  EXPECT_EQ(p.added_compute_s + p.predicted_stall_s, 7.0);
}

TEST(OffloadFloor, ASmallBufferDoesNotMakeTheOtherCopiesCheap) {
  // a (its writer costs 100 s) and t (4 bytes, whole 512-byte units of the floor's least
  // footprint) are both read by L2 and L4; at the peak L3 a's bytes must be out. Its copy
  // takes 4 s each way with no slack on either side, so the best plan adds 8 s. Pricing
  // every copy at the least size per footprint of any buffer (t's, 1/128) bounded it at
  // 0.06 s; each edge's own fractional knapsack of sizes gives 7.88 s (t's footprint taken
  // at its 4 bytes, and recomputed too: the floor does not keep the two sets apart).
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  const buffer_id a = h.transient(big, 0, 5);
  const buffer_id t = h.transient(4, 1, 5);
  const buffer_id c = h.transient(big, 3, 4);
  h.launch({P}, {a}, 100.0);
  h.launch({P}, {t}, 1.0);
  h.launch({a, t}, {}, 1.0);
  h.launch({P}, {c}, 1.0);
  h.launch({a, t}, {}, 1.0);
  const iteration it = h.finish(3);
  const std::size_t budget = 512 + big + 512;
  const link_model link = link_at(big / 4.0);
  const recompute_floor f = floor_with(it, budget, link);
  ASSERT_TRUE(f.feasible);
  EXPECT_EQ(f.at, 3u);
  EXPECT_GT(f.added_s, 7.8);
  const oracle::action_oracle_result best = optimum(it, budget, link);
  EXPECT_EQ(best.added_time_s, 8.0);
  EXPECT_LE(f.added_s, best.added_time_s);
}

TEST(OffloadFloor, ALinkThatCannotHelpLeavesTheRecomputeFloor) {
  // 128 buffers of one page, each written by a 1 s launch, all out at the peak L128 and
  // read one by one after it; a copy takes 1,000 s. With the knapsack in 32 units each
  // buffer is a quarter of one, and the knapsack alone (what the offload floor took)
  // bounds the recompute at 32 s; in exact bytes it is 128 s. Plans that may offload
  // recompute more than 31 units whatever they offload: at least 124 s.
  constexpr std::size_t n = 128;
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(512);
  std::vector<buffer_id> bs;
  for (std::size_t i = 0; i < n; ++i) bs.push_back(h.transient(g, static_cast<launch_id>(i), static_cast<launch_id>(n + 2 + i)));
  const buffer_id c = h.transient(g, n, n + 1);
  for (std::size_t i = 0; i < n; ++i) h.launch({P}, {bs[i]}, 1.0);
  h.launch({P}, {c}, 1.0);
  for (std::size_t i = 0; i < n; ++i) h.launch({bs[i]}, {}, 1.0);
  const iteration it = h.finish(static_cast<launch_id>(n));
  const std::size_t budget = 512 + g;
  recompute_floor_options o;
  o.units = 32;
  const recompute_floor recompute = find_recompute_floor(it, budget, o);
  ASSERT_TRUE(recompute.feasible);
  EXPECT_EQ(recompute.at, n);
  EXPECT_DOUBLE_EQ(recompute.added_s, 128.0);
  o.link = link_at(g / 1000.0);
  const recompute_floor f = find_recompute_floor(it, budget, o);
  ASSERT_TRUE(f.feasible);
  EXPECT_GE(f.added_s, 124.0 - 1e-9);
  EXPECT_LE(f.added_s, recompute.added_s);
  const plan p = make_planner("reforward")->make_plan(it, budget, with(offload_mode::on, o.link));
  EXPECT_LE(f.added_s, p.added_compute_s + p.predicted_stall_s);
}

// No offloading planner's plan adds less time than the floor.
void expect_no_plan_below(const iteration& it, std::size_t budget, const link_model& link, double floor_s) {
  for (const char* name : {"greedy", "reforward"}) {
    try {
      const plan p = make_planner(name)->make_plan(it, budget, with(offload_mode::on, link));
      EXPECT_LE(floor_s, p.added_compute_s + p.predicted_stall_s + 1e-12) << name;
    } catch (const infeasible_budget&) {
    }
  }
}

TEST(OffloadOracle, FloorBoundsTheOracleAndTheOracleBeatsRecomputeOnly) {
  std::size_t checked = 0, lower = 0;
  for (std::uint64_t seed = 0; seed < 12; ++seed) {
    const iteration it = test::page_dag(seed, 6 + seed % 3);
    const link_model link = link_at(64.0 * 1024 / (1e-4 * static_cast<double>(1 + seed % 5) * 3));
    for (std::size_t budget : test::budgets_for(it, 4)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const oracle::action_oracle_result best = oracle::solve_actions(it, budget, {link, 0, true, 8});
      if (best.outcome == oracle::action_oracle_result::status::too_large) continue;
      const recompute_floor f = floor_with(it, budget, link);
      const test::reference recompute = test::brute_force(it, budget);
      if (best.outcome == oracle::action_oracle_result::status::infeasible) {
        EXPECT_FALSE(recompute.feasible());
        continue;
      }
      ++checked;
      const simulation r = simulate(it, best.best, link);
      ASSERT_TRUE(r.fits(budget)) << r.error;
      EXPECT_EQ(r.added_time_s(), best.added_time_s);
      EXPECT_TRUE(f.feasible);
      EXPECT_LE(f.added_s, best.added_time_s + 1e-12);
      if (recompute.feasible()) {
        EXPECT_LE(best.added_time_s, recompute.cost + 1e-12);
        lower += best.added_time_s < recompute.cost - 1e-12 ? 1 : 0;
      }
      expect_no_plan_below(it, budget, link, f.added_s);
    }
  }
  EXPECT_GT(checked, 10u);
  EXPECT_GT(lower, 0u);  // offload beats recompute somewhere
}

TEST(OffloadOracle, FloorBoundsTheOracleWithBuffersOfAnySize) {
  // As above, with half the transient buffers cut to a size of at most their page, drawn
  // log-uniformly: many far below their least footprint, where the floor's link bound
  // takes each edge's knapsack of sizes (Note [Offload floor]).
  std::size_t checked = 0, small = 0, positive = 0;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    iteration it = test::page_dag(seed, 6 + seed % 3);
    std::mt19937_64 rng(seed);
    for (buffer& b : it.buffers) {
      if (b.persistent() || (rng() & 1) == 0) continue;
      const double top = std::log2(static_cast<double>(std::min<std::size_t>(b.size, 64 * 1024)));
      b.size = static_cast<std::size_t>(std::exp2(std::uniform_real_distribution<double>(0.0, top)(rng)));
      small += b.size < 4096 ? 1 : 0;
    }
    const link_model link = test::random_page_link(rng, 2e-4, 3e-3);
    for (std::size_t budget : test::budgets_for(it, 4)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget));
      const oracle::action_oracle_result best = oracle::solve_actions(it, budget, {link, 0, true, 8});
      if (best.outcome != oracle::action_oracle_result::status::optimal) continue;
      ++checked;
      const recompute_floor f = floor_with(it, budget, link);
      EXPECT_TRUE(f.feasible);
      EXPECT_LE(f.added_s, best.added_time_s + 1e-12);
      positive += f.added_s > 0.0 ? 1 : 0;
      expect_no_plan_below(it, budget, link, f.added_s);
    }
  }
  EXPECT_GT(checked, 10u);
  EXPECT_GT(small, 10u);
  EXPECT_GT(positive, 0u);
}

// ---- randomised -----------------------------------------------------------------------

bool same_evictions(const plan& x, const plan& y) {
  if (x.evictions.size() != y.evictions.size() || x.retentions.size() != y.retentions.size()) return false;
  for (std::size_t i = 0; i < x.evictions.size(); ++i) {
    const eviction& a = x.evictions[i];
    const eviction& b = y.evictions[i];
    if (a.target != b.target || a.evict_after != b.evict_after || a.restore_before != b.restore_before ||
        a.recipe != b.recipe || a.temporaries != b.temporaries || a.also_regenerates != b.also_regenerates)
      return false;
  }
  return x.predicted_peak == y.predicted_peak && x.added_compute_s == y.added_compute_s;
}

TEST(OffloadRandomised, EveryPlanValidatesAndFitsAndOnMeetsWhatOffAndOnlyMeet) {
  std::mt19937_64 rng(48);
  std::size_t offloading = 0, mixed = 0;  // plans that offload; that also recompute
  std::size_t cheaper_than_only = 0;      // budgets where on adds less time than only
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    const std::size_t quantum = 64 * 1024;
    const iteration it = test::page_dag(seed, 8 + seed % 5);
    // Copies of one quantum take from a tenth of a launch's cost to ten launches' worth.
    const link_model link = test::random_page_link(rng, 1e-5, 2e-2);
    const std::size_t host_budget = (seed % 3 == 0) ? quantum * (1 + seed % 4) : 0;
    for (std::size_t budget : test::budgets_for(it, 5)) {
      for (const char* name : {"greedy", "reforward"}) {
        SCOPED_TRACE(std::string(name) + " seed " + std::to_string(seed) + " budget " + std::to_string(budget));
        const auto planner = make_planner(name);
        std::optional<plan> off;
        try {
          off = planner->make_plan(it, budget);
          // Off with a link given: the same plan as without one.
          const plan again = planner->make_plan(it, budget, with(offload_mode::off, link, host_budget));
          EXPECT_TRUE(same_evictions(*off, again));
          EXPECT_TRUE(again.offloads.empty());
        } catch (const infeasible_budget&) {
        }
        bool met_on = false, met_only = false;
        double on_s = 0.0, only_s = 0.0;  // added time (compute + stalls)
        for (offload_mode mode : {offload_mode::on, offload_mode::only}) {
          try {
            const plan p = planner->make_plan(it, budget, with(mode, link, host_budget));
            const simulation r = simulate(it, p, link, host_budget);
            ASSERT_TRUE(r.valid) << r.error;
            EXPECT_LE(r.peak, budget);
            EXPECT_EQ(r.peak, p.predicted_peak);
            EXPECT_EQ(r.predicted_stall_s, p.predicted_stall_s);
            if (host_budget != 0) {
              EXPECT_LE(p.host_bytes, host_budget);
            }
            (mode == offload_mode::on ? met_on : met_only) = true;
            (mode == offload_mode::on ? on_s : only_s) = p.added_compute_s + p.predicted_stall_s;
            offloading += p.offloads.empty() ? 0 : 1;
            mixed += !p.offloads.empty() && !p.evictions.empty() ? 1 : 0;
            if (mode == offload_mode::only) {
              EXPECT_TRUE(p.evictions.empty());
            }
            // Choosing never adds more time than recompute alone.
            if (mode == offload_mode::on && off) {
              EXPECT_LE(p.added_compute_s + p.predicted_stall_s, off->added_compute_s * (1 + 1e-9) + 1e-12);
            }
          } catch (const infeasible_budget& e) {
            // Recompute meets every budget it met without offload.
            if (mode == offload_mode::on) {
              EXPECT_FALSE(off.has_value()) << e.what();
            }
          }
        }
        // And every budget offloading alone meets, for no more added time
        // (solve_offload_then_recompute starts from that plan).
        if (met_only) {
          EXPECT_TRUE(met_on);
          EXPECT_LE(on_s, only_s * (1 + 1e-9) + 1e-12);
          cheaper_than_only += on_s < only_s * (1 - 1e-9) ? 1 : 0;
        }
      }
    }
  }
  // The check exercises the new action, alone and beside recompute.
  EXPECT_GT(offloading, 0u);
  EXPECT_GT(mixed, 0u);
  EXPECT_GT(cheaper_than_only, 0u);
  std::printf("%zu plans offload, %zu of them also recompute; on adds less than only at %zu budgets\n", offloading,
              mixed, cheaper_than_only);
}

// reforward's offload search also starts from greedy's recompute plans, and its recompute
// search includes greedy's: at every budget greedy meets, with offload off or on,
// reforward meets it too and adds no more time (Note [Offload search]).
TEST(OffloadRandomised, ReforwardNeverAddsMoreTimeThanGreedy) {
  std::mt19937_64 rng(1001);
  std::size_t compared = 0, less = 0;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    const iteration it = test::page_dag(seed + 20, 8 + seed % 5);
    const link_model link = test::random_page_link(rng, 1e-5, 2e-2);
    for (std::size_t budget : test::budgets_for(it, 5)) {
      for (offload_mode mode : {offload_mode::off, offload_mode::on}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " budget " + std::to_string(budget) +
                     (mode == offload_mode::on ? " on" : " off"));
        std::optional<plan> greedy;
        try {
          greedy = make_planner("greedy")->make_plan(it, budget, with(mode, link));
        } catch (const infeasible_budget&) {
          continue;
        }
        const plan reforward = make_planner("reforward")->make_plan(it, budget, with(mode, link));
        const double by_greedy = greedy->added_compute_s + greedy->predicted_stall_s;
        const double by_reforward = reforward.added_compute_s + reforward.predicted_stall_s;
        EXPECT_LE(by_reforward, by_greedy * (1 + 1e-9) + 1e-12);
        ++compared;
        less += by_reforward < by_greedy * (1 - 1e-9) ? 1 : 0;
      }
    }
  }
  EXPECT_GT(compared, 40u);
  std::printf("%zu budgets compared; reforward adds less than greedy at %zu\n", compared, less);
}

// ResNet-like with 200 blocks: 801 candidates, more than the improvement pass can try one
// at a time, and a deep cut where the recompute-only plan is the best start. Copies of one
// activation take a launch's time, so the link carries part of what recompute would; the
// batched switch of Note [Offload search] takes most of the drops there (without it the
// plan adds half of recompute-only's time, with it a fifth).
TEST(OffloadLargeGraph, BatchesReachTheDropsTheOneAtATimePassCannot) {
  const std::size_t q = std::size_t{1} << 20;
  const iteration it = synthetic::build(synthetic::resnet(200, q, q));
  const link_model link = link_at(static_cast<double>(q) / 1e-3);
  const std::size_t budget = test::budget_at(it, 1, 20);
  const auto planner = make_planner("reforward");
  const plan off = planner->make_plan(it, budget, with(offload_mode::off, link));
  const plan on = planner->make_plan(it, budget, with(offload_mode::on, link));
  const simulation r = simulate(it, on, link);
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_LE(r.peak, budget);
  EXPECT_GT(off.added_compute_s, 0.0);
  EXPECT_GT(on.offloads.size(), 300u);
  EXPECT_LT(on.added_compute_s + on.predicted_stall_s, off.added_compute_s / 3);
}

}  // namespace
}  // namespace sublinear::policy
