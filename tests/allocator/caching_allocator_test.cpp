// Behaviour of the caching allocator on the host VMM backend: reuse, size classes,
// split and merge, streams, eviction with deferred unmap, the strict budget, statistics.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/host_vmm.hpp"
#include "test_events.hpp"

namespace sublinear::allocator {
namespace {

using testing::manual_events;

constexpr std::size_t kGranularity = 64 * KiB;

struct fixture : ::testing::Test {
  device::host_vmm device{device::host_vmm_options{kGranularity, 1 * GiB}};
  manual_events events;

  caching_allocator make(std::size_t budget = 0) {
    options o;
    o.budget = budget;
    o.reserve = 4 * GiB;
    return caching_allocator(device, events, o);
  }
};

// A non-default stream handle for tests (the allocator never dereferences it).
stream_handle stream(int i) { return reinterpret_cast<stream_handle>(static_cast<std::uintptr_t>(0x1000 * i)); }

using CachingAllocator = fixture;

TEST_F(CachingAllocator, ReusesAFreedBlockOnTheSameStream) {
  auto a = make();
  void* p = a.allocate(1000, nullptr);
  a.deallocate(p);
  void* q = a.allocate(1000, nullptr);
  EXPECT_EQ(p, q);
  EXPECT_EQ(a.get_stats().segments_created, 1u);
  a.deallocate(q);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, DoesNotReuseABlockFreedOnAnotherStream) {
  auto a = make();
  void* p = a.allocate(1000, stream(1));
  a.deallocate(p);
  void* q = a.allocate(1000, stream(2));
  EXPECT_NE(p, q);
  EXPECT_EQ(a.get_stats().segments_created, 2u);
  a.deallocate(q);
}

TEST_F(CachingAllocator, RoundsToTheMinimumBlockAndAlignsTo512Bytes) {
  auto a = make();
  std::vector<void*> ptrs;
  for (std::size_t size : {1u, 511u, 512u, 513u, 4097u, 100000u}) {
    void* p = a.allocate(size, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u) << size;
    auto info = a.find(p);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->requested, size);
    EXPECT_EQ(info->size % 512, 0u);
    EXPECT_GE(info->size, size);
    ptrs.push_back(p);
  }
  for (void* p : ptrs) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, PacksSmallAllocationsIntoTwoMiBSegments) {
  auto a = make();
  std::vector<void*> ptrs;
  for (int i = 0; i < 64; ++i) ptrs.push_back(a.allocate(32 * KiB, nullptr));
  auto s = a.get_stats();
  EXPECT_EQ(s.segments_created, 1u);
  EXPECT_EQ(s.mapped, 2 * MiB);
  EXPECT_EQ(s.allocated, 2 * MiB);
  void* overflow = a.allocate(32 * KiB, nullptr);
  EXPECT_EQ(a.get_stats().segments_created, 2u);
  a.deallocate(overflow);
  for (void* p : ptrs) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, UsesTwentyMiBSegmentsForMidSizesAndExactSegmentsForLargeOnes) {
  auto a = make();
  void* large = a.allocate(11 * MiB + 1, nullptr);  // rounded up to 2 MiB: 12 MiB
  EXPECT_EQ(a.get_stats().mapped, 12 * MiB);
  void* mid = a.allocate(3 * MiB, nullptr);  // the 1 MiB tail is not split off: a new segment
  EXPECT_EQ(a.get_stats().mapped, 12 * MiB + 20 * MiB);
  void* fits = a.allocate(5 * MiB, nullptr);  // best fit from the 17 MiB left in the mid segment
  EXPECT_EQ(a.get_stats().mapped, 32 * MiB);
  EXPECT_EQ(static_cast<char*>(fits), static_cast<char*>(mid) + 3 * MiB);
  a.deallocate(fits);
  a.deallocate(mid);
  a.deallocate(large);
}

TEST_F(CachingAllocator, ExactLargeSegmentsFollowTheRequestedSize) {
  auto a = make();
  a.set_exact_large_segments(true);
  void* mid = a.allocate(3 * MiB + 1, nullptr);
  EXPECT_EQ(a.get_stats().mapped, 3 * MiB + kGranularity);
  void* small = a.allocate(1000, nullptr);  // small blocks are still packed
  EXPECT_EQ(a.get_stats().mapped, 3 * MiB + kGranularity + 2 * MiB);
  a.deallocate(mid);
  a.deallocate(small);
}

TEST_F(CachingAllocator, ExactLargeSegmentsOfGrowingSizesDoNotPileUp) {
  // DenseNet's concatenations: each large tensor is a little larger than the last and is
  // freed before the next is made. Without a budget, the cached segments too small for the
  // next request are given back before it is mapped, so mapped bytes follow the largest
  // live tensor instead of the sum of all of them (Note [Exact large segments]).
  auto a = make();
  a.set_exact_large_segments(true);
  std::size_t size = 2 * MiB;
  for (int i = 0; i < 8; ++i, size += kGranularity) {
    void* p = a.allocate(size, nullptr);
    EXPECT_EQ(a.get_stats().mapped, size) << "request " << i;
    a.deallocate(p);
  }
  const auto s = a.get_stats();
  EXPECT_EQ(s.mapped_peak, 2 * MiB + 7 * kGranularity);
  EXPECT_EQ(s.idle_releases, 7u);
  // Each release waited for the event recorded when its segment became free (pending in
  // this test), never for the whole stream.
  EXPECT_EQ(events.synchronized(), 7u);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, ExactLargeSegmentsKeepACachedSegmentThatStillFits) {
  auto a = make();
  a.set_exact_large_segments(true);
  void* big = a.allocate(4 * MiB, nullptr);
  a.deallocate(big);
  void* smaller = a.allocate(3 * MiB + kGranularity, nullptr);  // served by the cached 4 MiB segment
  EXPECT_EQ(smaller, big);
  EXPECT_EQ(a.get_stats().mapped, 4 * MiB);
  EXPECT_EQ(a.get_stats().idle_releases, 0u);
  a.deallocate(smaller);
  // Without exact segments (PyTorch's rules) nothing is given back before a new segment.
  auto b = make();
  void* p = b.allocate(11 * MiB, nullptr);
  b.deallocate(p);
  void* q = b.allocate(13 * MiB, nullptr);
  EXPECT_EQ(b.get_stats().mapped, 12 * MiB + 14 * MiB);
  EXPECT_EQ(b.get_stats().idle_releases, 0u);
  b.deallocate(q);
}

TEST_F(CachingAllocator, ExactSmallSegmentsTakeWholePagesNotASmallSegment) {
  // Note [Exact small segments]: small requests get segments of whole pages, still shared
  // by later small requests, so one live small block no longer keeps 2 MiB mapped.
  auto a = make();
  a.set_exact_small_segments(true);
  void* x = a.allocate(16 * KiB, nullptr);
  EXPECT_EQ(a.get_stats().mapped, kGranularity);
  void* y = a.allocate(16 * KiB, nullptr);
  EXPECT_EQ(y, static_cast<char*>(x) + 16 * KiB) << "a later small request splits the page";
  EXPECT_EQ(a.get_stats().mapped, kGranularity);
  void* z = a.allocate(100 * KiB, nullptr);
  EXPECT_EQ(a.get_stats().mapped, kGranularity + 2 * kGranularity) << "100 KiB in two pages, not 2 MiB";
  a.deallocate(x);
  a.deallocate(y);
  // The first page is wholly free again: a budget gives it back.
  a.set_budget(2 * kGranularity);
  EXPECT_EQ(a.get_stats().mapped, 2 * kGranularity);
  a.deallocate(z);
  EXPECT_TRUE(a.validate());
  // PyTorch's rules (the default): the small segment, whatever the request.
  auto b = make();
  void* p = b.allocate(16 * KiB, nullptr);
  EXPECT_EQ(b.get_stats().mapped, 2 * MiB);
  b.deallocate(p);
}

TEST_F(CachingAllocator, ExactSmallSegmentsPreferAPartlyUsedSegmentToSplittingAWhollyFreeOne) {
  // Note [Exact small segments]: best fit would put a small request in a wholly free
  // segment and keep all of it mapped for one small block.
  auto a = make();
  a.set_exact_small_segments(true);
  void* s = a.allocate(500 * KiB, nullptr);  // a 512 KiB segment
  void* t = a.allocate(10 * KiB, nullptr);   // the rest of it
  void* w = a.allocate(100 * KiB, nullptr);  // its own 128 KiB segment
  ASSERT_NE(static_cast<char*>(w), static_cast<char*>(s) + 500 * KiB);
  a.deallocate(w);  // a wholly free 128 KiB segment: the best fit for 64 KiB
  a.deallocate(s);  // 500 KiB free in a segment that t keeps
  const std::size_t segments = a.get_stats().segments_created;
  void* x = a.allocate(64 * KiB, nullptr);
  EXPECT_EQ(x, s) << "split the wholly free segment instead of the partly used one";
  EXPECT_EQ(a.get_stats().segments_created, segments);
  // The wholly free segment stayed whole, so a budget can give it back.
  a.set_budget(512 * KiB);
  EXPECT_EQ(a.get_stats().mapped, 512 * KiB);
  a.deallocate(t);
  a.deallocate(x);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, SplitsAndMergesSoAFreedSegmentIsWholeAgain) {
  auto a = make();
  void* x = a.allocate(100 * KiB, nullptr);
  void* y = a.allocate(200 * KiB, nullptr);
  void* z = a.allocate(300 * KiB, nullptr);
  EXPECT_EQ(static_cast<char*>(y), static_cast<char*>(x) + 100 * KiB);
  EXPECT_TRUE(a.validate());
  a.deallocate(y);
  a.deallocate(x);
  a.deallocate(z);
  EXPECT_TRUE(a.validate());
  // The whole 2 MiB segment is one free block again: a 1 MiB request fits at its base.
  void* w = a.allocate(1 * MiB, nullptr);
  EXPECT_EQ(w, x);
  a.deallocate(w);
}

TEST_F(CachingAllocator, FindsTheBlockContainingAnInteriorPointer) {
  auto a = make();
  char* p = static_cast<char*>(a.allocate(10000, nullptr));
  auto inside = a.find(p + 9999);
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(inside->base, p);
  EXPECT_FALSE(a.find(p + 10240).has_value());  // past the rounded end
  a.deallocate(p);
  EXPECT_FALSE(a.find(p).has_value());
}

TEST_F(CachingAllocator, ListsLiveBlocksInAddressOrder) {
  auto a = make();
  void* x = a.allocate(1000, nullptr);
  void* y = a.allocate(3000, nullptr, true);
  void* z = a.allocate(5000, nullptr);
  a.deallocate(z);
  auto blocks = a.live_blocks();
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_LT(blocks[0].base, blocks[1].base);
  std::vector<void*> bases{blocks[0].base, blocks[1].base};
  EXPECT_NE(std::find(bases.begin(), bases.end(), x), bases.end());
  EXPECT_NE(std::find(bases.begin(), bases.end(), y), bases.end());
  a.deallocate(x);
  a.deallocate(y);
}

TEST_F(CachingAllocator, FreeOfAForeignPointerIsReportedAndIgnored) {
  auto a = make();
  int local = 0;
  a.deallocate(&local);
  EXPECT_EQ(a.get_stats().frees, 0u);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, RecordStreamDefersReuseUntilThatStreamsWorkCompletes) {
  auto a = make();
  void* p = a.allocate(4096, stream(1));
  a.record_stream(p, stream(2));
  a.deallocate(p);
  void* q = a.allocate(4096, stream(1));
  EXPECT_NE(p, q) << "reused while stream 2 may still use the block";
  events.complete_all();
  a.deallocate(q);
  void* r = a.allocate(4096, stream(1));
  void* s = a.allocate(4096, stream(1));
  EXPECT_TRUE(r == p || s == p);
  a.deallocate(r);
  a.deallocate(s);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, EvictableBlocksOwnWholeGranules) {
  auto a = make();
  void* shared = a.allocate(1000, nullptr);
  void* e1 = a.allocate(1000, nullptr, true);
  void* e2 = a.allocate(kGranularity + 1, nullptr, true);
  for (void* e : {e1, e2}) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(e) % kGranularity, 0u);
  EXPECT_EQ(a.find(e1)->size, kGranularity);
  EXPECT_EQ(a.find(e2)->size, 2 * kGranularity);
  EXPECT_TRUE(a.find(e1)->evictable);
  EXPECT_FALSE(a.find(shared)->evictable);
  EXPECT_THROW(a.evict(shared), config_error);
  for (void* p : {shared, e1, e2}) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, EvictionWaitsForTheLastUseBeforeUnmapping) {
  auto a = make();
  void* p = a.allocate(3 * kGranularity, nullptr, true);
  std::memset(p, 7, 3 * kGranularity);
  const auto mapped = a.get_stats().mapped;
  a.evict(p);
  EXPECT_EQ(a.find(p)->state, residency::evicting);
  EXPECT_EQ(a.get_stats().mapped, mapped) << "unmapped while the last use may be pending";
  EXPECT_EQ(a.reclaim(), 0u);
  EXPECT_EQ(static_cast<char*>(p)[5], 7) << "pages must stay readable while pending";
  events.complete_all();
  EXPECT_EQ(a.reclaim(), 3 * kGranularity);
  EXPECT_EQ(a.find(p)->state, residency::evicted);
  auto s = a.get_stats();
  EXPECT_EQ(s.mapped - s.pooled, mapped - 3 * kGranularity);
  EXPECT_EQ(s.evicted, 3 * kGranularity);
  EXPECT_EQ(s.evictions, 1u);
  a.deallocate(p);
  EXPECT_EQ(a.get_stats().evicted, 0u);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, EvictionWaitsForEveryStreamTheBlockWasUsedOn) {
  auto a = make();
  void* p = a.allocate(kGranularity, stream(1), true);
  a.record_stream(p, stream(2));
  a.evict(p);
  EXPECT_EQ(events.outstanding(), 2u);
  events.complete_all();
  a.reclaim();
  EXPECT_EQ(a.find(p)->state, residency::evicted);
  a.deallocate(p);
}

