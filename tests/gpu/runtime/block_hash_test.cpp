// The engine's hashes on a GPU (Note [Hash on the device] in
// runtime/cuda/block_hash_terms.hpp): the kernel computes the host reference's value for
// any length, a changed byte changes it, a hash sees exactly the work queued before it on
// its stream, and slots are reused only once their copies are back (more hashes in flight
// than a chunk holds, on two streams, with futures dropped unread). The host-device
// twin of the hash's arithmetic: tests/runtime/block_hash_terms_test.cpp.
//
// Compiled in CI; every case skips with the reason where there is no driver.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/cuda/driver_api.hpp"
#include "device/cuda/driver_table.hpp"
#include "gpu_environment.hpp"
#include "runtime/cuda/block_hash_terms.hpp"
#include "runtime/cuda/cuda_replay_device.hpp"

namespace sublinear::gpu_tests {
namespace {

class BlockHashOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cuda_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the primary context, current
    std::string why;
    const device::driver_api* api = device::load_driver(&why);
    ASSERT_NE(api, nullptr) << why;
    CUcontext context = nullptr;
    ASSERT_EQ(api->ctx_get_current(&context), CUDA_SUCCESS);
    dev_ = std::make_unique<runtime::cuda_replay_device>(*api, context);
    ASSERT_EQ(dev_->hash_site(), "hashed on the GPU");
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&other_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (other_ != nullptr) cudaStreamSynchronize(other_);
    dev_.reset();
    for (void* p : blocks_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (other_ != nullptr) cudaStreamDestroy(other_);
  }
  // A device block holding `bytes` random bytes, and the same bytes on the host.
  unsigned char* block(std::vector<unsigned char>& host, std::size_t bytes, std::uint32_t seed) {
    host.resize(bytes);
    std::mt19937 random(seed);
    for (auto& b : host) b = static_cast<unsigned char>(random());
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes == 0 ? 1 : bytes), cudaSuccess);
    blocks_.push_back(p);
    if (bytes != 0) {
      EXPECT_EQ(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    return static_cast<unsigned char*>(p);
  }
  std::uint64_t hash(const void* p, std::size_t bytes, cudaStream_t s) { return dev_->hash(p, bytes, s).get(); }

  std::unique_ptr<runtime::cuda_replay_device> dev_;
  cudaStream_t stream_ = nullptr, other_ = nullptr;
  std::vector<void*> blocks_;
};

TEST_F(BlockHashOnGpu, EqualsTheHostReferenceForEveryLength) {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{4099},
                            std::size_t{2} << 20, (std::size_t{33} << 20) + 5}) {
    std::vector<unsigned char> host;
    const unsigned char* p = block(host, bytes, static_cast<std::uint32_t>(bytes));
    EXPECT_EQ(hash(p, bytes, stream_), runtime::block_hash::reference(host.data(), bytes)) << bytes << " bytes";
  }
}

TEST_F(BlockHashOnGpu, OneChangedByteChangesIt) {
  const std::size_t bytes = std::size_t{2} << 20;
  std::vector<unsigned char> host;
  unsigned char* p = block(host, bytes, 7);
  const std::uint64_t before = hash(p, bytes, stream_);
  for (std::size_t at : {std::size_t{0}, bytes / 2 + 3, bytes - 1}) {
    ASSERT_EQ(cudaMemsetAsync(p + at, host[at] ^ 0x01, 1, stream_), cudaSuccess);
    const std::uint64_t after = hash(p, bytes, stream_);
    EXPECT_NE(after, before) << "byte " << at;
    ASSERT_EQ(cudaMemsetAsync(p + at, host[at], 1, stream_), cudaSuccess);
    EXPECT_EQ(hash(p, bytes, stream_), before) << "byte " << at << " restored";
  }
}

TEST_F(BlockHashOnGpu, SeesTheWorkQueuedBeforeItAndNotAfter) {
  const std::size_t bytes = std::size_t{8} << 20;
  std::vector<unsigned char> host;
  unsigned char* p = block(host, bytes, 11);
  const std::uint64_t original = runtime::block_hash::reference(host.data(), bytes);
  ASSERT_EQ(cudaMemsetAsync(p, 0x5A, bytes, stream_), cudaSuccess);
  auto filled = dev_->hash(p, bytes, stream_);
  ASSERT_EQ(cudaMemcpyAsync(p, host.data(), bytes, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  auto restored = dev_->hash(p, bytes, stream_);
  const std::vector<unsigned char> fives(bytes, 0x5A);
  EXPECT_EQ(filled.get(), runtime::block_hash::reference(fives.data(), bytes));
  EXPECT_EQ(restored.get(), original);
}

TEST_F(BlockHashOnGpu, SlotsComeBackOnlyOnceTheirCopiesAre) {
  // More hashes in flight than a chunk of slots (4,096), on two streams; half the results are
  // dropped unread, so their slots are given back while the stream may not be there yet.
  // Once a stream is synchronized, its results are ready() without a wait.
  const std::size_t bytes = 64 * 1024;
  std::vector<unsigned char> a, b;
  const unsigned char* pa = block(a, bytes, 1);
  const unsigned char* pb = block(b, bytes, 2);
  const std::uint64_t ha = runtime::block_hash::reference(a.data(), bytes);
  const std::uint64_t hb = runtime::block_hash::reference(b.data(), bytes);
  for (int round = 0; round < 3; ++round) {
    std::vector<runtime::hash_result> kept_a, kept_b;
    for (int k = 0; k < 2500; ++k) {
      auto fa = dev_->hash(pa, bytes, stream_);
      auto fb = dev_->hash(pb, bytes, other_);
      if (k % 2 == 0) {
        kept_a.push_back(fa);
        kept_b.push_back(fb);
      }
    }
    ASSERT_EQ(cudaStreamSynchronize(other_), cudaSuccess);
    for (auto& f : kept_b) ASSERT_TRUE(f.ready()) << "round " << round << ": the stream is past it";
    for (auto& f : kept_a) ASSERT_EQ(f.get(), ha) << "round " << round;
    for (auto& f : kept_b) ASSERT_EQ(f.get(), hb) << "round " << round;
  }
}

TEST_F(BlockHashOnGpu, AnUnalignedBlockIsHashedOnTheHostConsistently) {
  const std::size_t bytes = 4096;
  std::vector<unsigned char> host;
  unsigned char* p = block(host, bytes + 8, 5);
  const std::uint64_t once = hash(p + 3, bytes, stream_);
  EXPECT_EQ(hash(p + 3, bytes, stream_), once);
  ASSERT_EQ(cudaMemsetAsync(p + 100, host[100] ^ 0xFF, 1, stream_), cudaSuccess);
  EXPECT_NE(hash(p + 3, bytes, stream_), once);
}

}  // namespace
}  // namespace sublinear::gpu_tests
