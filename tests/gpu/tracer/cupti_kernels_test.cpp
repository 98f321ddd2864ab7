// The CUPTI collector on hand-written CUDA kernels (tests/gpu/kernels/tracer_kernels.cu):
// what the recorder sees of pointers hidden in by-value structs, of an in-place kernel and
// of a kernel pair sharing a workspace, and whether a Philox kernel seeded by value
// regenerates its output bit for bit when its recorded bytes are launched again, as the
// replay engine does. tests/tracer/cupti_collector_test.cpp covers the two launch forms,
// parameter packing and durations on a PTX kernel; nothing here repeats it.
//
// Compiled in CI; every case skips with the reason where there is no driver or no CUPTI.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_environment.hpp"
#include "kernels/tracer_kernels.hpp"
#include "tracer/analysis.hpp"
#include "tracer/cupti/cupti_collector.hpp"
#include "tracer/events.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::gpu_tests {
namespace {

using tracer::block_extent;
using tracer::event;
using tracer::event_kind;
using tracer::trace;
using tracer::write_record;
namespace event_flags = tracer::event_flags;

#define ASSERT_CUDA(expr)                                                               \
  do {                                                                                  \
    const cudaError_t status_ = (expr);                                                 \
    ASSERT_EQ(status_, cudaSuccess) << #expr << ": " << cudaGetErrorName(status_) << " " \
                                    << cudaGetErrorString(status_);                     \
  } while (0)

std::uint64_t address(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

// Where and how large each block is, without the recorder's allocation names.
using extent = std::pair<std::uint64_t, std::uint64_t>;
std::vector<extent> extents(const std::vector<block_extent>& blocks) {
  std::vector<extent> out;
  for (const block_extent& b : blocks) out.emplace_back(b.base, b.size);
  return out;
}

class CuptiOnHandWrittenKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cuda_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    if (const std::string why = tracer::cupti_collector::unavailable_reason(); !why.empty()) {
      GTEST_SKIP() << "no CUPTI collector: " << why;
    }
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    tracer::recorder_options options;
    options.device = "cuda";
    recorder_ = std::make_unique<tracer::recorder>(options);
    collector_ = std::make_unique<tracer::cupti_collector>(*recorder_);
  }