// A block freed while its eviction is pending, and still used on a second stream, waits
// for that stream before its pages go back; its eviction may complete first. It is no
// longer allocated then, so its bytes must not count as evicted memory (allocated minus
// evicted, the resident bytes, would go below zero).
TEST_F(CachingAllocator, AnEvictionCompletingAfterTheFreeDoesNotCountAsEvictedMemory) {
  auto a = make();
  void* p = a.allocate(kGranularity, stream(1), true);
  a.record_stream(p, stream(2));
  a.evict(p);
  events.complete_all();  // the eviction's last uses are done, not yet seen
  a.deallocate(p);        // used on stream 2: the free waits for an event of its own
  a.reclaim();            // the eviction completes; the free does not yet
  EXPECT_EQ(a.get_stats().evicted, 0u);
  EXPECT_TRUE(a.validate());
  events.complete_all();
  a.reclaim();
  const stats st = a.get_stats();
  EXPECT_EQ(st.evicted, 0u);
  EXPECT_EQ(st.allocated, 0u);
  EXPECT_LE(st.resident_peak, st.allocated_peak);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, RestoreMapsWritablePagesAtTheSameAddress) {
  auto a = make();
  auto* p = static_cast<unsigned char*>(a.allocate(2 * kGranularity, nullptr, true));
  a.evict(p);
  events.complete_all();
  a.reclaim();
  ASSERT_EQ(a.find(p)->state, residency::evicted);
  a.restore(p);
  EXPECT_EQ(a.find(p)->state, residency::resident);
  EXPECT_EQ(a.find(p)->base, p);
  std::memset(p, 0xab, 2 * kGranularity);
  EXPECT_EQ(p[2 * kGranularity - 1], 0xab);
  EXPECT_EQ(a.get_stats().restores, 1u);
  a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, RestoreOfAPendingEvictionCancelsItAndKeepsTheContents) {
  auto a = make();
  auto* p = static_cast<unsigned char*>(a.allocate(kGranularity, nullptr, true));
  std::memset(p, 0x5a, kGranularity);
  a.evict(p);
  a.restore(p);
  events.complete_all();
  a.reclaim();
  EXPECT_EQ(a.find(p)->state, residency::resident);
  EXPECT_EQ(p[100], 0x5a);
  EXPECT_EQ(a.get_stats().cancelled_evictions, 1u);
  EXPECT_EQ(a.get_stats().evictions, 0u);
  a.deallocate(p);
}

