// The windows of a plan's offloads: once the search has its plan, each offload is asked to
// be out only where the plan without it is over the budget (Note [Tight windows] in
// policy/solver_offload.cpp).
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

// L0 P -> a (cost 100) | L1 | L2 P -> c | L3..L9 read c | L10 | L11 reads a. Launches take
// 1 s, a copy of a 3 s. Within P + a + c - 1, a must be out while c lives (L2..L9).
// Returns the iteration; `a` is set to a's id.
iteration late_need(buffer_id& a) {
  test::hand_iteration h(g);
  const buffer_id P = h.persistent(1000);
  a = h.transient(big, 0, 12);
  const buffer_id c = h.transient(big, 2, 10);
  h.launch({P}, {a}, 100.0);
  h.launch({P}, {});
  h.launch({P}, {c});
  for (int i = 3; i <= 9; ++i) h.launch({c}, {});
  h.launch({P}, {});
  h.launch({a}, {});
  return h.finish(6);
}

constexpr std::size_t budget = 1024 + 2 * big - 1;

// From the recompute plan that drops a, the pass that tries each action finds the offload
// over a's whole gap (released before L1, fetched after L10): it fits, and its 6 s of
// stalls cost less than the recipe's 100 s. Asked to be out only over L2..L9, the copy to
// host waits 2 s at L2 instead of 3 at L1, and the copy back 2 s at L11 instead of 3.
TEST(OffloadWindows, EachOffloadIsOutOnlyWhereThePlanWithoutItIsOverTheBudget) {
  buffer_id a = none;
  const iteration it = late_need(a);
  offload_settings off;
  off.mode = offload_mode::on;
  off.link = test::link_at(big / 3.0);
  planner::context ctx(it, true, true, off);
  std::vector<std::uint8_t> dropped(ctx.candidates().size(), 0);
  const std::uint32_t ca = ctx.candidates().index_of(a);
  ASSERT_NE(ca, none);
  dropped[ca] = 1;
  const auto seed = ctx.evaluate(dropped);
  ASSERT_TRUE(seed.fits(budget)) << seed.error;
  ASSERT_DOUBLE_EQ(seed.sim.added_compute_s, 100.0);

  const auto found = solve_offload(ctx, budget, true, &seed);
  ASSERT_TRUE(found.has_value());
  EXPECT_LE(found->sim.peak, budget);
  ASSERT_EQ(found->result.offloads.size(), 1u);
  const offload& o = found->result.offloads[0];
  EXPECT_EQ(o.target, a);
  EXPECT_EQ(o.release_before, 2u);
  EXPECT_EQ(o.fetch_after, 9u);
  EXPECT_DOUBLE_EQ(found->sim.added_compute_s, 0.0);
  EXPECT_NEAR(found->sim.predicted_stall_s, 4.0, 1e-9);
}

// What a planner makes of it: `greedy` with offload on adds the 4 s of stalls, not the
// recipe's 100 s or the whole gap's 6 s. (Its start from nothing asks for L2..L9 at once,
// so this one holds without the pass too.)
TEST(OffloadWindows, GreedyWithOffloadPlansTheTightWindow) {
  buffer_id a = none;
  const iteration it = late_need(a);
  planner::options o;
  o.offload = offload_mode::on;
  o.link = test::link_at(big / 3.0);
  const plan p = make_planner("greedy")->make_plan(it, budget, o);
  ASSERT_EQ(p.offloads.size(), 1u);
  EXPECT_EQ(p.offloads[0].target, a);
  EXPECT_EQ(p.offloads[0].release_before, 2u);
  EXPECT_EQ(p.offloads[0].fetch_after, 9u);
  EXPECT_NEAR(p.added_compute_s + p.predicted_stall_s, 4.0, 1e-9);
}

}  // namespace
}  // namespace sublinear::policy