  void TearDown() override {
    collector_.reset();
    for (float* p : blocks_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // A cudaMalloc'd block the recorder knows about (cudaMalloc is not the caching
  // allocator, so the test reports it, as the runtime's allocator would).
  float* block(std::size_t floats) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, floats * sizeof(float)), cudaSuccess);
    recorder_->on_allocate(p, floats * sizeof(float), stream_, false);
    blocks_.push_back(static_cast<float*>(p));
    return static_cast<float*>(p);
  }
  void free_block(float* p, std::size_t floats) {
    recorder_->on_free(p, floats * sizeof(float), stream_);
    blocks_.erase(std::find(blocks_.begin(), blocks_.end(), p));
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  }
  void upload(float* dst, const std::vector<float>& values) {
    EXPECT_EQ(cudaMemcpy(dst, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> download(const float* src, std::size_t floats) {
    std::vector<float> values(floats);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(values.data(), src, floats * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return values;
  }
  // Everything recorded so far, with durations delivered.
  trace finish() {
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    collector_->flush();
    return recorder_->take();
  }

  // One marked iteration of a two-kernel reduction of n ones: partial sums into a workspace
  // allocated and freed around the two launches, then the final sum into `out`.
  struct reduction {
    static constexpr int n = 1 << 16;
    static constexpr int parts = 128;
    float* in = nullptr;
    float* out = nullptr;
    float* workspace = nullptr;
  };
  reduction reduce_in_one_iteration() {
    reduction r;
    r.in = block(reduction::n);
    r.out = block(1);
    upload(r.in, std::vector<float>(reduction::n, 1.0f));
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    recorder_->mark_iteration();
    r.workspace = block(reduction::parts);
    EXPECT_EQ(launch_partial_sums(r.in, reduction::n, r.workspace, reduction::parts, stream_), cudaSuccess);
    EXPECT_EQ(launch_finish_sum(r.workspace, reduction::parts, r.out, stream_), cudaSuccess);
    free_block(r.workspace, reduction::parts);
    recorder_->mark_iteration();
    return r;
  }

  static std::vector<const event*> launches_of(const trace& t, const std::string& name) {
    std::vector<const event*> found;
    for (const event& e : t.events) {
      if (e.kind == event_kind::launch && t.kernels.at(e.kernel).name == name) found.push_back(&e);
    }
    return found;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<tracer::recorder> recorder_;
  std::unique_ptr<tracer::cupti_collector> collector_;
  std::vector<float*> blocks_;
};

TEST_F(CuptiOnHandWrittenKernels, FindsEveryPointerInsideByValueStructs) {
  constexpr int n = 1000;
  float* a = block(n);
  float* b = block(n + 64);
  float* out = block(n);
  pointer_triple extra{{block(n), block(n), block(n)}};
  upload(a, std::vector<float>(n, 1.0f));
  upload(b, std::vector<float>(n + 64, 2.0f));
  ASSERT_CUDA(launch_gather(gather_operands{a, n, b + 64, out}, extra, stream_));
  const trace t = finish();

  const auto launches = launches_of(t, gather_kernel_name);
  ASSERT_EQ(launches.size(), 1u);
  std::vector<extent> expected;
  for (const float* p : {a, b, out, extra.p[0], extra.p[1], extra.p[2]}) {
    const std::size_t floats = p == b ? n + 64 : n;
    expected.emplace_back(address(p), floats * sizeof(float));
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(extents(recorder_->touched_blocks(t.params(*launches[0]))), expected)
      << "a pointer inside a by-value struct (or the interior pointer b + 64) was missed";
  // The kernel really went through those pointers: its results are where they point.
  EXPECT_EQ(download(out, n), std::vector<float>(n, 3.0f));
  EXPECT_EQ(download(extra.p[2], n), std::vector<float>(n, 5.0f));
}

TEST_F(CuptiOnHandWrittenKernels, TakesTheLayoutOfStructParametersFromTheDriver) {
  constexpr int n = 256;
  pointer_triple extra{{block(n), block(n), block(n)}};
  ASSERT_CUDA(launch_gather(gather_operands{block(n), n, block(n), block(n)}, extra, stream_));
  const trace t = finish();

  const auto launches = launches_of(t, gather_kernel_name);
  ASSERT_EQ(launches.size(), 1u);
  const tracer::kernel_info& k = t.kernels.at(launches[0]->kernel);
  const std::vector<tracer::param_slot> expected{
      {0, static_cast<std::uint32_t>(sizeof(gather_operands))},
      {static_cast<std::uint32_t>(sizeof(gather_operands)), static_cast<std::uint32_t>(sizeof(pointer_triple))}};
  EXPECT_EQ(k.params, expected);
  EXPECT_EQ(launches[0]->bytes, sizeof(gather_operands) + sizeof(pointer_triple));
}

TEST_F(CuptiOnHandWrittenKernels, InPlaceKernelTouchesOnlyTheBufferItUpdates) {
  constexpr int n = 4096;
  float* x = block(n);
  float* bystander = block(n);
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
  upload(x, values);
  ASSERT_CUDA(launch_relu_in_place(x, n, stream_));
  const trace t = finish();

  const auto launches = launches_of(t, relu_kernel_name);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(extents(recorder_->touched_blocks(t.params(*launches[0]))),
            (std::vector<extent>{{address(x), n * sizeof(float)}}));
  const std::vector<float> result = download(x, n);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(result[static_cast<std::size_t>(i)], std::max(values[static_cast<std::size_t>(i)], 0.0f)) << i;
  }
  (void)bystander;
}

TEST_F(CuptiOnHandWrittenKernels, WorkspaceIsABufferLiveOnlyAcrossTheLaunchesUsingIt) {
  constexpr int n = reduction::n;
  const reduction r = reduce_in_one_iteration();
  float* in = r.in;
  float* out = r.out;
  float* workspace = r.workspace;
  const trace t = finish();

  const auto iterations = t.marked_iterations();
  ASSERT_EQ(iterations.size(), 1u);
  const tracer::analysed_iteration a = tracer::analyse(t, iterations[0]);
  ASSERT_EQ(a.graph.launches.size(), 2u);
  const auto at = [&](const void* p) {
    const auto it = std::find(a.buffer_addresses.begin(), a.buffer_addresses.end(), address(p));
    return static_cast<policy::buffer_id>(it - a.buffer_addresses.begin());
  };
  const policy::buffer_id ws = at(workspace);
  ASSERT_LT(ws, a.graph.buffers.size()) << "the workspace is not a buffer of the iteration";
  const policy::buffer& w = a.graph.buffers[ws];
  EXPECT_NE(w.alloc_index, policy::none) << "the workspace was allocated in the iteration";
  EXPECT_EQ(w.alloc_at, 0u);
  EXPECT_EQ(w.free_at, 2u);
  EXPECT_EQ(w.users, (std::vector<policy::launch_id>{0, 1}));
  // The input and the output were live before the iteration: persistent buffers.
  EXPECT_TRUE(a.graph.buffers[at(in)].persistent());
  EXPECT_EQ(a.graph.buffers[at(in)].users, (std::vector<policy::launch_id>{0}));
  EXPECT_EQ(a.graph.buffers[at(out)].users, (std::vector<policy::launch_id>{1}));
  EXPECT_EQ(download(out, 1), std::vector<float>{static_cast<float>(n)});
}

// Note [Write observation on CUDA]: with a listener installed (as the process runtime
// has), the collector hashes the blocks each kernel touches before and after it while
// recording, so the trace says which blocks it wrote: the partial sums write the
// workspace and only read the input; the final sum writes the output and only reads the
// workspace. Without it every touched block would count as written.
TEST_F(CuptiOnHandWrittenKernels, WritesAreObservedWhenAListenerIsInstalled) {
  struct quiet final : tracer::launch_listener {
    void on_enter(const tracer::launch_description&) override {}
    void on_exit(const tracer::launch_description&) override {}
  } listener;
  collector_->set_listener(&listener);
  constexpr int n = reduction::n;
  const reduction r = reduce_in_one_iteration();
  float* out = r.out;
  float* workspace = r.workspace;
  collector_->set_listener(nullptr);
  const trace t = finish();

  std::vector<const event*> launches;
  for (const event& e : t.events)
    if (e.kind == event_kind::launch) launches.push_back(&e);
  ASSERT_EQ(launches.size(), 2u);
  const auto written_by = [&](const event* e) {
    std::vector<std::uint64_t> out_bases;
    for (const write_record& w : t.writes)
      if (w.seq == e->seq) out_bases.push_back(w.address);
    return out_bases;
  };
  for (const event* e : launches) EXPECT_NE(e->flags & event_flags::writes_observed, 0) << "not observed";
  EXPECT_EQ(written_by(launches[0]), std::vector<std::uint64_t>{address(workspace)});
  EXPECT_EQ(written_by(launches[1]), std::vector<std::uint64_t>{address(out)});
  const tracer::analysed_iteration a = tracer::analyse(t, t.marked_iterations().at(0));
  EXPECT_EQ(a.observed_launches, 2u);
  EXPECT_EQ(download(out, 1), std::vector<float>{static_cast<float>(n)});
  // Both are timed apart, so the traced host cost per launch leaves them out (Note
  // [Predicted iteration time]).
  EXPECT_GT(recorder_->observation_ns(), 0u);
  EXPECT_GT(recorder_->recording_ns(), 0u) << "the CUPTI collector times its recording";
}

// Launches the recorded bytes of `e` again, as the replay engine does (cuLaunchKernel with
// the packed parameter block), through the driver entry point cudart hands out.
cudaError_t relaunch(const trace& t, const event& e, cudaStream_t stream, std::vector<std::byte> params) {
  using launch_fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 CUstream, void**, void**);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e1 = cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000, cudaEnableDefault, &found);
  if (e1 != cudaSuccess) return e1;
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) return cudaErrorSymbolNotFound;
  std::size_t size = params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  const auto function = reinterpret_cast<CUfunction>(t.kernels.at(e.kernel).handle);
  const CUresult r = reinterpret_cast<launch_fn>(fn)(function, e.grid.x, e.grid.y, e.grid.z, e.block.x, e.block.y,
                                                     e.block.z, e.shared_mem, reinterpret_cast<CUstream>(stream),
                                                     nullptr, extra);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorLaunchFailure;
}

std::vector<std::byte> bytes_of(const trace& t, const event& e) {
  const auto span = t.params(e);
  return {span.begin(), span.end()};
}

TEST_F(CuptiOnHandWrittenKernels, PhiloxKernelDrawsTheReferenceNumbers) {
  constexpr int n = 10007;
  const philox_state rng{0x5eed5eedULL, 4242};
  float* in = block(n);
  float* out = block(n);
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = 1.0f + static_cast<float>(i) * 0.25f;
  upload(in, values);
  ASSERT_CUDA(launch_philox_dropout(rng, in, out, n, 0.8f, 1.25f, stream_));
  std::vector<float> expected(n);
  philox_dropout_reference(rng, values.data(), expected.data(), n, 0.8f, 1.25f);
  const std::vector<float> result = download(out, n);
  EXPECT_EQ(std::memcmp(result.data(), expected.data(), n * sizeof(float)), 0);
  const auto dropped = std::count(result.begin(), result.end(), 0.0f);
  EXPECT_GT(dropped, n / 10) << "keep = 0.8 should drop about a fifth";
  EXPECT_LT(dropped, n * 3 / 10);
}

TEST_F(CuptiOnHandWrittenKernels, PhiloxKernelReplaysBitIdenticallyFromItsRecordedBytes) {
  constexpr int n = 1 << 15;
  float* in = block(n);
  float* out = block(n);
  upload(in, std::vector<float>(n, 3.0f));
  ASSERT_CUDA(launch_philox_dropout(philox_state{1234, 7}, in, out, n, 0.5f, 2.0f, stream_));
  const std::vector<float> original = download(out, n);
  const trace t = finish();
  const auto launches = launches_of(t, dropout_kernel_name);
  ASSERT_EQ(launches.size(), 1u);

  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_CUDA(cudaMemsetAsync(out, 0xff, n * sizeof(float), stream_));
    ASSERT_CUDA(relaunch(t, *launches[0], stream_, bytes_of(t, *launches[0])));
    const std::vector<float> again = download(out, n);
    EXPECT_EQ(std::memcmp(again.data(), original.data(), n * sizeof(float)), 0) << "replay " << replay;
  }
}

