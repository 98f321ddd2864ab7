// Packs (Note [Packs] in policy/packs.hpp): the simulator's memory model for evicted
// buffers that share pages, add_packs, and what the planners make of the room.
#include "policy/packs.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t page = 64 * 1024;
constexpr std::size_t quarter = page / 4;

// Forward L0..L3 writes x0..x3 (a quarter page each) from a persistent input; L4 uses a
// 128 KiB temporary; backward L5..L8 reads x3..x0. One recipe (L0..L3) regenerates all four
// before L5.
struct tape {
  iteration it;
  buffer_id in = 0, c = 0;
  std::vector<buffer_id> x;
  plan evicted;  // every x evicted after its last forward use, regenerated before L5
};

tape make_tape() {
  test::hand_iteration h(page);
  tape t;
  t.in = h.persistent(1000);
  for (launch_id i = 0; i < 4; ++i) t.x.push_back(h.transient(quarter, i, 9));
  t.c = h.transient(2 * page, 4, 5);
  h.launch({t.in}, {t.x[0]});
  for (std::size_t i = 1; i < 4; ++i) h.launch({t.x[i - 1]}, {t.x[i]});
  h.launch({t.in}, {t.c});
  for (std::size_t i = 4; i-- > 0;) h.launch({t.x[i]}, {});
  t.it = h.finish(4);
  eviction carrier;
  carrier.target = t.x[3];
  carrier.evict_after = 3;
  carrier.restore_before = 5;
  carrier.recipe = {0, 1, 2, 3};
  carrier.also_regenerates = {t.x[0], t.x[1], t.x[2]};
  t.evicted.evictions.push_back(carrier);
  for (std::size_t i = 0; i < 3; ++i) {
    eviction e;
    e.target = t.x[i];
    e.evict_after = static_cast<launch_id>(i + 1);
    e.restore_before = 5;
    t.evicted.evictions.push_back(e);
  }
  return t;
}

pack whole_tape(const tape& t) {
  pack p;
  p.members = t.x;
  p.offsets = {0, quarter, 2 * quarter, 3 * quarter};
  p.bytes = page;
  return p;
}

TEST(Packs, ATapeRegeneratedIntoOnePackHoldsOnePageInsteadOfFour) {
  const tape t = make_tape();
  const simulation apart = simulate(t.it, t.evicted);
  ASSERT_TRUE(apart.valid) << apart.error;
  // Before L5 the recipe brings all four back, a page each, beside the input (1 KiB).
  EXPECT_EQ(apart.peak, 1024 + 4 * page);
  EXPECT_EQ(apart.peak_at, 5u);

  plan packed = t.evicted;
  packed.packs.push_back(whole_tape(t));
  const simulation together = simulate(t.it, packed);
  ASSERT_TRUE(together.valid) << together.error;
  // Now the 128 KiB temporary at L4 is the peak; the tape never holds more than a page.
  EXPECT_EQ(together.peak, 1024 + 2 * page);
  EXPECT_EQ(together.peak_at, 4u);
  const std::vector<std::size_t> line = simulator(t.it).timeline(packed);
  ASSERT_EQ(line.size(), 9u);
  for (launch_id l : {0u, 1u, 2u, 3u, 5u, 6u, 7u, 8u}) EXPECT_EQ(line[l], 1024 + page) << "launch " << l;
  EXPECT_EQ(line[4], 1024 + 2 * page);  // every member out: the page is given back
  // Compute is unchanged: packing moves pages, not launches.
  EXPECT_EQ(together.added_compute_s, apart.added_compute_s);
  EXPECT_EQ(together.recomputed_launches, apart.recomputed_launches);
}

