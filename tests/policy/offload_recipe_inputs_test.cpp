// Offload beside recompute in one plan: a recipe's input sent to host memory comes back
// before the recipe runs (Note [Offloaded recipe inputs] in policy/offload_placement.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t g = 4096;
constexpr std::size_t big = 65536;

// L0 P -> x (cost 100) | L1 x -> y (cost 1) | L2 | L3 P -> c (twice x; the peak) | L4 |
// L5 | L6 reads y | L7 reads x. Recomputing y reads x; recomputing x costs 100. Within
// P + 2 x, both x and y must be out during L3.
struct chain {
  iteration it;
  buffer_id P, x, y, c;
};

chain make_chain() {
  test::hand_iteration h(g);
  chain s{};
  s.P = h.persistent(1000);
  s.x = h.transient(big, 0, 8);
  s.y = h.transient(big, 1, 7);
  s.c = h.transient(2 * big, 3, 4);
  h.launch({s.P}, {s.x}, 100.0);
  h.launch({s.x}, {s.y}, 1.0);
  h.launch({s.P}, {}, 1.0);
  h.launch({s.P}, {s.c}, 1.0);
  h.launch({s.P}, {}, 1.0);
  h.launch({s.P}, {}, 1.0);
  h.launch({s.y}, {}, 1.0);
  h.launch({s.x}, {}, 1.0);
  s.it = h.finish(3);
  return s;
}

const link_model fast = test::link_at(2.0 * big);  // 0.5 s per copy

// One request: `target` out after L1, restored before its own next use (L7).
std::vector<offload_request> offload_after_l1(buffer_id target) {
  std::vector<offload_request> requests(1);
  requests[0].target = target;
  requests[0].evict_after = 1;
  requests[0].restore_before = 7;
  return requests;
}

std::vector<offload_request> offload_x(const chain& s) { return offload_after_l1(s.x); }

eviction drop_y(const chain& s, launch_id restore_before) {
  eviction ev;
  ev.target = s.y;
  ev.evict_after = 1;
  ev.restore_before = restore_before;
  ev.recipe = {1};
  return ev;
}

TEST(OffloadRecipeInputs, AnInputComesBackBeforeTheRecipeThatReadsIt) {
  const chain s = make_chain();
  plan p;
  p.evictions.push_back(drop_y(s, 6));
  std::vector<offload_request> requests = offload_x(s);
  fetch_before_recipes(s.it, p, requests);
  EXPECT_EQ(requests[0].restore_before, 5u) << "the recipe restoring y runs before L6 and reads x";
  place_offloads(s.it, fast, p, requests);
  ASSERT_EQ(p.offloads.size(), 1u);
  EXPECT_LT(p.offloads[0].fetch_after, 5u);
  const simulation r = simulate(s.it, p, fast);
  ASSERT_TRUE(r.valid) << r.error;
  EXPECT_EQ(r.peak, 1024 + 2 * big) << "x and y are out while c is live, both back for L6";
  EXPECT_EQ(r.added_compute_s, 1.0);
  EXPECT_EQ(r.predicted_stall_s, 0.0);
}

TEST(OffloadRecipeInputs, WithoutTheMoveTheSimulatorRefusesThePlan) {
  const chain s = make_chain();
  plan p;
  p.evictions.push_back(drop_y(s, 6));
  std::vector<offload_request> requests = offload_x(s);
  place_offloads(s.it, fast, p, requests);
  const simulation r = simulate(s.it, p, fast);
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.error.find("offloaded"), std::string::npos) << r.error;
}

TEST(OffloadRecipeInputs, ARecipeRightAfterTheLastUseLeavesNoGap) {
  const chain s = make_chain();
  plan p;
  p.evictions.push_back(drop_y(s, 2));  // restored before L2: x would have to be back by L1
  std::vector<offload_request> requests = offload_x(s);
  fetch_before_recipes(s.it, p, requests);
  EXPECT_EQ(requests[0].restore_before, 7u) << "left as it was; the simulator refuses the plan";
}

// One host slot: the cheapest plan offloads x (recomputing it costs 100) and recomputes y
// from it (cost 1), which needs x back before y's recipe.
TEST(OffloadRecipeInputs, PlannersMixBothActionsOnOneChain) {
  const chain s = make_chain();
  planner::options o;
  o.offload = offload_mode::on;
  o.link = fast;
  o.host_budget = big;
  for (const char* name : {"greedy", "reforward"}) {
    SCOPED_TRACE(name);
    const plan p = make_planner(name)->make_plan(s.it, 1024 + 2 * big, o);
    const simulation r = simulate(s.it, p, fast, big);
    ASSERT_TRUE(r.valid) << r.error;
    EXPECT_LE(r.peak, 1024 + 2 * big);
    ASSERT_EQ(p.offloads.size(), 1u);
    EXPECT_EQ(p.offloads[0].target, s.x);
    const auto y =
        std::find_if(p.evictions.begin(), p.evictions.end(), [&](const eviction& e) { return e.target == s.y; });
    ASSERT_NE(y, p.evictions.end());
    EXPECT_LT(p.offloads[0].restore_before, y->restore_before);
    EXPECT_EQ(r.added_compute_s, 1.0);
    EXPECT_EQ(r.predicted_stall_s, 0.0);
  }
}

