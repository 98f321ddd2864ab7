#include "policy/simulator.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t g = 4096;

// L0 init a | L1 f(a) -> b, workspace ws | L2 reads b | L3 big(c) | L4 reads b | L5 reads a
struct scenario {
  iteration it;
  buffer_id P, a, b, ws, c;
};

scenario make_scenario(bool init_replayable = true, std::size_t a_bytes = 8192, std::size_t c_bytes = 8192) {
  test::hand_iteration h(g);
  scenario s{};
  s.P = h.persistent(1000);
  s.a = h.transient(a_bytes, 0, 6);
  s.b = h.transient(3000, 1, 5);
  s.ws = h.transient(100, 1, 2);
  s.c = h.transient(c_bytes, 3, 4);
  h.launch({}, {s.a}, 1.0, init_replayable);
  h.launch({s.a}, {s.b, s.ws}, 2.0);
  h.launch({s.b}, {}, 1.0);
  h.launch({s.P}, {s.c}, 1.0);
  h.launch({s.b}, {}, 1.0);
  h.launch({s.a}, {}, 1.0);
  s.it = h.finish(3);
  return s;
}

eviction evict(buffer_id target, launch_id after, launch_id before, std::vector<launch_id> recipe = {},
               std::vector<buffer_id> temporaries = {}, std::vector<buffer_id> also = {}) {
  eviction e;
  e.target = target;
  e.evict_after = after;
  e.restore_before = before;
  e.recipe = std::move(recipe);
  e.temporaries = std::move(temporaries);
  e.also_regenerates = std::move(also);
  return e;
}

TEST(Simulator, EmptyPlanRoundsEveryBufferTo512Bytes) {
  const scenario s = make_scenario();
  const simulation r = simulate(s.it, plan{});
  ASSERT_TRUE(r.valid) << r.error;
  // During L3: P (1024) + a (8192) + b (3072) + c (8192).
  EXPECT_EQ(r.peak, 1024u + 8192u + 3072u + 8192u);
  EXPECT_EQ(r.peak_at, 3u);
  EXPECT_FALSE(r.peak_in_recipe);
  EXPECT_EQ(r.added_compute_s, 0.0);
}

TEST(Simulator, EvictionLowersThePeakInsideItsGap) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.a, 1, 5, {0}));
  const simulation r = simulate(s.it, p);
  ASSERT_TRUE(r.valid) << r.error;
  // L3 drops to P + b + c; the peak moves to L1: P + a + b + ws.
  EXPECT_EQ(r.peak, 1024u + 8192u + 3072u + 512u);
  EXPECT_EQ(r.peak_at, 1u);
  EXPECT_EQ(r.recomputed_launches, 1u);
  EXPECT_DOUBLE_EQ(r.added_compute_s, 1.0);
}

TEST(Simulator, PlannedBufferOccupiesWholePagesWhileResident) {
  const scenario s = make_scenario(true, 5000);
  plan p;
  p.evictions.push_back(evict(s.a, 1, 5, {0}));
  const simulation r = simulate(s.it, p);
  ASSERT_TRUE(r.valid) << r.error;
  // Evictable, a gets its own pages: 5000 -> 8192 (not 5120) while resident at L1.
  EXPECT_EQ(r.peak, 1024u + 8192u + 3072u + 512u);
  const simulation unplanned = simulate(s.it, plan{});
  EXPECT_EQ(unplanned.peak, 1024u + 5120u + 3072u + 8192u);
}

TEST(Simulator, TemporariesShareOneScratchMappingWhileTheRecipeRuns) {
  const scenario s = make_scenario(true, 8192, 4096);
  plan p;
  p.evictions.push_back(evict(s.b, 2, 4, {1}, {s.ws}));
  const simulation r = simulate(s.it, p);
  ASSERT_TRUE(r.valid) << r.error;
  const std::vector<std::size_t> during = simulator(s.it).timeline(p);
  ASSERT_EQ(during.size(), 6u);
  // Before L4: b is back (4096, planned) and ws needs one page of scratch.
  EXPECT_EQ(during[4], 1024u + 8192u + 4096u);
  EXPECT_TRUE(r.peak_in_recipe);
  EXPECT_EQ(r.peak_at, 4u);
  EXPECT_EQ(r.peak, during[4] + g);
}

