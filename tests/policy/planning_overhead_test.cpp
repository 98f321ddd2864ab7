// The budget arithmetic of Note [Planning overhead]: what share of a budget the planner
// gets, and the smallest budget that gives it a given share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <limits>

#include "policy/planning_overhead.hpp"
#include "policy/policy_support.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

TEST(PlanningOverhead, KeepsTheTracedCache) {
  EXPECT_EQ(cache_allowance(traced_memory{20 * MiB, 18 * MiB, 64 * KiB}), 2 * MiB);
  EXPECT_EQ(cache_allowance(traced_memory{18 * MiB, 18 * MiB, 64 * KiB}), 0u) << "no cache traced";
  EXPECT_EQ(cache_allowance(traced_memory{0, 18 * MiB, 64 * KiB}), 0u) << "mapped peak unknown";
}

TEST(PlanningOverhead, AddsAPageAndASixteenthOfTheBudget) {
  EXPECT_EQ(planning_overhead(32 * MiB, traced_memory{0, 0, 64 * KiB}), 64 * KiB + 2 * MiB);
  EXPECT_EQ(planning_overhead(10 * MiB, traced_memory{20 * MiB, 18 * MiB, 64 * KiB}),
            2 * MiB + 64 * KiB + 640 * KiB);
  EXPECT_EQ(planning_overhead(32 * MiB, traced_memory{0, 0, 2 * MiB}), 2 * MiB + 2 * MiB) << "a CUDA page";
}

// GPT-2's blocks on an H200: 4.46 MiB in sub-page buffers at most, a 362 MiB
// budget whose sixteenth is 22.6 MiB. The sixteenth is for the fragmentation of pages that
// sub-page buffers share, so it is capped at what they hold.
TEST(PlanningOverhead, TheSixteenthIsCappedAtTheBytesInSubPageBuffers) {
  const traced_memory gpt2{430 * MiB, 386 * MiB, 2 * MiB, 4 * MiB + 470 * KiB};
  EXPECT_EQ(planning_overhead(362 * MiB, gpt2), 44 * MiB + 2 * MiB + 4 * MiB + 470 * KiB);
  const traced_memory many_small{20 * MiB, 18 * MiB, 64 * KiB, 11 * MiB};
  EXPECT_EQ(planning_overhead(10 * MiB, many_small), 2 * MiB + 64 * KiB + 640 * KiB)
      << "sub-page buffers holding more than a sixteenth leave it as it is";
  EXPECT_EQ(planning_overhead(10 * MiB, traced_memory{20 * MiB, 18 * MiB, 64 * KiB}), 2 * MiB + 64 * KiB + 640 * KiB)
      << "unknown: the sixteenth";
}

// traced_memory_of sweeps the iteration: the most bytes live at once in buffers below the
// page size, each rounded to 512 bytes, persistent ones included.
TEST(PlanningOverhead, TheSubPagePeakIsTheMostSubPageBytesLiveAtOnce) {
  test::hand_iteration h(64 * KiB);
  const auto weights = h.persistent(1000);                 // 1024 counted
  const auto small_a = h.transient(10 * KiB, 0, 2);        // live at launches 0, 1
  const auto small_b = h.transient(20 * KiB + 1, 1, 3);    // live at 1, 2; 20.5 KiB counted
  const auto large = h.transient(64 * KiB, 0, 3);          // a whole page: not sub-page
  const auto late = h.transient(30 * KiB, 2, 3);           // live at 2
  h.launch({weights}, {small_a, large});
  h.launch({small_a}, {small_b});
  h.launch({small_b, large}, {late});
  const iteration it = h.finish(1);
  const traced_memory t = traced_memory_of(it, 0);
  EXPECT_EQ(t.sub_page_peak, 1024 + 20 * KiB + 512 + 30 * KiB) << "launch 2: weights, small_b and late";
  EXPECT_EQ(t.granularity, 64 * KiB);
}