// L0 P -> x (and s, unless s is fresh) | L1 x, s -> y, s | L2 | L3 P -> c | L4 | L5 |
// L6 reads y | L7 reads x, s. y's recipe (L1) takes s as a temporary: with `fresh`, L1
// writes s first since its allocation, so the recipe needs none of its bytes; otherwise
// L1 updates it in place (as BatchNorm its running statistics) and the runtime starts
// the scratch from the live bytes (Note [Recipe scratch]).
struct side_output {
  iteration it;
  buffer_id s, y;
};

side_output make_side_output(bool fresh) {
  test::hand_iteration h(g);
  side_output o{};
  const buffer_id P = h.persistent(1000);
  const buffer_id x = h.transient(big, 0, 8);
  o.s = h.transient(big, fresh ? 1 : 0, 8);
  o.y = h.transient(big, 1, 7);
  const buffer_id c = h.transient(2 * big, 3, 4);
  if (fresh) {
    h.launch({P}, {x}, 100.0);
  } else {
    h.launch({P}, {x, o.s}, 100.0);
  }
  h.launch({x, o.s}, {o.y, o.s}, 1.0);
  h.launch({P}, {}, 1.0);
  h.launch({P}, {c}, 1.0);
  h.launch({P}, {}, 1.0);
  h.launch({P}, {}, 1.0);
  h.launch({o.y}, {}, 1.0);
  h.launch({x, o.s}, {}, 1.0);
  o.it = h.finish(3);
  return o;
}

plan drop_y_with_temporary(const side_output& o) {
  plan p;
  eviction ev;
  ev.target = o.y;
  ev.evict_after = 1;
  ev.restore_before = 6;
  ev.recipe = {1};
  ev.temporaries = {o.s};
  p.evictions.push_back(ev);
  return p;
}

std::vector<offload_request> offload_s(const side_output& o) { return offload_after_l1(o.s); }

// The seed plan with s offloaded by `requests`, placed and simulated.
simulation with_offloaded_s(const side_output& o, const plan& seed, std::vector<offload_request> requests) {
  plan p = seed;
  place_offloads(o.it, fast, p, requests);
  return simulate(o.it, p, fast);
}

TEST(OffloadRecipeInputs, ATemporaryTheRecipeReadsOnEntryComesBackBeforeIt) {
  const side_output o = make_side_output(false);
  ASSERT_TRUE(reads_on_entry(o.it, std::vector<launch_id>{1}, o.s));
  const plan seed = drop_y_with_temporary(o);
  ASSERT_TRUE(simulate(o.it, seed, fast).valid) << simulate(o.it, seed, fast).error;
  std::vector<offload_request> requests = offload_s(o);
  fetch_before_recipes(o.it, seed, requests);
  EXPECT_EQ(requests[0].restore_before, 5u) << "L1 reads s in place before writing it";
  const simulation moved = with_offloaded_s(o, seed, requests);
  EXPECT_TRUE(moved.valid) << moved.error;
  const simulation refused = with_offloaded_s(o, seed, offload_s(o));
  EXPECT_FALSE(refused.valid);
  EXPECT_THAT(refused.error, testing::HasSubstr("(a temporary) on entry, which is offloaded"));
}

TEST(OffloadRecipeInputs, ATemporaryTheRecipeWritesFirstStaysOut) {
  const side_output o = make_side_output(true);
  EXPECT_FALSE(reads_on_entry(o.it, std::vector<launch_id>{1}, o.s));
  const plan seed = drop_y_with_temporary(o);
  std::vector<offload_request> requests = offload_s(o);
  fetch_before_recipes(o.it, seed, requests);
  EXPECT_EQ(requests[0].restore_before, 7u) << "the recipe needs none of s's bytes";
  const simulation r = with_offloaded_s(o, seed, requests);
  EXPECT_TRUE(r.valid) << r.error;
}

