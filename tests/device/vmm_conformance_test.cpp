// One conformance suite for every VMM backend (device/vmm.hpp), plus the checks that
// only make sense for one of them.
//
// Each backend supplies how to build it and how the host reaches its memory: the host
// backend's memory is ordinary memory, a GPU's is reached with synchronous copies. A
// backend that cannot run here (CUDA on a machine without a driver) skips every case
// with the reason, so the skip is visible in the test output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "device/host/host_vmm.hpp"
#include "device/vmm.hpp"
#include "sublinear/error.hpp"

#if SUBLINEAR_HAVE_CUDA
#include "device/cuda/cuda_events.hpp"
#include "device/cuda/cuda_vmm.hpp"
#include "device/cuda/driver_api.hpp"
#endif

namespace sublinear::device {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t mib = std::size_t{1} << 20;

struct host_backend {
  static std::unique_ptr<vmm> make(std::string* /*why*/) {
    return std::make_unique<host_vmm>(host_vmm_options{64 * kib, 256 * mib});
  }
  static bool write(vmm& /*device*/, void* dst, const void* src, std::size_t n) {
    std::memcpy(dst, src, n);
    return true;
  }
  static bool read(vmm& /*device*/, void* dst, const void* src, std::size_t n) {
    std::memcpy(dst, src, n);
    return true;
  }
  // Writes one byte; kills the process if the byte is not writable.
  static void poke(vmm& /*device*/, void* p) { *static_cast<volatile unsigned char*>(p) = 0x5a; }
  static std::size_t chunk_bytes(vmm& device) {
    return static_cast<host_vmm&>(device).chunk_bytes_in_use();
  }
};

#if SUBLINEAR_HAVE_CUDA
struct cuda_backend {
  static std::unique_ptr<vmm> make(std::string* why) { return make_cuda_vmm(0, why); }
  static bool write(vmm& device, void* dst, const void* src, std::size_t n) {
    return static_cast<cuda_vmm&>(device).copy_to_device(dst, src, n) == vmm_status::ok;
  }
  static bool read(vmm& device, void* dst, const void* src, std::size_t n) {
    return static_cast<cuda_vmm&>(device).copy_to_host(dst, src, n) == vmm_status::ok;
  }
  // The host cannot dereference device memory; a copy that the driver refuses is the
  // device's way of saying the range is not accessible, and it ends the process too.
  static void poke(vmm& device, void* p) {
    const unsigned char byte = 0x5a;
    if (!write(device, p, &byte, 1)) std::abort();
  }
  static std::size_t chunk_bytes(vmm& device) {
    return static_cast<cuda_vmm&>(device).chunk_bytes_in_use();
  }
};
#else
struct cuda_backend {
  static std::unique_ptr<vmm> make(std::string* why) {
    *why = "this build has no CUDA backend (SUBLINEAR_CUDA=OFF or no toolkit found)";
    return nullptr;
  }
  static bool write(vmm&, void*, const void*, std::size_t) { return false; }
  static bool read(vmm&, void*, const void*, std::size_t) { return false; }
  static void poke(vmm&, void*) { std::abort(); }
  static std::size_t chunk_bytes(vmm&) { return 0; }
};
#endif

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> bytes(n);
  for (std::size_t i = 0; i < n; ++i) {
    bytes[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
  }
  return bytes;
}

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

template <class Backend>
class VmmConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    std::string why;
    device_ = Backend::make(&why);
    if (device_ == nullptr) GTEST_SKIP() << "no CUDA driver: " << why;
    g_ = device_->granularity();
  }

  vmm& device() { return *device_; }

  std::byte* reserve(std::size_t size) {
    void* p = nullptr;
    EXPECT_EQ(device_->reserve(size, &p), vmm_status::ok) << device_->last_error();
    return static_cast<std::byte*>(p);
  }
  chunk_handle create(std::size_t size) {
    chunk_handle h = 0;
    EXPECT_EQ(device_->create_chunk(size, &h), vmm_status::ok) << device_->last_error();
    return h;
  }
  void map_rw(std::byte* at, std::size_t size, chunk_handle h) {
    EXPECT_EQ(device_->map(at, size, h), vmm_status::ok) << device_->last_error();
    EXPECT_EQ(device_->set_access(at, size), vmm_status::ok) << device_->last_error();
  }
  bool write(void* dst, const std::vector<unsigned char>& bytes) {
    return Backend::write(*device_, dst, bytes.data(), bytes.size());
  }
  std::vector<unsigned char> read(const void* src, std::size_t n) {
    std::vector<unsigned char> bytes(n);
    EXPECT_TRUE(Backend::read(*device_, bytes.data(), src, n)) << device_->last_error();
    return bytes;
  }

  std::unique_ptr<vmm> device_;
  std::size_t g_ = 0;
};

TYPED_TEST_SUITE_P(VmmConformance);

