// Note [Hidden allocations]: the warning for a traced iteration whose memory sublinear did
// not see, as the process runtime prints it when the traced iterations end.
#include "runtime/hidden_allocations.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sublinear::runtime {
namespace {

using ::testing::HasSubstr;

TEST(HiddenAllocations, AnIterationThatAllocatesItsTensorsGetsNoWarning) {
  EXPECT_EQ(hidden_allocations_warning(800, 1000, nullptr), "");
  // One allocation or free per kLaunchesPerAllocation launches is enough; one fewer is not.
  EXPECT_EQ(hidden_allocations_warning(32, 32 * kLaunchesPerAllocation, nullptr), "");
  EXPECT_NE(hidden_allocations_warning(31, 32 * kLaunchesPerAllocation, nullptr), "");
}

TEST(HiddenAllocations, AFewLaunchesAreTooFewToJudge) {
  EXPECT_EQ(hidden_allocations_warning(0, kLaunchesPerAllocation - 1, nullptr), "");
}

TEST(HiddenAllocations, AlmostNoAllocationsNameTheCachingAllocatorAndTheVariable) {
  const std::string w = hidden_allocations_warning(2, 5000, nullptr);
  EXPECT_THAT(w, HasSubstr("5000"));
  EXPECT_THAT(w, HasSubstr("only 2 times"));
  EXPECT_THAT(w, HasSubstr("PyTorch's caching allocator"));
  EXPECT_THAT(w, HasSubstr("PYTORCH_NO_CUDA_MEMORY_CACHING=1"));
  EXPECT_THAT(w, HasSubstr("unset in this process"));
}

TEST(HiddenAllocations, TheWarningQuotesTheVariableWhenItIsSetToSomethingElse) {
  EXPECT_THAT(hidden_allocations_warning(0, 5000, "0"), HasSubstr("PYTORCH_NO_CUDA_MEMORY_CACHING is '0' here"));
}

}  // namespace
}  // namespace sublinear::runtime