TEST_F(CachingAllocator, EvictAndRestoreOfUnknownPointersAreClearErrors) {
  auto a = make();
  int local = 0;
  try {
    a.evict(&local);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("not the base address of a live allocation"), std::string::npos);
  }
  EXPECT_THROW(a.restore(&local), config_error);
}

using CachingAllocatorDeathTest = fixture;

TEST_F(CachingAllocatorDeathTest, TouchingAnEvictedBlockFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto a = make();
  auto* p = static_cast<volatile char*>(a.allocate(kGranularity, nullptr, true));
  p[0] = 1;
  a.evict(const_cast<char*>(p));
  events.complete_all();
  a.reclaim();
  EXPECT_DEATH({ p[10] = 2; }, "");
  a.deallocate(const_cast<char*>(p));
}

TEST_F(CachingAllocator, NeverMapsPastTheBudgetAndSaysWhyItCannot) {
  auto a = make(4 * MiB);
  void* x = a.allocate(3 * MiB, nullptr);  // a 20 MiB segment does not fit: takes 3 MiB exactly
  EXPECT_LE(a.get_stats().mapped, 4 * MiB);
  try {
    a.allocate(2 * MiB, nullptr);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    std::string what = e.what();
    for (const char* word : {"Requested 2.00 MiB", "mapped 3.00 MiB", "reserved", "budget 4.00 MiB", "largest free block"})
      EXPECT_NE(what.find(word), std::string::npos) << word << " missing from: " << what;
    EXPECT_EQ(e.details().requested, 2 * MiB);
    EXPECT_EQ(e.details().budget, 4 * MiB);
    EXPECT_EQ(e.details().ran_out, out_of_memory::cause::budget);
  }
  EXPECT_LE(a.get_stats().mapped_peak, 4 * MiB);
  EXPECT_EQ(a.get_stats().oom_errors, 1u);
  a.deallocate(x);
  EXPECT_TRUE(a.validate());
}

// 64 KiB of a pattern, and its check, for blocks that must survive a segment trim.
static void fill(unsigned char* p, unsigned seed) {
  for (std::size_t i = 0; i < 64 * KiB; ++i) p[i] = static_cast<unsigned char>(i * seed + 3);
}
static bool same(const unsigned char* p, unsigned seed) {
  bool ok = true;
  for (std::size_t i = 0; i < 64 * KiB; ++i) ok = ok && p[i] == static_cast<unsigned char>(i * seed + 3);
  return ok;
}
// One trim of `trimmed` bytes, `mapped` bytes mapped after it, never more than `budget`.
static void expect_one_trim(const stats& s, std::size_t trimmed, std::size_t mapped, std::size_t budget) {
  EXPECT_EQ(s.segment_trims, 1u);
  EXPECT_EQ(s.trimmed_bytes, trimmed);
  EXPECT_EQ(s.mapped, mapped);
  EXPECT_LE(s.mapped_peak, budget) << "the budget held while the live parts moved";
}

// Note [Segment trim]: the allocation pattern of `sublinear demo --depth 56 --budget 0.5x`.
// A workspace's segment, freed, is split by a block that stays (the optimizer's state,
// created before any budget); under the budget the workspace no longer fits anywhere.
TEST_F(CachingAllocator, UnderPressureASegmentsFreeTailIsGivenBackAndItsLiveHeadKeepsItsAddressAndBytes) {
  auto a = make();
  a.set_exact_small_segments(true);
  void* work = a.allocate(576 * KiB, nullptr);    // its own 576 KiB segment
  void* other = a.allocate(256 * KiB, nullptr);  // a second segment, live throughout
  a.deallocate(work);
  auto* kept = static_cast<unsigned char*>(a.allocate(64 * KiB, nullptr));
  ASSERT_EQ(static_cast<void*>(kept), work) << "the only free block: the workspace's segment is split";
  fill(kept, 7);
  ASSERT_EQ(a.get_stats().mapped, 576 * KiB + 256 * KiB);
  // Room for the workspace only once the 512 KiB tail is gone.
  a.set_budget(576 * KiB + 256 * KiB + 128 * KiB);
  EXPECT_THROW((void)a.allocate(576 * KiB, nullptr), out_of_memory) << "off unless asked for (the engine asks)";
  a.set_segment_trim(true);
  void* again = a.allocate(576 * KiB, nullptr);
  expect_one_trim(a.get_stats(), 512 * KiB, 64 * KiB + 256 * KiB + 576 * KiB, 576 * KiB + 256 * KiB + 128 * KiB);
  EXPECT_TRUE(same(kept, 7)) << "the live head was copied back into the new chunk";
  std::memset(again, 0xAB, 576 * KiB);  // mapped and writable
  EXPECT_TRUE(a.validate());
  a.deallocate(again);
  a.deallocate(kept);
  a.deallocate(other);
  EXPECT_TRUE(a.validate());
}