TEST(Packs, APackStaysMappedWhileAnyMemberIsResident) {
  const tape t = make_tape();
  // Only x0 and x1 evicted (x0 after L1, x1 after L2, both back before L5 through x1's
  // recipe), packed with the resident x2 and x3: the page never goes.
  plan p;
  eviction carrier;
  carrier.target = t.x[1];
  carrier.evict_after = 2;
  carrier.restore_before = 5;
  carrier.recipe = {0, 1};
  carrier.also_regenerates = {t.x[0]};
  p.evictions.push_back(carrier);
  eviction e;
  e.target = t.x[0];
  e.evict_after = 1;
  e.restore_before = 5;
  p.evictions.push_back(e);
  const simulation alone = simulate(t.it, p);
  ASSERT_TRUE(alone.valid) << alone.error;
  pack pk;
  pk.members = {t.x[0], t.x[1]};
  pk.offsets = {0, quarter};
  pk.bytes = 2 * quarter;
  p.packs.push_back(pk);
  const std::vector<std::size_t> line = simulator(t.it).timeline(p);
  ASSERT_EQ(line.size(), 9u);
  // L2: x1 resident (x0 out): the pack holds its page, beside x2 (16 KiB, unplanned).
  EXPECT_EQ(line[2], 1024 + page + quarter);
  // L3: both members out, x2 and x3 resident and unplanned: the page is given back.
  EXPECT_EQ(line[3], 1024 + 2 * quarter);
  const simulation packed = simulate(t.it, p);
  ASSERT_TRUE(packed.valid) << packed.error;
  EXPECT_LE(packed.peak, alone.peak);
}

TEST(Packs, TheSimulatorRefusesMalformedPacks) {
  const tape t = make_tape();
  const auto refused = [&](pack pk) {
    plan p = t.evicted;
    p.packs.push_back(std::move(pk));
    return simulate(t.it, p);
  };
  pack overlap = whole_tape(t);
  overlap.offsets[2] = quarter;
  EXPECT_THAT(refused(overlap).error, HasSubstr("previous member's end"));
  pack misaligned = whole_tape(t);
  misaligned.offsets[1] = quarter + 8;
  EXPECT_THAT(refused(misaligned).error, HasSubstr("not a multiple of 512"));
  pack short_pack = whole_tape(t);
  short_pack.bytes = page - 512;
  EXPECT_THAT(refused(short_pack).error, HasSubstr("do not hold its members"));
  pack out_of_order = whole_tape(t);
  std::swap(out_of_order.members[0], out_of_order.members[1]);
  EXPECT_THAT(refused(out_of_order).error, HasSubstr("allocation order"));
  pack unplanned;
  unplanned.members = {t.c};
  unplanned.offsets = {0};
  unplanned.bytes = 2 * page;
  EXPECT_THAT(refused(unplanned).error, HasSubstr("not a buffer some eviction targets"));
  plan twice = t.evicted;
  twice.packs = {whole_tape(t), whole_tape(t)};
  EXPECT_THAT(simulate(t.it, twice).error, HasSubstr("already in pack 0"));
  for (const pack& bad : {overlap, misaligned, short_pack, out_of_order, unplanned}) EXPECT_FALSE(refused(bad).valid);
}