TEST_F(CuptiOnHandWrittenKernels, PhiloxOffsetInTheRecordedBytesDecidesTheMask) {
  // The control for the replay test: the mask really comes from the bytes replayed, so a
  // different offset word gives a different one.
  constexpr int n = 1 << 12;
  float* in = block(n);
  float* out = block(n);
  upload(in, std::vector<float>(n, 1.0f));
  const philox_state rng{99, 1};
  ASSERT_CUDA(launch_philox_dropout(rng, in, out, n, 0.5f, 2.0f, stream_));
  const std::vector<float> original = download(out, n);
  const trace t = finish();
  const auto launches = launches_of(t, dropout_kernel_name);
  ASSERT_EQ(launches.size(), 1u);
  std::vector<std::byte> params = bytes_of(t, *launches[0]);
  ASSERT_GE(params.size(), sizeof(philox_state));
  philox_state recorded{};
  std::memcpy(&recorded, params.data(), sizeof recorded);
  ASSERT_EQ(recorded.seed, rng.seed);
  ASSERT_EQ(recorded.offset, rng.offset);
  recorded.offset += 1;
  std::memcpy(params.data(), &recorded, sizeof recorded);
  ASSERT_CUDA(relaunch(t, *launches[0], stream_, params));
  const std::vector<float> shifted = download(out, n);
  EXPECT_NE(std::memcmp(shifted.data(), original.data(), n * sizeof(float)), 0);
}

}  // namespace
}  // namespace sublinear::gpu_tests