TEST(PlanningOverhead, TheSmallestBudgetForAPlannerShareIsExact) {
  for (const cache_allowance_mode mode : {cache_allowance_mode::traced, cache_allowance_mode::scaled}) {
    SCOPED_TRACE(to_string(mode));
    for (const traced_memory t :
         {traced_memory{20 * MiB, 18 * MiB, 64 * KiB}, traced_memory{3 * MiB, 3 * MiB, 64 * KiB},
          traced_memory{0, 0, 2 * MiB}, traced_memory{109 * MiB, 89 * MiB, 2 * MiB},
          traced_memory{430 * MiB, 386 * MiB, 2 * MiB, 4 * MiB + 470 * KiB},
          traced_memory{20 * MiB, 18 * MiB, 64 * KiB, 1}, traced_memory{118 * MiB, 96 * MiB, 64 * KiB, MiB}}) {
      for (std::size_t want : {std::size_t{0}, 1 * KiB, 777 * KiB, 5 * MiB + 3, 9 * MiB, 19 * MiB, 300 * MiB}) {
        const std::size_t b = budget_for_planner_bytes(want, t, mode);
        EXPECT_GE(b - std::min(b, planning_overhead(b, t, mode)), want) << "budget " << b << " for " << want;
        if (b > 0) {
          const std::size_t less = b - 1;
          EXPECT_LT(less - std::min(less, planning_overhead(less, t, mode)), want)
              << "budget " << less << " for " << want;
        }
      }
    }
  }
}

// Figures from a command line may be anything a size_t holds: with a mapped peak of 2^64 - 1
// the search for the smallest budget doubled its upper end until it wrapped, and looped
// forever. No budget leaves room then; the answer is the largest budget there is.
TEST(PlanningOverhead, FiguresNearTheLargestSizeGiveAnAnswerWithoutWrapping) {
  constexpr std::size_t most = std::numeric_limits<std::size_t>::max();
  for (const cache_allowance_mode mode : {cache_allowance_mode::traced, cache_allowance_mode::scaled}) {
    SCOPED_TRACE(to_string(mode));
    const traced_memory huge{most, 18 * MiB, 64 * KiB};
    EXPECT_EQ(planning_overhead(most, huge, mode), most) << "saturated, not wrapped";
    EXPECT_EQ(budget_for_planner_bytes(1 * MiB, huge, mode), most);
    EXPECT_EQ(budget_for_planner_bytes(most, traced_memory{0, 0, 64 * KiB}, mode), most);
    // Large but not too large: the answer is exact as ever.
    for (const traced_memory t : {traced_memory{std::size_t{1} << 62, 18 * MiB, 2 * MiB},
                                  traced_memory{std::size_t{1} << 56, std::size_t{1} << 55, std::size_t{1} << 30}}) {
      for (std::size_t want : {std::size_t{0}, 5 * MiB + 3, std::size_t{1} << 60}) {
        const std::size_t b = budget_for_planner_bytes(want, t, mode);
        EXPECT_GE(b - std::min(b, planning_overhead(b, t, mode)), want) << "budget " << b << " for " << want;
        if (b == 0) continue;
        const std::size_t less = b - 1;
        EXPECT_LT(less - std::min(less, planning_overhead(less, t, mode)), want) << "budget " << less;
      }
    }
  }
}

// Note [Scaled cache allowance]: below the traced mapped peak the scaled allowance keeps
// back the traced cache times budget / mapped peak; the page and the sixteenth stay.
TEST(PlanningOverhead, TheScaledAllowanceKeepsTheTracedCacheInProportionToTheBudget) {
  const traced_memory t{20 * MiB, 18 * MiB, 64 * KiB};  // a 2 MiB cache
  EXPECT_EQ(cache_allowance(t, 10 * MiB, cache_allowance_mode::scaled), 1 * MiB) << "half the peak, half the cache";
  EXPECT_EQ(cache_allowance(t, 5 * MiB, cache_allowance_mode::scaled), 512 * KiB);
  EXPECT_EQ(cache_allowance(t, 20 * MiB, cache_allowance_mode::scaled), 2 * MiB);
  EXPECT_EQ(cache_allowance(t, 64 * MiB, cache_allowance_mode::scaled), 2 * MiB) << "never more than all of it";
  EXPECT_EQ(cache_allowance(t, 5 * MiB, cache_allowance_mode::traced), 2 * MiB) << "traced: all of it at any budget";
  EXPECT_EQ(cache_allowance(traced_memory{0, 18 * MiB, 64 * KiB}, 5 * MiB, cache_allowance_mode::scaled), 0u)
      << "mapped peak unknown";
  EXPECT_EQ(planning_overhead(10 * MiB, t, cache_allowance_mode::scaled), 1 * MiB + 64 * KiB + 640 * KiB);
  EXPECT_EQ(planning_overhead(10 * MiB, t), 2 * MiB + 64 * KiB + 640 * KiB) << "the default is the traced cache";
  // So the scaled allowance gives the planner at least as much of any budget.
  for (std::size_t b = 1 * MiB; b < 40 * MiB; b += 3 * MiB + 7)
    EXPECT_LE(planning_overhead(b, t, cache_allowance_mode::scaled), planning_overhead(b, t)) << "budget " << b;
}

}  // namespace
}  // namespace sublinear::policy
