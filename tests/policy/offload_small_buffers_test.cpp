// Buffers of less than half a page in the offload search (Note [Offload search]): an
// offloaded buffer holds whole pages while resident, so the greedy cover does not offload
// them; the passes that keep only what the simulated plan gains still may.
#include <gtest/gtest.h>

#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

offload_settings hidden_copies(std::size_t bytes) {
  offload_settings off;
  off.mode = offload_mode::on;
  off.link = test::link_at(static_cast<double>(bytes) / 1e-4);  // a copy takes a tenth of a launch
  off.threads = 1;
  return off;
}

// Activations of an eighth of a page, copies the gaps hide: covering the peak with
// offloads alone would put each on a page of its own for the rest of its life (eight
// times its bytes) and raise the peak elsewhere, round after round. The cover stops at
// once instead, and the plan recomputes.
TEST(OffloadSmallBuffers, TheOffloadOnlyCoverLeavesThemAndStopsAtOnce) {
  const std::size_t page = std::size_t{1} << 20;
  const iteration it = synthetic::build(synthetic::chain(64, page / 8, page));
  planner::context ctx(it, true, true, hidden_copies(page / 8));
  const std::size_t budget = simulate(it, plan{}).peak / 2;
  const std::size_t before = ctx.evaluations();
  EXPECT_FALSE(solve_offload_then_recompute(ctx, budget, nullptr).has_value());
  // One evaluation for each of its two covers from nothing (Note [Offload search]).
  EXPECT_LE(ctx.evaluations() - before, 2u);
  // The planners meet the budget by recompute; none of their plans adds time over
  // the recompute-only plan.
  for (const char* name : {"greedy", "reforward"}) {
    SCOPED_TRACE(name);
    planner::options o;
    o.offload = offload_mode::on;
    o.link = hidden_copies(page / 8).link;
    const plan off = make_planner(name)->make_plan(it, budget);
    const plan on = make_planner(name)->make_plan(it, budget, o);
    EXPECT_LE(on.predicted_peak, budget);
    EXPECT_LE(on.added_compute_s + on.predicted_stall_s, off.added_compute_s);
  }
}

// The same chain with activations of a whole page: the cover offloads them, and offloads
// alone meet the budget.
TEST(OffloadSmallBuffers, BuffersOfWholePagesAreStillOffloadedByTheCover) {
  const std::size_t page = std::size_t{1} << 20;
  const iteration it = synthetic::build(synthetic::chain(64, page, page));
  planner::context ctx(it, true, true, hidden_copies(page));
  const std::size_t budget = simulate(it, plan{}).peak / 2;
  const auto found = solve_offload_then_recompute(ctx, budget, nullptr);
  ASSERT_TRUE(found.has_value());
  EXPECT_LE(found->sim.peak, budget);
  EXPECT_FALSE(found->result.offloads.empty());
}

}  // namespace
}  // namespace sublinear::policy