TYPED_TEST_P(VmmConformance, GranularityIsAPowerOfTwo) {
  const std::size_t g = this->g_;
  EXPECT_NE(g, 0u);
  EXPECT_EQ(g & (g - 1), 0u);
  EXPECT_GE(this->device().physical_capacity(), g);
}

TYPED_TEST_P(VmmConformance, ReserveReturnsGranularityAlignedAddress) {
  std::byte* base = this->reserve(4 * this->g_);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % this->g_, 0u);
  EXPECT_EQ(this->device().release(base, 4 * this->g_), vmm_status::ok);
}

TYPED_TEST_P(VmmConformance, ReserveRejectsSizeNotMultipleOfGranularity) {
  void* p = nullptr;
  EXPECT_EQ(this->device().reserve(this->g_ + this->g_ / 2, &p), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().reserve(0, &p), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, ReleaseRejectsRangeThatIsNotAWholeReservation) {
  std::byte* base = this->reserve(4 * this->g_);
  EXPECT_EQ(this->device().release(base, this->g_), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().release(base + this->g_, 3 * this->g_), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().release(base, 4 * this->g_), vmm_status::ok);
}

TYPED_TEST_P(VmmConformance, ReleaseRejectsAddressNoLongerReserved) {
  std::byte* base = this->reserve(2 * this->g_);
  ASSERT_EQ(this->device().release(base, 2 * this->g_), vmm_status::ok);
  EXPECT_EQ(this->device().release(base, 2 * this->g_), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, CreateChunkRejectsSizeNotMultipleOfGranularity) {
  chunk_handle h = 0;
  EXPECT_EQ(this->device().create_chunk(this->g_ / 2, &h), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().create_chunk(0, &h), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, MappedChunkIsWritableAfterSetAccess) {
  const std::size_t size = 2 * this->g_;
  std::byte* base = this->reserve(size);
  const chunk_handle h = this->create(size);
  this->map_rw(base, size, h);
  const auto bytes = pattern(size, 1);
  ASSERT_TRUE(this->write(base, bytes)) << this->device().last_error();
  EXPECT_EQ(this->read(base, size), bytes);
}

TYPED_TEST_P(VmmConformance, ChunkKeepsItsDataWhenRemappedElsewhere) {
  const std::size_t size = this->g_;
  std::byte* first = this->reserve(2 * size);
  std::byte* second = this->reserve(size);
  const chunk_handle h = this->create(size);
  this->map_rw(first, size, h);
  const auto bytes = pattern(size, 2);
  ASSERT_TRUE(this->write(first, bytes)) << this->device().last_error();
  ASSERT_EQ(this->device().unmap(first, size), vmm_status::ok);

  // Elsewhere in the same reservation, then in another one.
  this->map_rw(first + size, size, h);
  EXPECT_EQ(this->read(first + size, size), bytes);
  ASSERT_EQ(this->device().unmap(first + size, size), vmm_status::ok);
  this->map_rw(second, size, h);
  EXPECT_EQ(this->read(second, size), bytes);
}

// Note [Stream-ordered handoff] maps a chunk at its new address before the old mapping is
// gone: both must show the same bytes, and the chunk must outlive the first unmap.
TYPED_TEST_P(VmmConformance, AChunkMappedAtTwoAddressesShowsTheSameBytesThroughBoth) {
  const std::size_t size = this->g_;
  std::byte* old_home = this->reserve(size);
  std::byte* new_home = this->reserve(size);
  const chunk_handle h = this->create(size);
  this->map_rw(old_home, size, h);
  this->map_rw(new_home, size, h);
  const auto bytes = pattern(size, 7);
  ASSERT_TRUE(this->write(new_home, bytes)) << this->device().last_error();
  EXPECT_EQ(this->read(old_home, size), bytes) << "the two mappings do not share the chunk";
  EXPECT_EQ(this->device().release_chunk(h), vmm_status::invalid_argument) << "released while mapped twice";
  ASSERT_EQ(this->device().unmap(old_home, size), vmm_status::ok);
  EXPECT_EQ(this->read(new_home, size), bytes) << "unmapping the old address took the bytes";
  EXPECT_EQ(this->device().release_chunk(h), vmm_status::invalid_argument) << "released while still mapped once";
}

// The interface's own copies (used by the allocator's segment trim): a round trip through
// host memory, and a refusal, not a fault, where the range is not wholly mapped.
TYPED_TEST_P(VmmConformance, CopiesRoundTripAMappedRangeAndRefuseAnUnmappedOne) {
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(2 * g);
  const chunk_handle h = this->create(g);
  this->map_rw(base, g, h);
  const auto bytes = pattern(g, 5);
  ASSERT_EQ(this->device().copy_to_device(base, bytes.data(), g), vmm_status::ok) << this->device().last_error();
  std::vector<unsigned char> back(g);
  ASSERT_EQ(this->device().copy_to_host(back.data(), base, g), vmm_status::ok) << this->device().last_error();
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(this->read(base, g), bytes) << "the copy reached the device's memory";
  EXPECT_NE(this->device().copy_to_device(base + g, bytes.data(), g), vmm_status::ok) << "never mapped";
  EXPECT_NE(this->device().copy_to_host(back.data(), base, 2 * g), vmm_status::ok) << "half mapped";
  EXPECT_EQ(this->read(base, g), bytes) << "a refused copy changes nothing";
}

TYPED_TEST_P(VmmConformance, SetAccessCoversAdjacentMappingsInOneCall) {
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(3 * g);
  const chunk_handle a = this->create(g);
  const chunk_handle b = this->create(2 * g);
  ASSERT_EQ(this->device().map(base, g, a), vmm_status::ok);
  ASSERT_EQ(this->device().map(base + g, 2 * g, b), vmm_status::ok);
  ASSERT_EQ(this->device().set_access(base, 3 * g), vmm_status::ok) << this->device().last_error();
  const auto bytes = pattern(3 * g, 3);
  ASSERT_TRUE(this->write(base, bytes)) << this->device().last_error();
  EXPECT_EQ(this->read(base, 3 * g), bytes);
}

TYPED_TEST_P(VmmConformance, ReservedRangeFaultsBeforeAnyMapping) {
  std::byte* base = this->reserve(this->g_);
  EXPECT_DEATH(TypeParam::poke(this->device(), base + 64), "");
}

TYPED_TEST_P(VmmConformance, UnmappedRangeFaultsOnAccess) {
  std::byte* base = this->reserve(this->g_);
  const chunk_handle h = this->create(this->g_);
  this->map_rw(base, this->g_, h);
  TypeParam::poke(this->device(), base + 64);  // fine while mapped
  ASSERT_EQ(this->device().unmap(base, this->g_), vmm_status::ok);
  EXPECT_DEATH(TypeParam::poke(this->device(), base + 64), "");
}

TYPED_TEST_P(VmmConformance, MappedRangeFaultsUntilSetAccess) {
  std::byte* base = this->reserve(this->g_);
  const chunk_handle h = this->create(this->g_);
  ASSERT_EQ(this->device().map(base, this->g_, h), vmm_status::ok);
  EXPECT_DEATH(TypeParam::poke(this->device(), base + 64), "");
}

TYPED_TEST_P(VmmConformance, CreateChunkBeyondCapacityReturnsOutOfMemory) {
  const std::size_t g = this->g_;
  const std::size_t too_big = (this->device().physical_capacity() / g + 1) * g;
  chunk_handle h = 0;
  EXPECT_EQ(this->device().create_chunk(too_big, &h), vmm_status::out_of_memory);
  EXPECT_FALSE(this->device().last_error().empty());
}

TYPED_TEST_P(VmmConformance, MapRejectsMisalignedAddress) {
  std::byte* base = this->reserve(2 * this->g_);
  const chunk_handle h = this->create(this->g_);
  EXPECT_EQ(this->device().map(base + this->g_ / 2, this->g_, h), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, MapRejectsSizeOtherThanTheChunkSize) {
  std::byte* base = this->reserve(4 * this->g_);
  const chunk_handle h = this->create(2 * this->g_);
  EXPECT_EQ(this->device().map(base, this->g_, h), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().map(base, 4 * this->g_, h), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, MapRejectsAddressOutsideAnyReservation) {
  std::byte* gone = this->reserve(this->g_);
  ASSERT_EQ(this->device().release(gone, this->g_), vmm_status::ok);
  const chunk_handle h = this->create(this->g_);
  EXPECT_EQ(this->device().map(gone, this->g_, h), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, MapRejectsRangeCrossingTheEndOfAReservation) {
  std::byte* base = this->reserve(2 * this->g_);
  const chunk_handle h = this->create(2 * this->g_);
  EXPECT_EQ(this->device().map(base + this->g_, 2 * this->g_, h), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, MapRejectsRangeOverlappingAMapping) {
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(4 * g);
  const chunk_handle a = this->create(2 * g);
  const chunk_handle b = this->create(2 * g);
  ASSERT_EQ(this->device().map(base + g, 2 * g, a), vmm_status::ok);
  EXPECT_EQ(this->device().map(base, 2 * g, b), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().map(base + 2 * g, 2 * g, b), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().map(base + g, 2 * g, b), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, MapRejectsReleasedHandle) {
  std::byte* base = this->reserve(this->g_);
  const chunk_handle h = this->create(this->g_);
  ASSERT_EQ(this->device().release_chunk(h), vmm_status::ok);
  EXPECT_EQ(this->device().map(base, this->g_, h), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, SetAccessRejectsRangeNotFullyMapped) {
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(3 * g);
  const chunk_handle h = this->create(g);
  ASSERT_EQ(this->device().map(base, g, h), vmm_status::ok);
  EXPECT_EQ(this->device().set_access(base, 2 * g), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().set_access(base + 2 * g, g), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, UnmapRejectsPartOfAMapping) {
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(2 * g);
  const chunk_handle h = this->create(2 * g);
  this->map_rw(base, 2 * g, h);
  EXPECT_EQ(this->device().unmap(base, g), vmm_status::invalid_argument);
  EXPECT_EQ(this->device().unmap(base + g, g), vmm_status::invalid_argument);
  // Still mapped and usable after the refusals.
  TypeParam::poke(this->device(), base + g);
  EXPECT_EQ(this->device().unmap(base, 2 * g), vmm_status::ok);
}

TYPED_TEST_P(VmmConformance, UnmapRejectsRangeSpanningTwoMappings) {
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(2 * g);
  const chunk_handle a = this->create(g);
  const chunk_handle b = this->create(g);
  ASSERT_EQ(this->device().map(base, g, a), vmm_status::ok);
  ASSERT_EQ(this->device().map(base + g, g, b), vmm_status::ok);
  EXPECT_EQ(this->device().unmap(base, 2 * g), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, UnmapRejectsRangeNeverMapped) {
  std::byte* base = this->reserve(this->g_);
  EXPECT_EQ(this->device().unmap(base, this->g_), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, UnmapRangesUnmapsAdjacentAndSeparateMappingsAndKeepsTheOthers) {
  // Three adjacent mappings, a gap, a fourth, and a fifth left mapped; the batch names
  // them out of order. (The host VMM merges the adjacent ones: Note [Batched unmap].)
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(7 * g);
  const chunk_handle a = this->create(g);
  const chunk_handle b = this->create(2 * g);
  const chunk_handle c = this->create(g);
  const chunk_handle d = this->create(g);
  const chunk_handle e = this->create(g);
  this->map_rw(base, g, a);
  this->map_rw(base + g, 2 * g, b);
  this->map_rw(base + 3 * g, g, c);
  this->map_rw(base + 5 * g, g, d);
  this->map_rw(base + 6 * g, g, e);
  const auto kept = pattern(g, 5);
  ASSERT_TRUE(this->write(base + 6 * g, kept));
  const vmm_range batch[] = {{base + 5 * g, g}, {base + g, 2 * g}, {base, g}, {base + 3 * g, g}};
  ASSERT_EQ(this->device().unmap_ranges(batch), vmm_status::ok) << this->device().last_error();
  EXPECT_EQ(this->read(base + 6 * g, g), kept) << "a mapping outside the batch changed";
  // Each unmapped chunk maps again at its old address, and nothing else is left mapped.
  for (const auto& [at, size, h] : {std::tuple{base, g, a}, std::tuple{base + g, 2 * g, b},
                                    std::tuple{base + 3 * g, g, c}, std::tuple{base + 5 * g, g, d}}) {
    ASSERT_EQ(this->device().map(at, size, h), vmm_status::ok) << this->device().last_error();
    ASSERT_EQ(this->device().unmap(at, size), vmm_status::ok);
  }
  EXPECT_DEATH(TypeParam::poke(this->device(), base + g + 64), "");
  EXPECT_EQ(this->device().unmap(base + 6 * g, g), vmm_status::ok);
  for (chunk_handle h : {a, b, c, d, e}) EXPECT_EQ(this->device().release_chunk(h), vmm_status::ok);
  EXPECT_EQ(this->device().release(base, 7 * g), vmm_status::ok);
}

TYPED_TEST_P(VmmConformance, UnmapRangesWithABadRangeUnmapsNothing) {
  const std::size_t g = this->g_;
  std::byte* base = this->reserve(3 * g);
  const chunk_handle a = this->create(g);
  const chunk_handle b = this->create(g);
  this->map_rw(base, g, a);
  this->map_rw(base + g, g, b);
  const vmm_range never_mapped[] = {{base, g}, {base + 2 * g, g}};
  EXPECT_EQ(this->device().unmap_ranges(never_mapped), vmm_status::invalid_argument);
  EXPECT_FALSE(this->device().last_error().empty());
  const vmm_range twice[] = {{base + g, g}, {base + g, g}};
  EXPECT_EQ(this->device().unmap_ranges(twice), vmm_status::invalid_argument);
  // Both mappings are still there and usable.
  TypeParam::poke(this->device(), base + 64);
  TypeParam::poke(this->device(), base + g + 64);
  const vmm_range both[] = {{base, g}, {base + g, g}};
  EXPECT_EQ(this->device().unmap_ranges(both), vmm_status::ok);
  EXPECT_EQ(this->device().unmap_ranges(std::span<const vmm_range>{}), vmm_status::ok) << "an empty batch";
  for (chunk_handle h : {a, b}) EXPECT_EQ(this->device().release_chunk(h), vmm_status::ok);
}

TYPED_TEST_P(VmmConformance, ReleaseChunkRejectsMappedChunk) {
  std::byte* base = this->reserve(this->g_);
  const chunk_handle h = this->create(this->g_);
  ASSERT_EQ(this->device().map(base, this->g_, h), vmm_status::ok);
  EXPECT_EQ(this->device().release_chunk(h), vmm_status::invalid_argument);
  ASSERT_EQ(this->device().unmap(base, this->g_), vmm_status::ok);
  EXPECT_EQ(this->device().release_chunk(h), vmm_status::ok);
}

TYPED_TEST_P(VmmConformance, ReleaseChunkRejectsHandleAlreadyReleased) {
  const chunk_handle h = this->create(this->g_);
  ASSERT_EQ(this->device().release_chunk(h), vmm_status::ok);
  EXPECT_EQ(this->device().release_chunk(h), vmm_status::invalid_argument);
}

TYPED_TEST_P(VmmConformance, ReleaseRejectsReservationWithLiveMappings) {
  std::byte* base = this->reserve(2 * this->g_);
  const chunk_handle h = this->create(this->g_);
  ASSERT_EQ(this->device().map(base + this->g_, this->g_, h), vmm_status::ok);
  EXPECT_EQ(this->device().release(base, 2 * this->g_), vmm_status::invalid_argument);
  ASSERT_EQ(this->device().unmap(base + this->g_, this->g_), vmm_status::ok);
  EXPECT_EQ(this->device().release(base, 2 * this->g_), vmm_status::ok);
}

TYPED_TEST_P(VmmConformance, FailedCallExplainsItselfInLastError) {
  void* p = nullptr;
  ASSERT_EQ(this->device().reserve(this->g_ + this->g_ / 2, &p), vmm_status::invalid_argument);
  EXPECT_THAT(this->device().last_error(), HasSubstr("granularity"));
}

TYPED_TEST_P(VmmConformance, ReleaseChunkGivesItsBytesBack) {
  const chunk_handle a = this->create(this->g_);
  const chunk_handle b = this->create(2 * this->g_);
  EXPECT_EQ(TypeParam::chunk_bytes(this->device()), 3 * this->g_);
  ASSERT_EQ(this->device().release_chunk(b), vmm_status::ok);
  EXPECT_EQ(TypeParam::chunk_bytes(this->device()), this->g_);
  ASSERT_EQ(this->device().release_chunk(a), vmm_status::ok);
  EXPECT_EQ(TypeParam::chunk_bytes(this->device()), 0u);
}

TYPED_TEST_P(VmmConformance, ManyChunksMapAndUnmapWithoutLeakingDescriptors) {
  constexpr std::size_t count = 2000;
  const std::size_t g = this->g_;
  vmm& device = this->device();
  // A first cycle lets a backend open whatever it opens once.
  {
    std::byte* warm = this->reserve(g);
    const chunk_handle h = this->create(g);
    this->map_rw(warm, g, h);
    ASSERT_EQ(device.unmap(warm, g), vmm_status::ok);
    ASSERT_EQ(device.release_chunk(h), vmm_status::ok);
    ASSERT_EQ(device.release(warm, g), vmm_status::ok);
  }
  const std::size_t descriptors = open_descriptors();

  std::byte* base = this->reserve(count * g);
  std::vector<chunk_handle> chunks(count);
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(device.create_chunk(g, &chunks[i]), vmm_status::ok) << i << ": " << device.last_error();
    ASSERT_EQ(device.map(base + i * g, g, chunks[i]), vmm_status::ok) << i << ": " << device.last_error();
  }
  ASSERT_EQ(device.set_access(base, count * g), vmm_status::ok) << device.last_error();
  for (std::size_t i = 0; i < count; i += 97) {
    const std::vector<unsigned char> tag(8, static_cast<unsigned char>(i));
    ASSERT_TRUE(this->write(base + i * g, tag));
    EXPECT_EQ(this->read(base + i * g, tag.size()), tag) << i;
  }
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(device.unmap(base + i * g, g), vmm_status::ok) << i;
    ASSERT_EQ(device.release_chunk(chunks[i]), vmm_status::ok) << i;
  }
  EXPECT_EQ(device.release(base, count * g), vmm_status::ok);
  EXPECT_EQ(TypeParam::chunk_bytes(device), 0u);
  EXPECT_EQ(open_descriptors(), descriptors);
}

REGISTER_TYPED_TEST_SUITE_P(VmmConformance, GranularityIsAPowerOfTwo,
                            ReserveReturnsGranularityAlignedAddress,
                            ReserveRejectsSizeNotMultipleOfGranularity,
                            ReleaseRejectsRangeThatIsNotAWholeReservation,
                            ReleaseRejectsAddressNoLongerReserved,
                            CreateChunkRejectsSizeNotMultipleOfGranularity,
                            MappedChunkIsWritableAfterSetAccess,
                            ChunkKeepsItsDataWhenRemappedElsewhere,
                            AChunkMappedAtTwoAddressesShowsTheSameBytesThroughBoth,
                            CopiesRoundTripAMappedRangeAndRefuseAnUnmappedOne,
                            SetAccessCoversAdjacentMappingsInOneCall,
                            ReservedRangeFaultsBeforeAnyMapping, UnmappedRangeFaultsOnAccess,
                            MappedRangeFaultsUntilSetAccess,
                            CreateChunkBeyondCapacityReturnsOutOfMemory,
                            MapRejectsMisalignedAddress, MapRejectsSizeOtherThanTheChunkSize,
                            MapRejectsAddressOutsideAnyReservation,
                            MapRejectsRangeCrossingTheEndOfAReservation,
                            MapRejectsRangeOverlappingAMapping, MapRejectsReleasedHandle,
                            SetAccessRejectsRangeNotFullyMapped, UnmapRejectsPartOfAMapping,
                            UnmapRejectsRangeSpanningTwoMappings, UnmapRejectsRangeNeverMapped,
                            UnmapRangesUnmapsAdjacentAndSeparateMappingsAndKeepsTheOthers,
                            UnmapRangesWithABadRangeUnmapsNothing,
                            ReleaseChunkRejectsMappedChunk,
                            ReleaseChunkRejectsHandleAlreadyReleased,
                            ReleaseRejectsReservationWithLiveMappings,
                            FailedCallExplainsItselfInLastError, ReleaseChunkGivesItsBytesBack,
                            ManyChunksMapAndUnmapWithoutLeakingDescriptors);

INSTANTIATE_TYPED_TEST_SUITE_P(Host, VmmConformance, ::testing::Types<host_backend>);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, VmmConformance, ::testing::Types<cuda_backend>);

// ---- host backend only -------------------------------------------------------------

TEST(VmmStatus, ToStringNamesEveryStatus) {
  EXPECT_STREQ(to_string(vmm_status::ok), "ok");
  EXPECT_STREQ(to_string(vmm_status::out_of_memory), "out_of_memory");
  EXPECT_STREQ(to_string(vmm_status::invalid_argument), "invalid_argument");
  EXPECT_STREQ(to_string(vmm_status::no_device), "no_device");
  EXPECT_STREQ(to_string(vmm_status::device_error), "device_error");
}

TEST(HostVmm, RejectsGranularityNotAPowerOfTwo) {
  EXPECT_THROW(host_vmm(host_vmm_options{96 * kib, 96 * mib}), config_error);
}

TEST(HostVmm, RejectsGranularitySmallerThanAPage) {
  EXPECT_THROW(host_vmm(host_vmm_options{1 * kib, 64 * mib}), config_error);
}

TEST(HostVmm, RejectsCapacityNotAMultipleOfGranularity) {
  EXPECT_THROW(host_vmm(host_vmm_options{64 * kib, 64 * mib + 4 * kib}), config_error);
  EXPECT_THROW(host_vmm(host_vmm_options{64 * kib, 0}), config_error);
}

TEST(HostVmm, ReportsItsOptions) {
  const host_vmm device(host_vmm_options{128 * kib, 32 * mib});
  EXPECT_EQ(device.granularity(), 128 * kib);
  EXPECT_EQ(device.physical_capacity(), 32 * mib);
  EXPECT_EQ(device.name(), "host");
}

TEST(HostVmm, ReleaseChunkReturnsPagesToTheOs) {
  host_vmm device(host_vmm_options{64 * kib, 64 * mib});
  const std::size_t size = 4 * mib;
  void* base = nullptr;
  chunk_handle h = 0;
  ASSERT_EQ(device.reserve(size, &base), vmm_status::ok);
  ASSERT_EQ(device.create_chunk(size, &h), vmm_status::ok);
  EXPECT_EQ(device.resident_bytes(), 0u);  // sparse until touched
  ASSERT_EQ(device.map(base, size, h), vmm_status::ok);
  ASSERT_EQ(device.set_access(base, size), vmm_status::ok);
  std::memset(base, 0xab, size);
  EXPECT_GE(device.resident_bytes(), size);
  ASSERT_EQ(device.unmap(base, size), vmm_status::ok);
  EXPECT_GE(device.resident_bytes(), size);  // the chunk still holds its data
  ASSERT_EQ(device.release_chunk(h), vmm_status::ok);
  EXPECT_EQ(device.resident_bytes(), 0u);
  EXPECT_EQ(device.chunk_bytes_in_use(), 0u);
}

TEST(HostVmm, ReusedRangeReadsAsZero) {
  host_vmm device(host_vmm_options{64 * kib, 64 * kib});
  void* base = nullptr;
  chunk_handle h = 0;
  ASSERT_EQ(device.reserve(64 * kib, &base), vmm_status::ok);
  ASSERT_EQ(device.create_chunk(64 * kib, &h), vmm_status::ok);
  ASSERT_EQ(device.map(base, 64 * kib, h), vmm_status::ok);
  ASSERT_EQ(device.set_access(base, 64 * kib), vmm_status::ok);
  std::memset(base, 0xcd, 64 * kib);
  ASSERT_EQ(device.unmap(base, 64 * kib), vmm_status::ok);
  ASSERT_EQ(device.release_chunk(h), vmm_status::ok);
  // The only range there is comes back, without the old bytes.
  ASSERT_EQ(device.create_chunk(64 * kib, &h), vmm_status::ok);
  ASSERT_EQ(device.map(base, 64 * kib, h), vmm_status::ok);
  ASSERT_EQ(device.set_access(base, 64 * kib), vmm_status::ok);
  const std::vector<unsigned char> zeros(64 * kib, 0);
  EXPECT_EQ(std::memcmp(base, zeros.data(), zeros.size()), 0);
}

TEST(HostVmm, CapacityFreedByReleaseIsReusable) {
  const std::size_t g = 64 * kib;
  host_vmm device(host_vmm_options{g, 4 * g});
  chunk_handle h[4] = {};
  for (auto& handle : h) ASSERT_EQ(device.create_chunk(g, &handle), vmm_status::ok);
  chunk_handle extra = 0;
  EXPECT_EQ(device.create_chunk(g, &extra), vmm_status::out_of_memory);
  ASSERT_EQ(device.release_chunk(h[2]), vmm_status::ok);
  EXPECT_EQ(device.create_chunk(g, &extra), vmm_status::ok);
}

TEST(HostVmm, FreeRangesCoalesceOnRelease) {
  const std::size_t g = 64 * kib;
  host_vmm device(host_vmm_options{g, 4 * g});
  chunk_handle h[4] = {};
  for (auto& handle : h) ASSERT_EQ(device.create_chunk(g, &handle), vmm_status::ok);
  for (const int i : {1, 3, 0, 2}) ASSERT_EQ(device.release_chunk(h[i]), vmm_status::ok);
  chunk_handle whole = 0;
  EXPECT_EQ(device.create_chunk(4 * g, &whole), vmm_status::ok) << device.last_error();
}

TEST(HostVmm, OutOfMemoryMessageNamesCapacityInUse) {
  const std::size_t g = 64 * kib;
  host_vmm device(host_vmm_options{g, 2 * g});
  chunk_handle h = 0;
  ASSERT_EQ(device.create_chunk(g, &h), vmm_status::ok);
  ASSERT_EQ(device.create_chunk(2 * g, &h), vmm_status::out_of_memory);
  EXPECT_THAT(device.last_error(), HasSubstr("physical capacity"));
}

TEST(HostVmm, LastErrorIsPerThread) {
  host_vmm device(host_vmm_options{64 * kib, 1 * mib});
  void* p = nullptr;
  ASSERT_EQ(device.reserve(1, &p), vmm_status::invalid_argument);
  const std::string mine = device.last_error();
  std::string theirs;
  std::thread other([&] {
    EXPECT_EQ(device.release_chunk(12345), vmm_status::invalid_argument);
    theirs = device.last_error();
  });
  other.join();
  EXPECT_EQ(device.last_error(), mine);
  EXPECT_NE(theirs, mine);
  EXPECT_THAT(theirs, HasSubstr("unknown chunk handle"));
}

// Pages of [p, p + size) in memory now, by mincore (which leaves them untouched).
std::size_t resident_pages(void* p, std::size_t size) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in(size / page);
  if (::mincore(p, size, in.data()) != 0) return ~std::size_t{0};
  std::size_t n = 0;
  for (unsigned char c : in) n += c & 1u;
  return n;
}

// Minor page faults taken by this thread so far.
long minor_faults() {
  rusage usage{};
  ::getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Writes one byte to every page of [p, p + size) and returns the minor faults it took.
// Not instrumented: a sanitizer's first look at the shadow of fresh pages faults too.
__attribute__((no_sanitize("address", "thread", "undefined"))) long faults_writing(void* p, std::size_t size,
                                                                                   unsigned char value) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto* bytes = static_cast<volatile unsigned char*>(p);
  const long before = minor_faults();
  for (std::size_t i = 0; i < size; i += page) bytes[i] = value;
  return minor_faults() - before;
}

// A GPU commits a chunk's memory at create and fills its page tables at map: set_access
// does both, so the stream worker's first write takes no page fault, on a fresh chunk and
// on one mapped again (Note [Host VMM]: the entries are installed writable).
TEST(HostVmm, SetAccessCommitsEveryPageBeforeTheFirstWrite) {
  const std::size_t g = 64 * kib;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (bool populate : {true, false}) {
    SCOPED_TRACE(populate ? "populate_on_access" : "faulted on first write");
    host_vmm device(host_vmm_options{g, 16 * g, populate});
    void* base = nullptr;
    ASSERT_EQ(device.reserve(2 * g, &base), vmm_status::ok);
    chunk_handle h = 0;
    ASSERT_EQ(device.create_chunk(2 * g, &h), vmm_status::ok);
    ASSERT_EQ(device.map(base, 2 * g, h), vmm_status::ok);
    ASSERT_EQ(device.set_access(base, 2 * g), vmm_status::ok);
    EXPECT_EQ(resident_pages(base, 2 * g), populate ? 2 * g / page : 0u);
    const long fresh_faults = faults_writing(base, 2 * g, 0x11);
    if (populate) {
      EXPECT_EQ(fresh_faults, 0);
    } else {
      EXPECT_GE(fresh_faults, static_cast<long>(2 * g / page));  // the control: one a page
    }
    // Mapped again after an unmap (the chunk pool), the chunk keeps its pages and bytes
    // either way (mincore counts the file's pages, not page-table entries).
    std::memset(base, 0x5a, 2 * g);
    ASSERT_EQ(device.unmap(base, 2 * g), vmm_status::ok);
    ASSERT_EQ(device.map(base, 2 * g, h), vmm_status::ok);
    ASSERT_EQ(device.set_access(base, 2 * g), vmm_status::ok);
    EXPECT_EQ(resident_pages(base, 2 * g), 2 * g / page);
    EXPECT_EQ(static_cast<unsigned char*>(base)[2 * g - 1], 0x5a);
    const long again_faults = faults_writing(base, 2 * g, 0x5a);
    if (populate) {
      EXPECT_EQ(again_faults, 0);
    } else {
      EXPECT_GT(again_faults, 0);  // the file has the pages, the page tables do not
    }
    ASSERT_EQ(device.unmap(base, 2 * g), vmm_status::ok);
    ASSERT_EQ(device.release_chunk(h), vmm_status::ok);
    ASSERT_EQ(device.release(base, 2 * g), vmm_status::ok);
  }
}

TEST(HostVmm, ConcurrentCyclesKeepEveryChunkIntact) {
  const std::size_t g = 64 * kib;
  constexpr int threads = 4;
  constexpr int cycles = 200;
  host_vmm device(host_vmm_options{g, 64 * g});
  void* base = nullptr;
  ASSERT_EQ(device.reserve(threads * g, &base), vmm_status::ok);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto* slot = static_cast<unsigned char*>(base) + static_cast<std::size_t>(t) * g;
      for (int c = 0; c < cycles; ++c) {
        chunk_handle h = 0;
        const auto value = static_cast<unsigned char>(t * 16 + c % 16);
        bool ok = device.create_chunk(g, &h) == vmm_status::ok &&
                  device.map(slot, g, h) == vmm_status::ok &&
                  device.set_access(slot, g) == vmm_status::ok;
        if (ok) {
          std::memset(slot, value, g);
          ok = slot[0] == value && slot[g - 1] == value;
        }
        ok = device.unmap(slot, g) == vmm_status::ok && ok;
        ok = device.release_chunk(h) == vmm_status::ok && ok;
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(device.chunk_bytes_in_use(), 0u);
  EXPECT_EQ(device.release(base, threads * g), vmm_status::ok);
}

// ---- the CUDA driver on this machine -------------------------------------------------

#if SUBLINEAR_HAVE_CUDA

TEST(CudaDriver, LoadDriverNamesLibcudaWhenAbsent) {
  std::string why;
  if (load_driver(&why) != nullptr) GTEST_SKIP() << "a CUDA driver is present on this machine";
  EXPECT_THAT(why, HasSubstr("libcuda.so.1"));
}

TEST(CudaDriver, MakeCudaVmmPassesOnTheDriversReason) {
  std::string driver_why;
  if (load_driver(&driver_why) != nullptr) GTEST_SKIP() << "a CUDA driver is present on this machine";
  std::string why;
  EXPECT_EQ(make_cuda_vmm(0, &why), nullptr);
  EXPECT_EQ(why, driver_why);
}

TEST(CudaDriver, MakeCudaVmmRefusesAbsentDevice) {
  std::string why;
  if (load_driver(&why) == nullptr) GTEST_SKIP() << "no CUDA driver: " << why;
  EXPECT_EQ(make_cuda_vmm(1000, &why), nullptr);
  EXPECT_THAT(why, HasSubstr("not present"));
}

TEST(CudaDriverEvents, RecordedEventCompletesAfterSynchronize) {
  std::string why;
  const auto events = make_cuda_events(0, &why);
  if (events == nullptr) GTEST_SKIP() << "no CUDA driver: " << why;
  event_handle e = events->record(nullptr);
  events->synchronize(e);
  EXPECT_TRUE(events->query(e));
  events->release(e);
}

TEST(CudaDriverEvents, ReleasedEventsAreReused) {
  std::string why;
  const auto events = make_cuda_events(0, &why);
  if (events == nullptr) GTEST_SKIP() << "no CUDA driver: " << why;
  events->release(events->record(nullptr));
  event_handle e = events->record(nullptr);
  EXPECT_EQ(events->events_created(), 1u);
  events->synchronize(e);
  events->release(e);
}

#else

TEST(CudaDriver, LoadDriverNamesLibcudaWhenAbsent) {
  GTEST_SKIP() << "this build has no CUDA backend (SUBLINEAR_CUDA=OFF or no toolkit found)";
}

#endif

}  // namespace
}  // namespace sublinear::device