// A 576 KiB segment holding 64 KiB live (`head`), a free 384 KiB hole, 64 KiB live
// (`tail`) and 64 KiB free, beside a 256 KiB segment live throughout (`other`): 832 KiB
// mapped.
struct holed_segment {
  unsigned char* head;
  unsigned char* tail;
  void* other;
};
static holed_segment make_hole(caching_allocator& a) {
  a.set_exact_small_segments(true);
  void* work = a.allocate(576 * KiB, nullptr);  // its own 576 KiB segment
  void* other = a.allocate(256 * KiB, nullptr);
  a.deallocate(work);
  auto* head = static_cast<unsigned char*>(a.allocate(64 * KiB, nullptr));
  void* hole = a.allocate(384 * KiB, nullptr);
  auto* tail = static_cast<unsigned char*>(a.allocate(64 * KiB, nullptr));
  EXPECT_EQ(static_cast<void*>(head), work);
  EXPECT_EQ(static_cast<unsigned char*>(hole), head + 64 * KiB);
  EXPECT_EQ(tail, head + 448 * KiB) << "blocks split the free segment in address order";
  a.deallocate(hole);
  fill(head, 7);
  fill(tail, 11);
  EXPECT_EQ(a.get_stats().mapped, 832 * KiB);
  return {head, tail, other};
}

TEST_F(CachingAllocator, UnderPressureAFreeHoleBetweenLiveBlocksIsCutOutAndBothSidesKeepTheirBytes) {
  auto a = make();
  const holed_segment h = make_hole(a);
  // Room for the live parts' new chunks (64 + 128 KiB) beside the old one; the workspace
  // fits only without the hole.
  a.set_budget(1024 * KiB);
  EXPECT_THROW((void)a.allocate(576 * KiB, nullptr), out_of_memory) << "off unless asked for (the engine asks)";
  a.set_segment_trim(true);
  void* again = a.allocate(576 * KiB, nullptr);
  expect_one_trim(a.get_stats(), 384 * KiB, 64 * KiB + 128 * KiB + 256 * KiB + 576 * KiB, 1024 * KiB);
  EXPECT_TRUE(same(h.head, 7)) << "the live part before the hole was copied back";
  EXPECT_TRUE(same(h.tail, 11)) << "the live part after the hole was copied back";
  EXPECT_TRUE(a.validate());
  std::memset(again, 0xAB, 576 * KiB);  // mapped and writable
  // The part after the hole is a segment of its own: its free 64 KiB serves a request,
  // and once it is wholly free it can be released like any other.
  void* in_tail = a.allocate(64 * KiB, nullptr);
  EXPECT_EQ(static_cast<unsigned char*>(in_tail), h.tail + 64 * KiB);
  a.deallocate(in_tail);
  a.deallocate(h.tail);
  a.deallocate(h.head);
  a.deallocate(again);
  a.deallocate(h.other);
  EXPECT_TRUE(a.validate());
  a.empty_cache();
  EXPECT_EQ(a.get_stats().mapped, 0u);
  EXPECT_EQ(a.get_stats().reserved, 0u);
}

TEST_F(CachingAllocator, WithoutRoomBesideTheSegmentTheOldChunkGoesFirstAndTheBudgetHolds) {
  auto a = make();
  const holed_segment h = make_hole(a);
  a.set_budget(896 * KiB);  // 64 KiB of room: less than the live parts' 192 KiB
  a.set_segment_trim(true);
  void* again = a.allocate(448 * KiB, nullptr);
  // The old chunk was unmapped before the new ones were made.
  expect_one_trim(a.get_stats(), 384 * KiB, 896 * KiB, 896 * KiB);
  EXPECT_TRUE(same(h.head, 7));
  EXPECT_TRUE(same(h.tail, 11));
  EXPECT_TRUE(a.validate());
  a.deallocate(again);
  a.deallocate(h.tail);
  a.deallocate(h.head);
  a.deallocate(h.other);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, UnderPressureAFreeHeadIsCutOutAndTheLiveRestKeepsItsAddress) {
  auto a = make();
  a.set_exact_small_segments(true);
  void* work = a.allocate(576 * KiB, nullptr);
  void* other = a.allocate(256 * KiB, nullptr);
  a.deallocate(work);
  void* front = a.allocate(448 * KiB, nullptr);
  auto* kept = static_cast<unsigned char*>(a.allocate(64 * KiB, nullptr));
  ASSERT_EQ(kept, static_cast<unsigned char*>(work) + 448 * KiB);
  a.deallocate(front);  // 448 free, 64 live, 64 free
  fill(kept, 5);
  a.set_budget(832 * KiB + 128 * KiB);
  a.set_segment_trim(true);
  void* again = a.allocate(576 * KiB, nullptr);
  expect_one_trim(a.get_stats(), 448 * KiB, 128 * KiB + 256 * KiB + 576 * KiB, 832 * KiB + 128 * KiB);
  EXPECT_TRUE(same(kept, 5));
  EXPECT_TRUE(a.validate());
  a.deallocate(kept);
  a.deallocate(again);
  a.deallocate(other);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, TailsThatCannotCoverTheShortfallAreLeftAlone) {
  auto a = make();
  a.set_exact_small_segments(true);
  a.set_segment_trim(true);
  void* work = a.allocate(128 * KiB, nullptr);
  a.deallocate(work);
  void* kept = a.allocate(64 * KiB, nullptr);  // leaves a 64 KiB free tail
  a.set_budget(256 * KiB);
  EXPECT_THROW((void)a.allocate(256 * KiB, nullptr), out_of_memory) << "64 KiB of tail cannot make 256 KiB fit";
  EXPECT_EQ(a.get_stats().segment_trims, 0u);
  EXPECT_EQ(a.get_stats().mapped, 128 * KiB);
  a.deallocate(kept);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, ReleasesCachedSegmentsBeforeFailing) {
  auto a = make(24 * MiB);
  void* x = a.allocate(3 * MiB, nullptr);  // 20 MiB segment
  a.deallocate(x);                         // cached, still mapped
  EXPECT_EQ(a.get_stats().mapped, 20 * MiB);
  void* y = a.allocate(12 * MiB, stream(1));  // needs the cached segment's pages back
  EXPECT_EQ(a.get_stats().mapped, 12 * MiB);
  EXPECT_EQ(a.get_stats().segments_released, 1u);
  a.deallocate(y);
}

