// The budget arithmetic of Note [Planning overhead]: what share of a budget the planner
// gets, and the smallest budget that gives it a given share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

#include "allocator/runtime/engine.hpp"

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

TEST(PlanningOverhead, TheSmallestBudgetForAPlannerShareIsExact) {
  for (const traced_memory t :
       {traced_memory{20 * MiB, 18 * MiB, 64 * KiB}, traced_memory{3 * MiB, 3 * MiB, 64 * KiB},
        traced_memory{0, 0, 2 * MiB}, traced_memory{109 * MiB, 89 * MiB, 2 * MiB}}) {
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
