// The CUPTI collector's callback classes and its subscription per phase (Note
// [Phase-aware subscription] in tracer/cupti/callback_plan.hpp), without a GPU: callback
// ids are looked up by the driver functions' names, as CUPTI's headers spell them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#if defined(SUBLINEAR_HAVE_CUDA)
#include "tracer/cupti/callback_plan.hpp"
#endif

namespace sublinear::tracer {
namespace {

#if defined(SUBLINEAR_HAVE_CUDA)

std::uint32_t cbid(const char* name) {
  const std::uint32_t id = driver_callback_id(name);
  EXPECT_NE(id, 0U) << name << " is not a callback the collector knows";
  return id;
}

bool has(const subscription& s, const char* name) {
  return std::binary_search(s.callbacks.begin(), s.callbacks.end(), cbid(name));
}

TEST(CuptiCallbacks, EveryLaunchFormIsClassified) {
  for (const char* k : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
                        "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"}) {
    EXPECT_EQ(classify_driver_callback(cbid(k)), callback_class::kernel_launch) << k;
    EXPECT_EQ(driver_callback_name(cbid(k)), k);
  }
  for (const char* g : {"cuGraphLaunch", "cuGraphLaunch_ptsz"})
    EXPECT_EQ(classify_driver_callback(cbid(g)), callback_class::graph_launch) << g;
  for (const char* b : {"cuStreamBeginCapture", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz",
                        "cuStreamBeginCaptureToGraph"})
    EXPECT_EQ(classify_driver_callback(cbid(b)), callback_class::capture_begin) << b;
  EXPECT_EQ(classify_driver_callback(cbid("cuStreamEndCapture_ptsz")), callback_class::capture_end);
  for (const char* a : {"cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync"})
    EXPECT_EQ(classify_driver_callback(cbid(a)), callback_class::stream_ordered_alloc) << a;
  EXPECT_EQ(classify_driver_callback(cbid("cuMemFreeAsync")), callback_class::stream_ordered_free);
  EXPECT_EQ(classify_driver_callback(cbid("cuMemPoolCreate")), callback_class::pool);
  EXPECT_EQ(classify_driver_callback(0), callback_class::other);
  EXPECT_EQ(driver_callback_id("cuMemAlloc_v2"), 0U);  // not one the collector takes
}

TEST(CuptiCallbacks, TracingTakesEverythingWithActivityRecords) {
  const subscription s = subscription_for(collector_phase::tracing);
  EXPECT_TRUE(s.activity);
  EXPECT_TRUE(std::is_sorted(s.callbacks.begin(), s.callbacks.end()));
  for (const char* n : {"cuLaunchKernelEx", "cuGraphLaunch", "cuStreamBeginCapture_v2", "cuStreamEndCapture",
                        "cuMemcpyAsync", "cuMemsetD32Async_ptsz", "cuEventRecord", "cuStreamWaitEvent",
                        "cuMemAllocAsync", "cuMemFreeAsync", "cuMemPoolCreate"})
    EXPECT_TRUE(has(s, n)) << n;
}

TEST(CuptiCallbacks, SteadyIterationsDropEventCallbacksAndActivityRecords) {
  const subscription s = subscription_for(collector_phase::steady);
  EXPECT_FALSE(s.activity);
  for (const char* n : {"cuLaunchKernel", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuGraphLaunch",
                        "cuStreamBeginCapture", "cuStreamEndCapture", "cuMemcpyDtoDAsync_v2", "cuMemsetD8Async",
                        "cuMemAllocAsync", "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync_ptsz"})
    EXPECT_TRUE(has(s, n)) << n;
  for (const char* n : {"cuEventRecord", "cuEventRecord_ptsz", "cuStreamWaitEvent", "cuStreamWaitEvent_ptsz"})
    EXPECT_FALSE(has(s, n)) << n;
  EXPECT_LT(s.callbacks.size(), subscription_for(collector_phase::tracing).callbacks.size());
}

TEST(CuptiCallbacks, OffTakesNothing) {
  const subscription s = subscription_for(collector_phase::off);
  EXPECT_TRUE(s.callbacks.empty());
  EXPECT_FALSE(s.activity);
}

TEST(CuptiCallbacks, StreamOrderedMessageNamesTheCallAndTheFix) {
  const std::string tracing = stream_ordered_message("cuMemAllocAsync", std::size_t{3} << 20, true);
  EXPECT_NE(tracing.find("cuMemAllocAsync of 3"), std::string::npos) << tracing;
  EXPECT_NE(tracing.find("tracing stopped"), std::string::npos) << tracing;
  EXPECT_NE(tracing.find("PYTORCH_CUDA_ALLOC_CONF"), std::string::npos) << tracing;
  EXPECT_NE(tracing.find("SUBLINEAR_DISABLE=1"), std::string::npos) << tracing;
  const std::string later = stream_ordered_message("cuMemPoolCreate", 0, false);
  EXPECT_EQ(later.find(" of "), std::string::npos) << later;
  EXPECT_NE(later.find("budget does not count it"), std::string::npos) << later;
}

TEST(CaptureSet, LaunchesOnACapturingStreamAreCapturedUntilItsCaptureEnds) {
  capture_set c;
  auto* s1 = reinterpret_cast<device::stream_handle>(0x10);
  auto* s2 = reinterpret_cast<device::stream_handle>(0x20);
  EXPECT_FALSE(c.any());
  EXPECT_FALSE(c.capturing(s1));
  c.begin(s1);
  EXPECT_TRUE(c.any());
  EXPECT_TRUE(c.capturing(s1));
  EXPECT_FALSE(c.capturing(s2));
  EXPECT_FALSE(c.capturing(nullptr));
  c.begin(s2);
  c.end(s1);
  EXPECT_FALSE(c.capturing(s1));
  EXPECT_TRUE(c.capturing(s2));
  c.end(s2);
  EXPECT_FALSE(c.any());
  c.end(s2);  // an end without a begin changes nothing
  EXPECT_FALSE(c.any());
}

TEST(CaptureSet, MoreCapturesThanItHoldsMakeEveryStreamLookCaptured) {
  capture_set c;
  for (std::size_t i = 0; i <= capture_set::capacity; ++i) c.begin(reinterpret_cast<device::stream_handle>(0x100 + i));
  EXPECT_TRUE(c.capturing(reinterpret_cast<device::stream_handle>(0x999)));  // safe side: not recorded
  c.end(reinterpret_cast<device::stream_handle>(0x999));  // one of the overflowed captures ended
  EXPECT_FALSE(c.capturing(reinterpret_cast<device::stream_handle>(0x999)));
  EXPECT_TRUE(c.capturing(reinterpret_cast<device::stream_handle>(0x100)));
}

#else

TEST(CuptiCallbacks, NeedTheCudaBackend) { GTEST_SKIP() << "built without the CUDA toolkit (SUBLINEAR_CUDA=OFF)"; }

#endif

}  // namespace
}  // namespace sublinear::tracer