// A freed block may still be read by work queued before its free; giving its segment's
// pages back must wait for that stream, or that work faults (on the host device too).
TEST_F(CachingAllocator, WaitsForTheSegmentsStreamBeforeGivingCachedPagesBack) {
  auto a = make(24 * MiB);
  void* x = a.allocate(3 * MiB, stream(1));  // a 20 MiB segment on stream 1
  a.deallocate(x);                           // free in stream order: stream 1 may still use it
  const auto waits_before = events.synchronized();
  void* y = a.allocate(12 * MiB, stream(2));  // needs the cached segment's pages
  EXPECT_EQ(events.synchronized(), waits_before + 1) << "unmapped without waiting for stream 1";
  EXPECT_EQ(a.get_stats().release_waits, 1u);
  a.deallocate(y);
}

TEST_F(CachingAllocator, UnderABudgetReleasingAFreeSegmentWaitsOnlyForItsFree) {
  auto a = make(24 * MiB);
  void* x = a.allocate(3 * MiB, stream(1));  // a 20 MiB segment on stream 1
  a.deallocate(x);                           // the free is recorded on stream 1
  events.complete_all();                     // ... and has completed
  const auto waits_before = events.synchronized();
  void* y = a.allocate(12 * MiB, stream(2));  // needs the cached segment's pages
  EXPECT_EQ(events.synchronized(), waits_before) << "waited although the free had completed";
  EXPECT_EQ(a.get_stats().release_waits, 0u);
  a.deallocate(y);
}

// Note [Idle first]: a cached segment of the wanted size whose free is still queued is
// not waited for while an idle one of another size can make the room.
TEST_F(CachingAllocator, GivesBackAnIdleSegmentBeforeWaitingForOneOfTheWantedSize) {
  auto a = make(256 * KiB);
  void* big = a.allocate(128 * KiB, stream(1), true);   // a dedicated 128 KiB segment
  void* small = a.allocate(64 * KiB, stream(1), true);  // and a 64 KiB one
  a.deallocate(small);
  events.complete_all();  // the 64 KiB segment's free has run
  a.deallocate(big);      // the 128 KiB segment's has not
  const auto waits_before = events.synchronized();
  // Another stream cannot reuse the cached 128 KiB block in stream order: a new 128 KiB
  // segment must be mapped, and giving the idle 64 KiB one back makes the room.
  void* next = a.allocate(128 * KiB, stream(2), true);
  EXPECT_EQ(events.synchronized(), waits_before) << "waited for the 128 KiB segment's stream";
  EXPECT_EQ(a.get_stats().release_waits, 0u);
  EXPECT_EQ(a.get_stats().segments_released, 1u) << "the 128 KiB segment stays cached";
  EXPECT_LE(a.get_stats().mapped, 256 * KiB);
  EXPECT_TRUE(a.validate());
  a.deallocate(next);
}

// An event from an earlier free must not vouch for a later one.
TEST_F(CachingAllocator, AFreeWithoutABudgetLeavesNoStaleEventBehind) {
  auto a = make(24 * MiB);
  void* x = a.allocate(3 * MiB, stream(1));
  a.deallocate(x);  // under the budget: an event is recorded...
  events.complete_all();  // ...and completes
  a.set_budget(0);
  void* z = a.allocate(3 * MiB, stream(1));  // the same segment, used again
  a.deallocate(z);  // freed with no budget: nothing recorded, stream 1 may still use it
  a.set_budget(24 * MiB);
  const auto waits_before = events.synchronized();
  void* y = a.allocate(12 * MiB, stream(2));
  EXPECT_EQ(events.synchronized(), waits_before + 1) << "unmapped on the strength of a stale event";
  a.deallocate(y);
}

TEST_F(CachingAllocator, WaitsForPendingEvictionsWhenTheBudgetRequiresIt) {
  auto a = make(4 * MiB);
  void* e = a.allocate(3 * MiB, nullptr, true);
  a.evict(e);  // still pending: its pages count against the budget
  void* x = a.allocate(2 * MiB, nullptr);
  EXPECT_EQ(a.find(e)->state, residency::evicted);
  EXPECT_GE(events.synchronized(), 1u);
  EXPECT_EQ(a.get_stats().budget_waits, 1u);
  EXPECT_LE(a.get_stats().mapped_peak, 4 * MiB);
  a.deallocate(x);
  a.deallocate(e);
}

// Note [Stream-ordered handoff]'s setting: a 256 KiB budget filled by two 128 KiB
// evictable blocks on stream 1, the second evicted while its last use is still queued.
struct full_budget {
  void* kept;
  void* gone;
};
full_budget one_eviction_pending(caching_allocator& a) {
  void* kept = a.allocate(128 * KiB, stream(1), true);
  void* gone = a.allocate(128 * KiB, stream(1), true);
  std::memset(gone, 0x5A, 128 * KiB);
  a.evict(gone);
  return {kept, gone};
}

// Note [Stream-ordered handoff]: an evicted block's address keeps its own chunk until it
// is unmapped, so a stray access after the eviction through a pointer the engine cannot
// see reads the block's own bytes or faults, never another buffer's. A pending eviction's
// chunk is not handed to a new mapping; the new block waits for the eviction instead.
TEST_F(CachingAllocator, NeverHandsAPendingEvictionsChunkToAnotherBlock) {
  auto a = make(256 * KiB);
  auto [kept, gone] = one_eviction_pending(a);  // gone's last use is still queued on stream 1
  const auto waits_before = events.synchronized();
  void* next = a.allocate(128 * KiB, stream(1), true);
  EXPECT_GT(events.synchronized(), waits_before) << "took the evicted block's chunk instead of waiting";
  const auto s = a.get_stats();
  EXPECT_EQ(s.handoffs, 0u);
  EXPECT_EQ(s.budget_waits, 1u);
  EXPECT_LE(s.mapped_peak, 256 * KiB);
  EXPECT_LE(device.chunk_bytes_in_use(), 256 * KiB) << "physical pages beyond the budget";
  EXPECT_EQ(a.find(gone)->state, residency::evicted);
  EXPECT_TRUE(a.validate());
  for (void* p : {kept, gone, next}) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

// What the rule above is for: the new block's bytes never show at the evicted address.
TEST_F(CachingAllocatorDeathTest, AnEvictedBlocksAddressFaultsRatherThanShowAnotherBlocksBytes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto a = make(256 * KiB);
  auto [kept, gone] = one_eviction_pending(a);
  auto* next = static_cast<unsigned char*>(a.allocate(128 * KiB, stream(1), true));
  std::memset(next, 0x77, 128 * KiB);
  const auto* stray = static_cast<volatile unsigned char*>(gone);
  // Killed by the fault; a read that returns (the new block's 0x77 or anything else)
  // exits with its byte instead.
  EXPECT_EXIT({ std::_Exit(stray[4096] == 0x77 ? 77 : 1); },
              [](int status) { return WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS); },
              "");
  for (void* p : {kept, gone, static_cast<void*>(next)}) a.deallocate(p);
}