TEST(Simulator, AlsoRegeneratedBufferIsResidentFromItsCarriersRestorePoint) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.b, 2, 4, {0, 1}, {s.ws}, {s.a}));
  p.evictions.push_back(evict(s.a, 1, 5));
  const simulation r = simulate(s.it, p);
  ASSERT_TRUE(r.valid) << r.error;
  const std::vector<std::size_t> during = simulator(s.it).timeline(p);
  EXPECT_EQ(during[3], 1024u + 8192u);                // a and b evicted, c live
  EXPECT_EQ(during[4], 1024u + 8192u + 4096u);        // both back before L4
  EXPECT_DOUBLE_EQ(r.added_compute_s, 3.0);
}

TEST(Simulator, RejectsAUseWhileEvicted) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.a, 0, 5, {0}));
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("used by launch 1 while evicted"));
}

TEST(Simulator, RejectsARecipeThatReadsAnEvictedBuffer) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.a, 1, 5, {0}));
  p.evictions.push_back(evict(s.b, 2, 4, {1}, {s.ws}));  // L1 reads a, evicted at 4
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("reads buffer " + std::to_string(s.a)));
  EXPECT_THAT(r.error, HasSubstr("not resident"));
}

TEST(Simulator, RejectsARecipeMissingAWriterOfItsTarget) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.a, 1, 5));
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("written by launch 0"));
}

TEST(Simulator, RejectsANonReplayableRecipeLaunch) {
  const scenario s = make_scenario(false);
  plan p;
  p.evictions.push_back(evict(s.a, 1, 5, {0}));
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("not replayable"));
}

TEST(Simulator, RejectsARecipeWritingABufferItDoesNotOwn) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.b, 2, 4, {1}));  // L1 also writes ws
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("writes buffer " + std::to_string(s.ws)));
}

TEST(Simulator, RejectsAlsoRegeneratesWithoutAnEvictionOfItsOwn) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.b, 2, 4, {0, 1}, {s.ws}, {s.a}));
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("has no eviction of its own"));
}

TEST(Simulator, RejectsOverlappingEvictionsOfOneBuffer) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.a, 1, 5, {0}));
  p.evictions.push_back(evict(s.a, 2, 5, {0}));
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("overlaps"));
}

TEST(Simulator, RejectsAnEvictionOutsideTheBuffersLifetime) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.b, 0, 4, {1}, {s.ws}));  // b is allocated before L1
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("not allocated"));
}

TEST(Simulator, RejectsEvictingAPersistentBuffer) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.P, 0, 3));
  const simulation r = simulate(s.it, p);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.error, HasSubstr("cannot be evicted"));
}

TEST(Simulator, SimulateIntoRecordsThePrediction) {
  const scenario s = make_scenario();
  plan p;
  p.evictions.push_back(evict(s.a, 1, 5, {0}));
  const simulation r = simulate_into(s.it, p);
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(p.predicted_peak, r.peak);
  EXPECT_DOUBLE_EQ(p.added_compute_s, 1.0);
  EXPECT_EQ(p.recomputed_launches, 1u);
}

TEST(Simulator, CheckIterationFindsUsersThatDoNotMatchTheLaunches) {
  scenario s = make_scenario();
  EXPECT_EQ(check_iteration(s.it), "");
  s.it.buffers[s.b].users.pop_back();
  EXPECT_THAT(check_iteration(s.it), HasSubstr("buffer " + std::to_string(s.b)));
}

TEST(Simulator, ScratchBytesPackTemporariesIntoWholePages) {
  const scenario s = make_scenario();
  EXPECT_EQ(scratch_bytes(s.it, {1}, {}), 0u);
  EXPECT_EQ(scratch_bytes(s.it, {1}, {s.ws}), g);            // 100 B -> one page
  EXPECT_EQ(scratch_bytes(s.it, {1}, {s.ws, s.b}), g);       // 512 + 3072 still fit one page
  EXPECT_EQ(scratch_bytes(s.it, {1}, {s.ws, s.a}), 3 * g);   // 512 + 8192 -> three pages
}

TEST(Simulator, ScratchBytesCountOnlyTheTemporariesHeldAtOnce) {
  const scenario s = make_scenario();
  // ws is touched by L1 only, c by L3 only: the recipe holds one at a time, so the
  // larger (8192 B, two pages) is what it needs, not their sum (8704 B, three pages).
  EXPECT_EQ(scratch_bytes(s.it, {1, 3}, {s.ws, s.c}), 2 * g);
  // a is touched by L0 and L1, b by L1 only: both are held during L1.
  EXPECT_EQ(scratch_bytes(s.it, {0, 1}, {s.a, s.b}), 3 * g);  // 8192 + 3072
}

}  // namespace
}  // namespace sublinear::policy