// From a chain-solver plan at a larger budget, the search covers a smaller one: the
// peaks left are the seed's recipes regenerating their segments, where nothing idle is
// left to take out, so a dropped buffer restored there comes back by copy instead
// (Note [Offload search]). Without that step, every one of these searches finds nothing.
TEST(OffloadRecipeInputs, WhereRecipesAreThePeakTheirTargetsComeBackByCopy) {
  const std::size_t q = std::size_t{1} << 20;
  const iteration it = synthetic::build(synthetic::chain(32, q, q));
  offload_settings off;
  off.mode = offload_mode::on;
  off.link = test::link_at(static_cast<double>(q) / 1e-3);  // a copy takes one launch
  planner::context ctx(it, true, true, off);
  const auto seed = solve_chain(ctx, simulate(it, plan{}).peak * 3 / 10);
  ASSERT_TRUE(seed.has_value());
  std::size_t offloaded_recipe_targets = 0;
  for (const std::size_t percent : {90, 80, 70, 60}) {
    SCOPED_TRACE(percent);
    const std::size_t budget = seed->sim.peak * percent / 100;
    const auto found = solve_offload(ctx, budget, true, &*seed);
    ASSERT_TRUE(found.has_value());
    const simulation r = simulate(it, found->result, off.link);
    ASSERT_TRUE(r.valid) << r.error;
    EXPECT_LE(r.peak, budget);
    for (const offload& o : found->result.offloads) {
      const bool seed_dropped = ctx.candidates().index_of(o.target) != none &&
                                seed->dropped[ctx.candidates().index_of(o.target)] != 0;
      offloaded_recipe_targets += seed_dropped ? 1 : 0;
    }
  }
  EXPECT_GT(offloaded_recipe_targets, 0u);
}

// A start from a recompute plan over a link a hundred times slower than the launches (a
// copy takes a hundred): on a ResNet-like graph of 200 blocks its cover stalls past eight
// iterations' compute with more offloads than the pass after it may try, and it gives up
// (Note [Hopeless starts]); over a link as fast as the launches it plans. The start from
// offloads alone never gives up, so with offload on the budget is still met.
TEST(OffloadHopelessStarts, AStartStallingPastEightIterationsOnMoreOffloadsThanTrialsGivesUp) {
  const std::size_t q = std::size_t{1} << 20;
  const iteration it = synthetic::build(synthetic::resnet(200, q, q));
  const std::size_t budget = test::budget_at(it, 1, 4);
  for (const double launches_per_copy : {1.0, 100.0}) {
    SCOPED_TRACE(launches_per_copy);
    offload_settings off;
    off.mode = offload_mode::on;
    off.link = test::link_at(static_cast<double>(q) / (1e-3 * launches_per_copy));
    planner::context ctx(it, true, true, off);
    const auto seed = solve_greedy(ctx, budget * 2);
    ASSERT_TRUE(seed.has_value());
    const auto plain = solve_offload(ctx, budget, true, &*seed);
    if (launches_per_copy == 1.0) {
      EXPECT_TRUE(plain.has_value());
      continue;
    }
    EXPECT_FALSE(plain.has_value());
    const auto first = solve_offload_then_recompute(ctx, budget, &*seed);
    ASSERT_TRUE(first.has_value());
    EXPECT_LE(first->sim.peak, budget);
    const auto chosen = with_offload(ctx, budget, [](planner::context& c, std::size_t b) { return solve_greedy(c, b); });
    ASSERT_TRUE(chosen.has_value());
    EXPECT_LE(chosen->sim.peak, budget);
    EXPECT_LE(chosen->sim.added_time_s(), first->sim.added_time_s());
  }
}

// On a small graph the pass after the cover may try every offload, and the start does not
// give up however long it stalls: over the same slow link a chain of 32 layers, whose
// covers stall past eight iterations (the stalls alone would give them up), still plans.
TEST(OffloadHopelessStarts, WhereThePassMayTryEveryOffloadTheStartGoesOn) {
  const std::size_t q = std::size_t{1} << 20;
  const iteration it = synthetic::build(synthetic::chain(32, q, q));
  offload_settings off;
  off.mode = offload_mode::on;
  off.link = test::link_at(static_cast<double>(q) / 1e-1);  // a copy takes a hundred launches
  planner::context ctx(it, true, true, off);
  const auto seed = solve_chain(ctx, simulate(it, plan{}).peak * 3 / 10);
  ASSERT_TRUE(seed.has_value());
  double compute_s = 0.0;
  for (const launch& l : it.launches) compute_s += l.cost_s;
  for (const std::size_t percent : {90, 70}) {
    SCOPED_TRACE(percent);
    const auto found = solve_offload(ctx, seed->sim.peak * percent / 100, true, &*seed);
    ASSERT_TRUE(found.has_value());
    EXPECT_GT(found->sim.predicted_stall_s, compute_s);
  }
}
}  // namespace
}  // namespace sublinear::policy
