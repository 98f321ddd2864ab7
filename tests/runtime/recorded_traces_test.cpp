// Plans on traces recorded on GPUs (tests/runtime/traces/README.md): what the planners
// found there is pinned here, where no GPU runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "runtime/report/report_plan.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::runtime {
namespace {

std::string trace_path(const char* name) {
  return (std::filesystem::path(__FILE__).parent_path() / "traces" / name).string();
}

// GPU suite part 3 (the cuDNN ResNet through the C API) at 0.5x of its traced 160 MiB.
// The planners' rounds climb away from the plans that fit and end above the 80 MiB budget;
// steepest descent on the peak (Note [Cost-aware greedy], Limitations) finds plans that fit.
TEST(RecordedTraces, TheCudnnResnetOfTheGpuSuiteHasAPlanAtHalfItsPeak) {
  const tracer::trace t = tracer::read_trace_file(trace_path("cudnn-resnet-h200.sltrace"));
  plan_preview_options po;
  po.budget = policy::parse_budget("0.5x");
  po.policies = {"greedy", "reforward"};
  po.traced_mapped_peak = std::size_t{160} << 20;  // as the run logged it
  const plan_preview p = preview_plans(t, po);
  ASSERT_EQ(p.device, "cuda");
  ASSERT_EQ(p.granularity, std::size_t{2} << 20) << "the trace records the allocator's pages";
  ASSERT_EQ(p.budget, std::size_t{80} << 20);
  ASSERT_EQ(p.rows.size(), 2u);
  for (const plan_preview_row& row : p.rows) {
    EXPECT_TRUE(row.feasible) << row.planner << ": " << row.error;
    EXPECT_FALSE(row.internal_error) << row.planner;
    EXPECT_LE(row.predicted_peak, p.planner_budget) << row.planner;
    EXPECT_LE(row.predicted_mapped, p.budget) << row.planner;
    EXPECT_GT(row.evicted_buffers, 0u) << row.planner;
  }
}

}  // namespace
}  // namespace sublinear::runtime
