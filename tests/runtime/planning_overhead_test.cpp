// The budget arithmetic of Note [Planning overhead]: what share of a budget the planner
// gets, and the smallest budget that gives it a given share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

#include "allocator/runtime/engine.hpp"
#include "policy/policy_support.hpp"

namespace sublinear::runtime {
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

// GPT-2's blocks on an H200 (session 25): 4.46 MiB in sub-page buffers at most, a 362 MiB
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
  policy::test::hand_iteration h(64 * KiB);
  const auto weights = h.persistent(1000);                 // 1024 counted
  const auto small_a = h.transient(10 * KiB, 0, 2);        // live at launches 0, 1
  const auto small_b = h.transient(20 * KiB + 1, 1, 3);    // live at 1, 2; 20.5 KiB counted
  const auto large = h.transient(64 * KiB, 0, 3);          // a whole page: not sub-page
  const auto late = h.transient(30 * KiB, 2, 3);           // live at 2
  h.launch({weights}, {small_a, large});
  h.launch({small_a}, {small_b});
  h.launch({small_b, large}, {late});
  const policy::iteration it = h.finish(1);
  const traced_memory t = traced_memory_of(it, 0);
  EXPECT_EQ(t.sub_page_peak, 1024 + 20 * KiB + 512 + 30 * KiB) << "launch 2: weights, small_b and late";
  EXPECT_EQ(t.granularity, 64 * KiB);
}

TEST(PlanningOverhead, TheSmallestBudgetForAPlannerShareIsExact) {
  for (const traced_memory t :
       {traced_memory{20 * MiB, 18 * MiB, 64 * KiB}, traced_memory{3 * MiB, 3 * MiB, 64 * KiB},
        traced_memory{0, 0, 2 * MiB}, traced_memory{109 * MiB, 89 * MiB, 2 * MiB},
        traced_memory{430 * MiB, 386 * MiB, 2 * MiB, 4 * MiB + 470 * KiB}, traced_memory{20 * MiB, 18 * MiB, 64 * KiB, 1}}) {
    for (std::size_t want : {std::size_t{0}, 1 * KiB, 777 * KiB, 5 * MiB + 3, 9 * MiB, 19 * MiB, 300 * MiB}) {
      const std::size_t b = budget_for_planner_bytes(want, t);
      EXPECT_GE(b - std::min(b, planning_overhead(b, t)), want) << "budget " << b << " for " << want;
      if (b > 0) {
        const std::size_t less = b - 1;
        EXPECT_LT(less - std::min(less, planning_overhead(less, t)), want) << "budget " << less << " for " << want;
      }
    }
  }
}

}  // namespace
}  // namespace sublinear::runtime
