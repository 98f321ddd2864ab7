// The copies to host of a finished plan put in deadline order (Note [Copies out by
// deadline] in policy/offload_placement.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t g = 4096;
constexpr std::size_t big = 65536;

// test::make_three_out: launches take 1 s (L_i ends at i + 1), a copy 2 s. z's copy
// holds the link over 1..3; a (last used by L1) and b (by L2) wait for it, and b is
// needed out first.
using test::three_out;

three_out make_three_out() { return test::make_three_out(g, big); }

// z released before L3, b before L5, a before L7; fetched after L7 (b), L9 (a) and L11 (z).
plan three_offloads(const three_out& s) {
  plan p;
  p.offloads.push_back(test::offload_entry(s.z, 0, 3, 11, 15));
  p.offloads.push_back(test::offload_entry(s.a, 1, 7, 9, 12));
  p.offloads.push_back(test::offload_entry(s.b, 2, 5, 7, 10));
  return p;
}

const link_model two_seconds = test::link_at(big / 2.0);

// In order of last use the link carries z 1..3, a 3..5, b 5..7, and L5 waits 2 s for b.
// By deadline it carries z, b 3..5, a 5..7: a is queued after L2 with b, behind it, and
// nothing waits.
TEST(CopiesOutByDeadline, CopiesToHostRunByDeadlineWithNoOtherChange) {
  const three_out s = make_three_out();
  const plan fifo = three_offloads(s);
  const simulation before = simulate(s.it, fifo, two_seconds);
  ASSERT_TRUE(before.valid) << before.error;
  EXPECT_DOUBLE_EQ(before.predicted_stall_s, 2.0);

  plan ordered = fifo;
  const std::vector<launch_id> last_use{0, 1, 2};
  order_copies_out(s.it, two_seconds, ordered, last_use);
  EXPECT_EQ(ordered.offloads[0].evict_after, 0u);
  EXPECT_EQ(ordered.offloads[1].evict_after, 2u);
  EXPECT_EQ(ordered.offloads[2].evict_after, 2u);
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(ordered.offloads[j].release_before, fifo.offloads[j].release_before);
    EXPECT_EQ(ordered.offloads[j].fetch_after, fifo.offloads[j].fetch_after);
    EXPECT_EQ(ordered.offloads[j].restore_before, fifo.offloads[j].restore_before);
  }
  const simulation after = simulate(s.it, ordered, two_seconds);
  ASSERT_TRUE(after.valid) << after.error;
  EXPECT_DOUBLE_EQ(after.predicted_stall_s, 0.0);
  EXPECT_EQ(after.peak, before.peak);
  EXPECT_DOUBLE_EQ(after.copies[2].to_host_start, 3.0);
  EXPECT_DOUBLE_EQ(after.copies[1].to_host_start, 5.0);
  EXPECT_LE(after.host_bytes, before.host_bytes);

  // Already in deadline order: nothing moves.
  plan again = ordered;
  order_copies_out(s.it, two_seconds, again, last_use);
  for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(again.offloads[j].evict_after, ordered.offloads[j].evict_after);
}

// A copy that is alone on the link when its buffer is last used starts then, whatever its
// deadline: the schedule never leaves the link idle to wait for a copy due sooner.
TEST(CopiesOutByDeadline, AnIdleLinkTakesTheCopyReadyNow) {
  const three_out s = make_three_out();
  plan p;
  p.offloads.push_back(test::offload_entry(s.a, 1, 7, 9, 12));
  p.offloads.push_back(test::offload_entry(s.b, 2, 5, 7, 10));
  const std::vector<launch_id> last_use{1, 2};
  order_copies_out(s.it, two_seconds, p, last_use);
  EXPECT_EQ(p.offloads[0].evict_after, 1u);
  EXPECT_EQ(p.offloads[1].evict_after, 2u);
}

// Through a planner's context: the ordered plan replaces the evaluation's where it fits
// the budget for less added time, and not where the evaluation does not fit.
TEST(CopiesOutByDeadline, TheOrderedPlanIsKeptWhereItAddsLessTime) {
  const three_out s = make_three_out();
  offload_settings off;
  off.mode = offload_mode::on;
  off.link = two_seconds;
  planner::context ctx(s.it, true, true, off);
  for (buffer_id x : {s.z, s.a, s.b}) ASSERT_NE(ctx.candidates().index_of(x), none);
  planner::context::evaluation e;
  e.ok = true;
  e.result = three_offloads(s);
  e.sim = ctx.sim().run(e.result);
  ASSERT_TRUE(e.sim.valid) << e.sim.error;
  const std::size_t budget = e.sim.peak;

  planner::context::evaluation over = e;
  order_copies_out_if_better(ctx, budget - 1, over);
  EXPECT_EQ(over.result.offloads[1].evict_after, 1u);
  EXPECT_DOUBLE_EQ(over.sim.predicted_stall_s, 2.0);

  order_copies_out_if_better(ctx, budget, e);
  EXPECT_EQ(e.result.offloads[1].evict_after, 2u);
  EXPECT_DOUBLE_EQ(e.sim.predicted_stall_s, 0.0);
  EXPECT_DOUBLE_EQ(e.result.predicted_stall_s, 0.0);
  EXPECT_LE(e.sim.peak, budget);
}

}  // namespace
}  // namespace sublinear::policy