TEST(Packs, AddPacksGroupsSubPageBuffersOfOneRecipeInAllocationOrder) {
  const tape t = make_tape();
  plan p = t.evicted;
  add_packs(t.it, p);
  ASSERT_EQ(p.packs.size(), 1u);
  EXPECT_EQ(p.packs[0].members, t.x);
  EXPECT_EQ(p.packs[0].offsets, (std::vector<std::size_t>{0, quarter, 2 * quarter, 3 * quarter}));
  EXPECT_EQ(p.packs[0].bytes, page);
  // Launches on another stream change nothing; buffers allocated on another stream never
  // share a pack with this stream's (the allocator maps a pack for one stream).
  tape two = make_tape();
  two.it.launches[4].stream = 1;
  EXPECT_TRUE(packs_apply(two.it));
  plan q = two.evicted;
  add_packs(two.it, q);
  ASSERT_EQ(q.packs.size(), 1u);
  EXPECT_EQ(q.packs[0].members, t.x);
  two.it.buffers[t.x[1]].stream = 1;
  two.it.buffers[t.x[2]].stream = 1;
  add_packs(two.it, q);
  ASSERT_EQ(q.packs.size(), 2u);
  EXPECT_EQ(q.packs[0].members, (std::vector<buffer_id>{t.x[0], t.x[3]}));
  EXPECT_EQ(q.packs[1].members, (std::vector<buffer_id>{t.x[1], t.x[2]}));
  EXPECT_EQ(q.packs[1].offsets, (std::vector<std::size_t>{0, quarter}));
  const simulation split = simulate(two.it, q);
  ASSERT_TRUE(split.valid) << split.error;
  // Two packs of a page each hold the tape now, and the footprint counts it so.
  EXPECT_EQ(split.peak, 1024 + 2 * page);
  EXPECT_EQ(packed_footprint(two.it, t.x), 2 * page);
  // A pack that mixes streams is refused.
  plan mixed = two.evicted;
  mixed.packs = {whole_tape(t)};
  EXPECT_THAT(simulate(two.it, mixed).error, HasSubstr("allocated on stream 1"));
  // Members over half a page keep their own pages.
  EXPECT_EQ(packed_footprint(t.it, t.x), page);
  EXPECT_EQ(packed_footprint(t.it, {t.x[0], t.c}), 2 * page + page);
}

TEST(Packs, PackingNeverRaisesAPlansPeak) {
  // Plans made without packs on chains and ResNets whose activations are sub-page, at
  // budgets from the least to the unplanned peak: packed, each stays valid and maps no
  // more than before, and the ones with two or more co-resident members map less.
  const std::vector<iteration> graphs = {
      synthetic::build(synthetic::chain(40, quarter, page)),
      synthetic::build(synthetic::chain(40, page / 8, page)),
      synthetic::build(synthetic::resnet(12, quarter, page)),
  };
  std::size_t lowered = 0, plans = 0;
  for (const iteration& it : graphs) {
    for (std::size_t budget : test::budgets_for(it, 6)) {
      for (const char* name : {"chain", "greedy", "sqrtn"}) {
        planner::options o;
        o.packs = false;
        plan p;
        try {
          p = make_planner(name)->make_plan(it, budget, o);
        } catch (const infeasible_budget&) {
          continue;
        }
        const simulation before = simulate(it, p);
        ASSERT_TRUE(before.valid) << before.error;
        add_packs(it, p);
        const simulation after = simulate(it, p);
        ASSERT_TRUE(after.valid) << name << ": " << after.error;
        EXPECT_LE(after.peak, before.peak) << name << " at " << budget;
        EXPECT_EQ(after.added_compute_s, before.added_compute_s);
        ++plans;
        if (after.peak < before.peak) ++lowered;
      }
    }
  }
  EXPECT_GE(plans, 15u);
  EXPECT_GT(lowered, 0u);
}

TEST(Packs, PlannersSpendTheRoomOnRecomputingLess) {
  // A chain of quarter-page activations: with packs every planner meets budgets it could
  // not meet without them, or meets them with less compute; never more.
  const iteration it = synthetic::build(synthetic::chain(48, quarter, page));
  std::size_t cheaper = 0;
  for (std::size_t budget : test::budgets_for(it, 8)) {
    for (const char* name : {"chain", "reforward"}) {
      planner::options off;
      off.packs = false;
      std::optional<double> without;
      try {
        without = make_planner(name)->make_plan(it, budget, off).added_compute_s;
      } catch (const infeasible_budget&) {
      }
      std::optional<plan> with;
      try {
        with = make_planner(name)->make_plan(it, budget);
      } catch (const infeasible_budget&) {
      }
      if (without) {
        ASSERT_TRUE(with.has_value()) << name << " met " << budget << " only without packs";
      }
      if (!with) continue;
      EXPECT_LE(simulate(it, *with).peak, budget);
      if (!without || with->added_compute_s < *without - 1e-12) ++cheaper;
    }
  }
  EXPECT_GT(cheaper, 0u);
}

}  // namespace
}  // namespace sublinear::policy
