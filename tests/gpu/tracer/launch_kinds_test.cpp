// Launches the way Hopper stacks make them, on a GPU: a thread-block cluster kernel
// launched with cudaLaunchKernelEx is recorded with its cluster shape and replayed through
// the driver with it (Note [Launch attributes] in device/launch_attributes.hpp); a captured
// CUDA graph is one graph launch per cudaGraphLaunch, its captured kernels are not recorded
// as run, and every block live at a graph launch is never evicted (Note [Graph launches]
// in tracer/analysis.cpp). The host-device twins: tests/tracer/launch_kinds_test.cpp and
// tests/runtime/launch_kinds_test.cpp.
//
// Compiled in CI; every case skips with the reason where there is no driver, no CUPTI or
// (for clusters) a GPU older than compute capability 9.0.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/cuda/driver_api.hpp"
#include "device/cuda/driver_table.hpp"
#include "gpu_environment.hpp"
#include "kernels/launch_kinds_kernels.hpp"
#include "runtime/cuda/cuda_replay_device.hpp"
#include "tracer/analysis.hpp"
#include "tracer/cupti/cupti_collector.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::gpu_tests {
namespace {

class LaunchKindsOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cuda_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    if (const std::string why = tracer::cupti_collector::unavailable_reason(); !why.empty()) {
      GTEST_SKIP() << "no CUPTI collector: " << why;
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    tracer::recorder_options options;
    options.device = "cuda";
    recorder_ = std::make_unique<tracer::recorder>(options);
    collector_ = std::make_unique<tracer::cupti_collector>(*recorder_);
  }
  void TearDown() override {
    collector_.reset();
    for (void* p : blocks_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // A cudaMalloc'd block the recorder knows about, as the runtime's allocator reports one.
  template <class T>
  T* block(std::size_t n) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    recorder_->on_allocate(p, n * sizeof(T), stream_, false);
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }
  template <class T>
  std::vector<T> download(const T* src, std::size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  tracer::trace finish() {
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    collector_->flush();
    return recorder_->take();
  }
  static std::vector<const tracer::event*> launches_of(const tracer::trace& t, const std::string& name) {
    std::vector<const tracer::event*> found;
    for (const tracer::event& e : t.events)
      if (e.kind == tracer::event_kind::launch && t.kernels.at(e.kernel).name == name) found.push_back(&e);
    return found;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<tracer::recorder> recorder_;
  std::unique_ptr<tracer::cupti_collector> collector_;
  std::vector<void*> blocks_;
};

TEST_F(LaunchKindsOnGpu, AClusterLaunchIsRecordedWithItsShapeAndReplayedWithIt) {
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "thread-block clusters need compute capability 9.0; this device has " << major;
  constexpr int blocks = 8;
  auto* out = block<std::int32_t>(blocks);
  ASSERT_EQ(launch_cluster_rank(out, blocks, 2, stream_), cudaSuccess);
  std::vector<std::int32_t> clustered(blocks), alone(blocks);
  for (int b = 0; b < blocks; ++b) {
    clustered[b] = 1000 * (b / 2) + b % 2;
    alone[b] = 1000 * b;
  }
  ASSERT_EQ(download(out, blocks), clustered);
  const tracer::trace t = finish();
  const auto launches = launches_of(t, cluster_rank_kernel_name);
  ASSERT_EQ(launches.size(), 1U);
  const auto attrs = t.attributes_of(launches[0]->seq);
  ASSERT_EQ(attrs.size(), 1U);
  EXPECT_EQ(attrs[0].attribute.id, device::launch_attribute_id::cluster_dimension);
  EXPECT_EQ(device::cluster_of(std::vector<device::launch_attribute>{attrs[0].attribute}),
            (device::cluster_shape{2, 1, 1}));
  EXPECT_EQ(launches[0]->flags & tracer::event_flags::names_event, 0);  // replayable

  // Launched again as the replay engine does: the recorded bytes and attributes.
  std::string why;
  const device::driver_api* api = device::load_driver(&why);
  ASSERT_NE(api, nullptr) << why;
  CUcontext context = nullptr;
  ASSERT_EQ(api->ctx_get_current(&context), CUDA_SUCCESS);
  runtime::cuda_replay_device replay(*api, context);
  std::vector<device::launch_attribute> recorded;
  for (const auto& r : attrs) recorded.push_back(r.attribute);
  runtime::launch_view v;
  v.kernel_handle = t.kernels.at(launches[0]->kernel).handle;
  v.grid = launches[0]->grid;
  v.block = launches[0]->block;
  v.shared_mem = launches[0]->shared_mem;
  v.params = t.params(*launches[0]);
  v.attributes = recorded;
  ASSERT_EQ(cudaMemset(out, 0xFF, blocks * sizeof(std::int32_t)), cudaSuccess);
  replay.replay(v, stream_);
  EXPECT_EQ(download(out, blocks), clustered);
  // The same bytes as a plain launch: every block is a cluster of its own.
  v.attributes = {};
  replay.replay(v, stream_);
  EXPECT_EQ(download(out, blocks), alone);
}

TEST_F(LaunchKindsOnGpu, ACapturedGraphIsOneLaunchPerGraphLaunchAndPinsWhatIsLive) {
  constexpr int n = 1024;
  auto* x = block<float>(n);
  ASSERT_EQ(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  recorder_->mark_iteration();
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(launch_add_one(x, n, stream_), cudaSuccess);
  ASSERT_EQ(launch_add_one(x, n, stream_), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  auto* y = block<float>(n);  // live at the graph launches, not touched by them
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(launch_add_one(y, n, stream_), cudaSuccess);
  recorder_->mark_iteration();
  const tracer::trace t = finish();
  EXPECT_EQ(download(x, n), std::vector<float>(n, 4.0f));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  // The captured launches did not run when they were made: only y's launch is recorded.
  EXPECT_EQ(launches_of(t, add_one_kernel_name).size(), 1U);
  EXPECT_EQ(launches_of(t, tracer::graph_launch_kernel_name).size(), 2U);
  const tracer::analysed_iteration it = tracer::analyse(t, t.marked_iterations().at(0));
  EXPECT_EQ(it.graph_launches, 2U);
  ASSERT_EQ(it.graph.buffers.size(), 2U);
  for (const auto& b : it.graph.buffers) EXPECT_TRUE(b.never_evict);
}

}  // namespace
}  // namespace sublinear::gpu_tests