// The handoff's stream rule, on the chunk of a freed segment (evictions never hand off).
TEST_F(CachingAllocator, NeverHandsAChunkToAnotherStream) {
  auto a = make(256 * KiB);
  void* kept = a.allocate(128 * KiB, stream(1), true);
  void* gone = a.allocate(128 * KiB, stream(1), true);
  a.deallocate(gone);  // in stream order: stream 1 may still use it
  const auto waits_before = events.synchronized();
  void* next = a.allocate(128 * KiB, stream(2), true);  // nothing orders stream 2 after stream 1
  EXPECT_GT(events.synchronized(), waits_before);
  EXPECT_EQ(a.get_stats().handoffs, 0u);
  EXPECT_TRUE(a.validate());
  for (void* p : {kept, next}) a.deallocate(p);
}

TEST_F(CachingAllocator, NeverHandsOffABlockAlsoUsedOnAnotherStream) {
  auto a = make(256 * KiB);
  void* kept = a.allocate(128 * KiB, stream(1), true);
  void* gone = a.allocate(128 * KiB, stream(1), true);
  a.record_stream(gone, stream(2));  // stream 2's use is not ordered before stream 1's later work
  a.deallocate(gone);
  const auto waits_before = events.synchronized();
  void* next = a.allocate(128 * KiB, stream(1), true);
  EXPECT_GT(events.synchronized(), waits_before);
  EXPECT_EQ(a.get_stats().handoffs, 0u);
  EXPECT_TRUE(a.validate());
  for (void* p : {kept, next}) a.deallocate(p);
}

// A restore must be at the evicted block's own address: a freed segment of its size cannot
// be reused in place, but its chunk can move there when the caller names its stream.
TEST_F(CachingAllocator, RestoreOnANamedStreamTakesTheChunkOfASegmentFreedThere) {
  for (const bool named : {false, true}) {
    SCOPED_TRACE(named ? "stream named" : "no stream");
    auto a = make(256 * KiB);
    void* x = a.allocate(128 * KiB, stream(1), true);
    a.evict(x);
    events.complete_all();
    (void)a.reclaim();                                     // x's chunk is pooled
    void* y = a.allocate(128 * KiB, stream(1), true);     // ... and mapped for y
    void* z = a.allocate(128 * KiB, stream(1), true);
    a.deallocate(y);  // free in stream order: stream 1 may still use y
    const auto waits_before = events.synchronized();
    if (named) {
      a.restore(x, stream(1));
    } else {
      a.restore(x);
    }
    EXPECT_EQ(a.find(x)->state, residency::resident);
    EXPECT_EQ(a.get_stats().handoffs, named ? 1u : 0u);
    EXPECT_EQ(a.get_stats().restore_handoffs, named ? 1u : 0u);
    EXPECT_EQ(events.synchronized() - waits_before, named ? 0u : 1u);
    EXPECT_LE(a.get_stats().mapped_peak, 256 * KiB);
    EXPECT_LE(device.chunk_bytes_in_use(), 256 * KiB);
    EXPECT_TRUE(a.validate());
    // y's old address is not handed out again while its old mapping may be in use.
    a.deallocate(z);
    void* w = a.allocate(64 * KiB, stream(2));
    if (named) {
      EXPECT_FALSE(static_cast<char*>(w) + 64 * KiB > y && w < static_cast<char*>(y) + 128 * KiB);
    }
    EXPECT_TRUE(a.validate());
    for (void* p : {x, w}) a.deallocate(p);
    EXPECT_TRUE(a.validate());
  }
}

TEST_F(CachingAllocator, HandoffCanBeSwitchedOff) {
  device::host_vmm dev{device::host_vmm_options{kGranularity, 1 * GiB}};
  options o;
  o.budget = 256 * KiB;
  o.reserve = 1 * GiB;
  o.stream_ordered_handoff = false;
  caching_allocator a(dev, events, o);
  auto [kept, gone] = one_eviction_pending(a);
  void* next = a.allocate(128 * KiB, stream(1), true);
  EXPECT_EQ(a.get_stats().handoffs, 0u);
  EXPECT_EQ(a.get_stats().budget_waits, 1u);
  for (void* p : {kept, gone, next}) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

// The replay engine lifts a budget only for a budget shortfall (Note [Scaled cache
// allowance]), so the error must say what ran out: the device's memory and the reserved
// address space are told apart from the budget.
TEST_F(CachingAllocator, AnOutOfMemoryErrorSaysWhetherTheBudgetTheDeviceOrTheAddressSpaceRanOut) {
  // `bytes` from an allocator over `dev` with `o` must fail for `cause`, saying `words`.
  auto expect_ran_out = [&](vmm& dev, const options& o, std::size_t bytes, out_of_memory::cause cause,
                            const char* words) {
    caching_allocator a(dev, events, o);
    try {
      a.allocate(bytes, nullptr);
      ADD_FAILURE() << "expected out_of_memory (" << words << ")";
    } catch (const out_of_memory& e) {
      EXPECT_EQ(e.details().ran_out, cause) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  device::host_vmm small{device::host_vmm_options{kGranularity, 4 * MiB}};  // 4 MiB of physical memory
  options above;
  above.budget = 64 * MiB;  // above it: the device runs out first
  above.reserve = 1 * GiB;
  expect_ran_out(small, above, 8 * MiB, out_of_memory::cause::device_memory, "no physical memory");
  options narrow;
  narrow.reserve = 4 * MiB;  // less address space than a 20 MiB segment needs
  expect_ran_out(device, narrow, 3 * MiB, out_of_memory::cause::address_space, "address space");
  options tight;
  tight.budget = 2 * MiB;
  tight.reserve = 1 * GiB;
  expect_ran_out(device, tight, 3 * MiB, out_of_memory::cause::budget, "exceed the budget");
}

TEST_F(CachingAllocator, UnderPressureASmallRequestIsCutFromAFreeLargeBlock) {
  auto a = make(4 * MiB);
  void* big = a.allocate(3 * MiB, nullptr);   // an exact 3 MiB segment (the 20 MiB one does not fit)
  void* keep = a.allocate(600 * KiB, nullptr);  // a 640 KiB small segment: 3.625 MiB mapped
  a.deallocate(big);  // 3 MiB free in the large pool, but not a whole free segment to release
  void* pin = a.allocate(1 * MiB + 512, stream(0));  // reuse part of it so it stays mapped
  void* small = a.allocate(512 * KiB, nullptr);  // no small block, no room for a segment
  EXPECT_EQ(a.get_stats().borrowed_blocks, 1u);
  EXPECT_LE(a.get_stats().mapped, 4 * MiB);
  EXPECT_TRUE(a.validate());
  for (void* p : {keep, pin, small}) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, RestoreBeyondTheBudgetIsOutOfMemoryAndLeavesTheBlockEvicted) {
  auto a = make(2 * MiB);
  void* e = a.allocate(2 * MiB, nullptr, true);
  a.evict(e);
  events.complete_all();
  void* x = a.allocate(1 * MiB, nullptr);
  EXPECT_THROW(a.restore(e), out_of_memory);
  EXPECT_EQ(a.find(e)->state, residency::evicted);
  a.deallocate(x);
  a.empty_cache();
  a.restore(e);
  EXPECT_EQ(a.find(e)->state, residency::resident);
  a.deallocate(e);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, SetBudgetBelowWhatIsInUseFailsAndKeepsTheOldBudget) {
  auto a = make(8 * MiB);
  void* x = a.allocate(5 * MiB, nullptr);
  EXPECT_THROW(a.set_budget(4 * MiB), out_of_memory);
  EXPECT_EQ(a.budget(), 8 * MiB);
  a.set_budget(6 * MiB);
  EXPECT_EQ(a.budget(), 6 * MiB);
  a.deallocate(x);
}

TEST_F(CachingAllocator, EmptyCacheGivesEveryFreePageBack) {
  auto a = make();
  std::vector<void*> ptrs;
  for (int i = 0; i < 10; ++i) ptrs.push_back(a.allocate(static_cast<std::size_t>(i + 1) * 300 * KiB, stream(i % 3)));
  void* kept = a.allocate(1000, nullptr);
  for (void* p : ptrs) a.deallocate(p);
  a.empty_cache();
  auto s = a.get_stats();
  EXPECT_EQ(s.mapped, 2 * MiB) << "only the segment holding the live block stays";
  EXPECT_EQ(s.map_calls, s.segments_created);
  EXPECT_EQ(s.unmap_calls, s.segments_released);
  EXPECT_EQ(s.set_access_calls, s.map_calls) << "one access call per mapped range";
  a.deallocate(kept);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, ReportsPeaksAndFragmentation) {
  auto a = make();
  void* x = a.allocate(1 * MiB, nullptr);
  void* y = a.allocate(1 * MiB, nullptr);
  auto s = a.get_stats();
  EXPECT_EQ(s.allocated_peak, 2 * MiB);
  EXPECT_EQ(s.mapped_peak, 2 * MiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 1.0);
  a.deallocate(x);
  a.deallocate(y);
  a.reset_peaks();
  EXPECT_EQ(a.get_stats().allocated_peak, 0u);
  void* z = a.allocate(600 * KiB, nullptr);
  EXPECT_GT(a.get_stats().fragmentation(), 1.0);
  a.deallocate(z);
}

TEST_F(CachingAllocator, AnEvictedBlocksChunkIsPooledAndServesTheNextRestoreWithoutACreate) {
  auto a = make(64 * MiB);
  auto* p = static_cast<unsigned char*>(a.allocate(4 * kGranularity, nullptr, true));
  a.evict(p);
  events.complete_all();
  a.reclaim();
  auto s = a.get_stats();
  EXPECT_EQ(s.pooled, 4 * kGranularity) << "the chunk is kept, not released";
  EXPECT_EQ(s.mapped, 4 * kGranularity) << "and still counts as physical memory held";
  const auto creates = s.create_calls;
  a.restore(p);
  s = a.get_stats();
  EXPECT_EQ(s.create_calls, creates) << "the restore made a new chunk instead of reusing the pooled one";
  EXPECT_EQ(s.pool_reuses, 1u);
  EXPECT_EQ(s.pooled, 0u);
  std::memset(p, 0x3c, 4 * kGranularity);
  EXPECT_EQ(p[4 * kGranularity - 1], 0x3c);
  a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, APooledChunkServesANewSegmentOfTheSameSize) {
  auto a = make(64 * MiB);
  void* e = a.allocate(3 * MiB, nullptr, true);
  a.evict(e);
  events.complete_all();
  a.reclaim();
  const auto creates = a.get_stats().create_calls;
  void* x = a.allocate(3 * MiB, stream(1), true);  // another evictable block of that size
  EXPECT_EQ(a.get_stats().create_calls, creates);
  EXPECT_EQ(a.get_stats().pool_reuses, 1u);
  a.deallocate(x);
  a.deallocate(e);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, PooledBytesCountAgainstTheBudgetAndAreTrimmedFirstUnderPressure) {
  auto a = make(4 * MiB);
  void* e = a.allocate(3 * MiB, nullptr, true);
  a.evict(e);
  events.complete_all();
  a.reclaim();
  ASSERT_EQ(a.get_stats().pooled, 3 * MiB);
  void* x = a.allocate(2 * MiB + 512 * KiB, nullptr);  // another size: the pooled chunk must go
  auto s = a.get_stats();
  EXPECT_EQ(s.pooled, 0u);
  EXPECT_EQ(s.pool_trims, 1u);
  EXPECT_LE(s.mapped_peak, 4 * MiB) << "pooled and mapped bytes together exceeded the budget";
  EXPECT_EQ(s.budget_waits, 0u) << "trimming the pool needs no wait";
  a.deallocate(x);
  a.deallocate(e);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, WithoutPoolingAnEvictedChunkIsReleased) {
  options o;
  o.reserve = 4 * GiB;
  o.pool_chunks = false;
  caching_allocator a(device, events, o);
  void* e = a.allocate(2 * kGranularity, nullptr, true);
  a.evict(e);
  events.complete_all();
  a.reclaim();
  EXPECT_EQ(a.get_stats().pooled, 0u);
  EXPECT_EQ(a.get_stats().mapped, 0u);
  a.deallocate(e);
}

TEST_F(CachingAllocator, EmptyCacheAndANewBudgetEmptyThePool) {
  auto a = make(64 * MiB);
  void* e = a.allocate(2 * kGranularity, nullptr, true);
  a.evict(e);
  events.complete_all();
  a.reclaim();
  ASSERT_GT(a.get_stats().pooled, 0u);
  a.set_budget(32 * MiB);
  EXPECT_EQ(a.get_stats().pooled, 0u);
  EXPECT_EQ(a.get_stats().mapped, 0u);
  a.restore(e);
  a.evict(e);
  events.complete_all();
  a.reclaim();
  ASSERT_GT(a.get_stats().pooled, 0u);
  a.empty_cache();
  EXPECT_EQ(a.get_stats().pooled, 0u);
  a.deallocate(e);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, UnderPressureThePressureHandlerEvictsMoreAndTheRequestSucceeds) {
  auto a = make(4 * MiB);
  void* victim = a.allocate(3 * MiB, nullptr, true);
  std::size_t asked_for = 0;
  a.set_pressure_handler([&](std::size_t shortfall) -> std::size_t {
    asked_for = shortfall;
    a.evict(victim);  // the engine's part: something it can regenerate later
    return 3 * MiB;
  });
  void* x = a.allocate(2 * MiB + 512 * KiB, nullptr);
  EXPECT_NE(x, nullptr);
  EXPECT_GE(asked_for, 1 * MiB) << "the handler was not told what is missing";
  EXPECT_EQ(a.find(victim)->state, residency::evicted);
  EXPECT_EQ(a.get_stats().pressure_calls, 1u);
  EXPECT_LE(a.get_stats().mapped_peak, 4 * MiB);
  a.set_pressure_handler({});
  a.deallocate(x);
  a.deallocate(victim);
  EXPECT_TRUE(a.validate());
}

// set_overrun_handler: asked only once the valve and every fallback failed, with the error
// about to be thrown; lifting the budget lets the request through, declining rethrows it.
TEST_F(CachingAllocator, TheOverrunHandlerIsAskedLastAndALiftedBudgetLetsTheRequestThrough) {
  auto a = make(4 * MiB);
  void* held = a.allocate(3 * MiB, nullptr, true);
  std::size_t pressure_calls = 0;
  a.set_pressure_handler([&](std::size_t) -> std::size_t {
    ++pressure_calls;
    return 0;  // nothing it can regenerate
  });
  std::string seen;
  bool lift = false;
  a.set_overrun_handler([&](const out_of_memory& e) {
    seen = e.what();
    if (lift) a.set_budget(0);
    return lift;
  });
  EXPECT_THROW((void)a.allocate(2 * MiB, nullptr), out_of_memory) << "a handler that declines lifts nothing";
  EXPECT_NE(seen.find("exceed the budget"), std::string::npos) << seen;
  EXPECT_EQ(pressure_calls, 1u) << "the pressure handler is asked first";
  EXPECT_EQ(a.get_stats().budget_overruns, 0u);
  lift = true;
  void* x = a.allocate(2 * MiB, nullptr);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(a.get_stats().budget_overruns, 1u);
  EXPECT_GT(a.get_stats().mapped, 4 * MiB) << "the request went past the lifted budget";
  a.set_overrun_handler({});
  a.set_pressure_handler({});
  for (void* p : {held, x}) a.deallocate(p);
  EXPECT_TRUE(a.validate());

  // A restore the budget has no room for goes the same way.
  auto b = make(4 * MiB);
  void* out = b.allocate(3 * MiB, nullptr, true);
  b.evict(out);
  events.complete_all();
  b.reclaim();
  void* in = b.allocate(3 * MiB, nullptr, true);  // takes the room the evicted block had
  lift = false;
  b.set_overrun_handler([&](const out_of_memory&) {
    if (lift) b.set_budget(0);
    return lift;
  });
  EXPECT_THROW(b.restore(out), out_of_memory);
  EXPECT_EQ(b.find(out)->state, residency::evicted);
  lift = true;
  b.restore(out);
  EXPECT_EQ(b.find(out)->state, residency::resident);
  EXPECT_EQ(b.get_stats().budget_overruns, 1u);
  b.set_overrun_handler({});
  for (void* p : {out, in}) b.deallocate(p);
  EXPECT_TRUE(b.validate());
}

TEST_F(CachingAllocator, AnEvictableRequestWithNoRoomForItsPagesIsPlacedInASharedSegment) {
  // Under the budget there is no room for a new page, but a shared small segment has free
  // bytes: the request is served there, not evictable, instead of failing training.
  auto a = make(4 * MiB);
  void* held = a.allocate(3 * MiB + 576 * KiB, nullptr);  // an exact segment
  void* small = a.allocate(400 * KiB, nullptr);  // a 2 MiB small segment does not fit; 448 KiB does
  ASSERT_EQ(a.get_stats().mapped, 4 * MiB);      // 48 KiB of it free
  // The replay engine's part: it asks for pages of their own for a plain request.
  struct observer final : allocation_observer {
    bool evictable = true;
    bool place_evictable(std::size_t, stream_handle) override { return true; }
    void on_allocate(void*, std::size_t, stream_handle, bool e) override { evictable = e; }
  } seen;
  a.set_observer(&seen);
  void* x = a.allocate(40 * KiB, nullptr);  // its own page would exceed the budget
  a.set_observer(nullptr);
  ASSERT_NE(x, nullptr);
  EXPECT_FALSE(a.find(x)->evictable);
  EXPECT_FALSE(seen.evictable) << "the observer was told the block is evictable";
  EXPECT_EQ(a.get_stats().shared_placements, 1u);
  EXPECT_LE(a.get_stats().mapped_peak, 4 * MiB);
  EXPECT_THROW(a.evict(x), config_error);
  EXPECT_TRUE(a.validate());
  for (void* p : {held, small, x}) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, AnObserverCanDeferAFreeAndReleaseTheBlockLater) {
  // The runtime keeps a freed input of a recipe alive (Note [Retention]): the program's
  // free leaves the block allocated, its bytes untouched, until the observer frees it.
  auto a = make(8 * MiB);
  struct observer final : allocation_observer {
    void* keep = nullptr;
    bool releasing = false;
    int frees_seen = 0;
    bool defer_free(void* p, std::size_t, stream_handle) override { return p == keep && !releasing; }
    void on_free(void*, std::size_t, stream_handle) override { ++frees_seen; }
  } seen;
  void* x = a.allocate(100 * KiB, nullptr);
  std::memset(x, 0x5A, 100 * KiB);
  seen.keep = x;
  a.set_observer(&seen);
  a.deallocate(x);  // the program's free
  EXPECT_EQ(seen.frees_seen, 0);
  ASSERT_TRUE(a.find(x).has_value()) << "the deferred block was freed";
  void* y = a.allocate(100 * KiB, nullptr);  // must not reuse the kept block
  EXPECT_NE(y, x);
  EXPECT_EQ(static_cast<unsigned char*>(x)[100 * KiB - 1], 0x5A);
  seen.releasing = true;
  a.deallocate(x);  // the observer's own release
  EXPECT_EQ(seen.frees_seen, 1);
  EXPECT_FALSE(a.find(x).has_value());
  a.deallocate(y);
  a.set_observer(nullptr);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, AnExplicitlyEvictableRequestIsNeverPlacedShared) {
  // The same situation, but the caller itself asked for an evictable block: it gets one or
  // an error, and the error is about the pages it needed.
  auto a = make(4 * MiB);
  void* held = a.allocate(3 * MiB + 576 * KiB, nullptr);
  void* small = a.allocate(400 * KiB, nullptr);
  try {
    (void)a.allocate(40 * KiB, nullptr, true);
    FAIL() << "allocated past the budget";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("mapping 64.00 KiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.get_stats().shared_placements, 0u);
  a.deallocate(small);
  a.deallocate(held);
  EXPECT_TRUE(a.validate());
}

TEST_F(CachingAllocator, WhenThePressureHandlerFreesNothingTheErrorSaysWhat) {
  auto a = make(4 * MiB);
  void* held = a.allocate(3 * MiB, nullptr);
  int calls = 0;
  a.set_pressure_handler([&](std::size_t) -> std::size_t {
    ++calls;
    return 0;
  });
  try {
    (void)a.allocate(2 * MiB + 512 * KiB, nullptr);
    FAIL() << "allocated past the budget";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("budget 4.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("evict more"), std::string::npos) << what;
    EXPECT_NE(what.find("short"), std::string::npos) << what;
  }
  EXPECT_EQ(calls, 1);
  a.set_pressure_handler({});
  a.deallocate(held);
}

TEST_F(CachingAllocator, ZeroSizeReturnsNull) {
  auto a = make();
  EXPECT_EQ(a.allocate(0, nullptr), nullptr);
  a.deallocate(nullptr);
  EXPECT_EQ(a.get_stats().allocs, 0u);
}

}  // namespace
}  // namespace sublinear::allocator
