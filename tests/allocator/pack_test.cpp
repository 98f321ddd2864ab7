// Packs (Note [Pack segments] in allocator/detail/pack_table.hpp): several small evictable blocks
// sharing one dedicated segment whose pages are mapped while any member is resident.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/host_vmm.hpp"
#include "test_events.hpp"

namespace sublinear::allocator {
namespace {

using testing::manual_events;

constexpr std::size_t kGranularity = 64 * KiB;
constexpr std::size_t kMember = 16 * KiB;

stream_handle stream(int i) { return reinterpret_cast<stream_handle>(static_cast<std::uintptr_t>(0x1000 * i)); }

// Events complete when the test completes their stream (or when synchronized).
class stream_gated_events final : public stream_events {
 public:
  event_handle record(stream_handle s) override {
    std::lock_guard lock(mutex_);
    const auto id = ++next_;
    events_[id] = {s, false};
    return reinterpret_cast<event_handle>(id);
  }
  bool query(event_handle e) override {
    std::lock_guard lock(mutex_);
    return events_.at(key(e)).done;
  }
  void synchronize(event_handle e) override {
    std::lock_guard lock(mutex_);
    events_.at(key(e)).done = true;
  }
  void release(event_handle e) noexcept override {
    std::lock_guard lock(mutex_);
    events_.erase(key(e));
  }
  void complete(stream_handle s) {
    std::lock_guard lock(mutex_);
    for (auto& [id, ev] : events_) {
      if (ev.stream == s) ev.done = true;
    }
  }

 private:
  struct event {
    stream_handle stream = nullptr;
    bool done = false;
  };
  static std::uintptr_t key(event_handle e) { return reinterpret_cast<std::uintptr_t>(e); }
  std::mutex mutex_;
  std::uintptr_t next_ = 0;
  std::unordered_map<std::uintptr_t, event> events_;
};

options make_options(std::size_t budget) {
  options o;
  o.budget = budget;
  o.reserve = 4 * GiB;
  return o;
}

struct fixture : ::testing::Test {
  device::host_vmm device{device::host_vmm_options{kGranularity, 1 * GiB}};
  manual_events events;

  caching_allocator make(std::size_t budget = 0) { return caching_allocator(device, events, make_options(budget)); }
};

using Packs = fixture;

pack_slot slot(std::uint64_t key, std::size_t offset, std::size_t bytes = kGranularity) { return {key, bytes, offset}; }

// Mapped bytes that back live segments (pooled chunks are counted in `mapped` too).
std::size_t in_segments(const caching_allocator& a) {
  const stats s = a.get_stats();
  return s.mapped - s.pooled;
}

// Four 16 KiB members of one pack on `s`, at offsets 0, 16, 32 and 48 KiB.
std::vector<char*> four_members(caching_allocator& a, std::uint64_t key = 1, stream_handle s = nullptr) {
  std::vector<char*> m;
  for (std::size_t i = 0; i < 4; ++i)
    m.push_back(static_cast<char*>(a.allocate_in_pack(kMember, s, slot(key, i * kMember))));
  return m;
}

TEST_F(Packs, FourSmallMembersShareOnePage) {
  auto a = make();
  const auto before = a.get_stats();
  auto m = four_members(a);
  const auto s = a.get_stats();
  EXPECT_EQ(s.mapped - before.mapped, kGranularity) << "four members must share one page";
  EXPECT_EQ(s.segments_created - before.segments_created, 1u);
  EXPECT_EQ(s.packs_created, 1u);
  EXPECT_EQ(s.pack_members, 4u);
  EXPECT_EQ(s.allocated, 4 * kMember);
  char* base = m[0];
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % kGranularity, 0u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m[i], base + i * kMember) << "member " << i;
    auto info = a.find(m[i]);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->base, m[i]);
    EXPECT_EQ(info->size, kMember);
    EXPECT_EQ(info->requested, kMember);
    EXPECT_TRUE(info->evictable);
    EXPECT_EQ(info->state, residency::resident);
    std::memset(m[i], static_cast<int>(0x10 + i), kMember);
  }
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(static_cast<unsigned char>(m[i][0]), 0x10 + i);
    EXPECT_EQ(static_cast<unsigned char>(m[i][kMember - 1]), 0x10 + i);
  }
  auto interior = a.find(m[2] + 1000);
  ASSERT_TRUE(interior.has_value());
  EXPECT_EQ(interior->base, m[2]);
  const auto live = a.live_blocks();
  ASSERT_EQ(live.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(live[i].base, m[i]);
  EXPECT_TRUE(a.validate());
  for (char* p : m) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, APackSmallerThanItsPageLeavesFillersThatFindDoesNotReport) {
  auto a = make();
  char* x = static_cast<char*>(a.allocate_in_pack(1000, nullptr, slot(1, 8 * KiB, 20 * KiB)));
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(a.find(x)->size, 1024u);
  EXPECT_EQ(a.get_stats().mapped, kGranularity);
  char* base = x - 8 * KiB;
  EXPECT_FALSE(a.find(base).has_value()) << "the filler before the member is not a block";
  EXPECT_FALSE(a.find(x + 1024).has_value()) << "the filler after the member is not a block";
  EXPECT_TRUE(a.validate());
  a.deallocate(x);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, ThePageIsGivenBackOnlyWhenEveryMemberIsEvictedAndItsEventsComplete) {
  auto a = make();
  auto m = four_members(a);
  std::memset(m[3], 0x42, kMember);
  const std::size_t mapped = in_segments(a);
  for (int i = 0; i < 3; ++i) a.evict(m[i]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.find(m[i])->state, residency::evicting);
  EXPECT_EQ(a.find(m[3])->state, residency::resident);
  events.complete_all();
  EXPECT_EQ(a.reclaim(), 0u) << "a resident member keeps the page";
  EXPECT_EQ(in_segments(a), mapped);
  EXPECT_EQ(a.get_stats().evicted, 0u);
  EXPECT_EQ(static_cast<unsigned char>(m[3][7]), 0x42);
  EXPECT_TRUE(a.validate());

  a.evict(m[3]);  // its last use is still pending
  EXPECT_EQ(a.reclaim(), 0u) << "unmapped while the last use may be pending";
  EXPECT_EQ(in_segments(a), mapped);
  EXPECT_EQ(a.find(m[3])->state, residency::evicting);
  EXPECT_EQ(static_cast<unsigned char>(m[3][7]), 0x42) << "pages must stay readable while pending";
  EXPECT_TRUE(a.validate());

  events.complete_all();
  EXPECT_EQ(a.reclaim(), kGranularity);
  EXPECT_EQ(in_segments(a), mapped - kGranularity);
  for (char* p : m) EXPECT_EQ(a.find(p)->state, residency::evicted);
  const auto s = a.get_stats();
  EXPECT_EQ(s.evicted, 4 * kMember);
  EXPECT_EQ(s.evictions, 4u);
  EXPECT_EQ(s.unmap_calls, 1u);
  EXPECT_TRUE(a.validate());
  for (char* p : m) a.deallocate(p);
  EXPECT_EQ(a.get_stats().evicted, 0u);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, RestoringOneMemberMapsOnePageAndLeavesItsSiblingsNotResident) {
  auto a = make();
  auto m = four_members(a);
  for (char* p : m) a.evict(p);
  events.complete_all();
  a.reclaim();
  ASSERT_EQ(a.find(m[1])->state, residency::evicted);
  const std::size_t mapped = in_segments(a);
  a.restore(m[1]);
  EXPECT_EQ(in_segments(a), mapped + kGranularity) << "one page for the whole pack";
  EXPECT_EQ(a.find(m[1])->state, residency::resident);
  for (int i : {0, 2, 3}) EXPECT_EQ(a.find(m[i])->state, residency::evicting) << "member " << i;
  auto s = a.get_stats();
  EXPECT_EQ(s.evicted, 0u) << "the siblings' pages are mapped again";
  EXPECT_EQ(s.restores, 1u);
  std::memset(m[1], 0x7e, kMember);
  EXPECT_EQ(static_cast<unsigned char>(m[1][kMember - 1]), 0x7e);
  EXPECT_TRUE(a.validate());

  // Restoring a sibling whose pages are there maps nothing.
  a.restore(m[2]);
  EXPECT_EQ(in_segments(a), mapped + kGranularity);
  EXPECT_EQ(a.get_stats().map_calls, s.map_calls);
  EXPECT_EQ(a.find(m[2])->state, residency::resident);

  // Evicting the two resident members gives the page back again.
  a.evict(m[1]);
  a.evict(m[2]);
  events.complete_all();
  EXPECT_EQ(a.reclaim(), kGranularity);
  for (char* p : m) EXPECT_EQ(a.find(p)->state, residency::evicted);
  EXPECT_EQ(a.get_stats().evicted, 4 * kMember);
  EXPECT_TRUE(a.validate());
  for (char* p : m) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, RestoreBeforeTheUnmapCompletesCancelsIt) {
  auto a = make();
  auto m = four_members(a);
  std::memset(m[0], 0x33, kMember);
  for (char* p : m) a.evict(p);
  a.restore(m[0]);  // the unmap is queued but waits for the events
  events.complete_all();
  EXPECT_EQ(a.reclaim(), 0u);
  EXPECT_EQ(a.find(m[0])->state, residency::resident);
  EXPECT_EQ(static_cast<unsigned char>(m[0][5]), 0x33);
  for (int i : {1, 2, 3}) EXPECT_EQ(a.find(m[i])->state, residency::evicting);
  const auto s = a.get_stats();
  EXPECT_EQ(s.restores, 1u);
  EXPECT_EQ(s.cancelled_evictions, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_TRUE(a.validate());
  for (char* p : m) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, ANewMemberOfAPackWhosePagesAreGoneMapsThemAgain) {
  auto a = make();
  char* x = static_cast<char*>(a.allocate_in_pack(kMember, nullptr, slot(9, 0)));
  a.evict(x);
  events.complete_all();
  a.reclaim();
  ASSERT_EQ(a.find(x)->state, residency::evicted);
  const std::size_t mapped = in_segments(a);
  char* y = static_cast<char*>(a.allocate_in_pack(kMember, nullptr, slot(9, 2 * kMember)));
  EXPECT_EQ(y, x + 2 * kMember);
  EXPECT_EQ(in_segments(a), mapped + kGranularity);
  EXPECT_EQ(a.find(y)->state, residency::resident);
  EXPECT_EQ(a.find(x)->state, residency::evicting);
  EXPECT_EQ(a.get_stats().evicted, 0u);
  EXPECT_EQ(a.get_stats().packs_created, 1u);
  std::memset(y, 1, kMember);
  EXPECT_TRUE(a.validate());
  a.deallocate(x);
  a.deallocate(y);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, AFreedPackIsReusedByExactSizeAndItsKeyNamesANewPack) {
  auto a = make();
  char* x = static_cast<char*>(a.allocate_in_pack(kMember, nullptr, slot(5, 0)));
  char* y = static_cast<char*>(a.allocate_in_pack(kMember, nullptr, slot(5, kMember)));
  a.deallocate(x);
  EXPECT_TRUE(a.validate());
  a.deallocate(y);
  EXPECT_TRUE(a.validate());
  const auto freed = a.get_stats();
  EXPECT_EQ(freed.allocated, 0u);
  EXPECT_EQ(freed.mapped, kGranularity) << "a mapped pack is cached like any free segment";

  // An evictable block of the segment's size takes it.
  void* e = a.allocate(40 * KiB, nullptr, true);
  EXPECT_EQ(e, x);
  EXPECT_EQ(a.get_stats().segments_created, freed.segments_created);
  EXPECT_EQ(a.get_stats().create_calls, freed.create_calls);
  a.deallocate(e);

  // So does a new pack, under the same key, with another size of the same rounding.
  char* z = static_cast<char*>(a.allocate_in_pack(8 * KiB, nullptr, slot(5, 4 * KiB, 40 * KiB)));
  EXPECT_EQ(z, x + 4 * KiB);
  const auto s = a.get_stats();
  EXPECT_EQ(s.segments_created, freed.segments_created);
  EXPECT_EQ(s.create_calls, freed.create_calls);
  EXPECT_EQ(s.packs_created, 2u);
  EXPECT_EQ(s.mapped, kGranularity);
  EXPECT_TRUE(a.validate());
  a.deallocate(z);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, FreeingEveryMemberOfAnEvictedPackReleasesItsSegment) {
  auto a = make();
  auto m = four_members(a);
  for (char* p : m) a.evict(p);
  events.complete_all();
  a.reclaim();
  const auto before = a.get_stats();
  ASSERT_EQ(before.evicted, 4 * kMember);
  for (char* p : m) a.deallocate(p);
  const auto s = a.get_stats();
  EXPECT_EQ(s.evicted, 0u);
  EXPECT_EQ(s.segments_released, before.segments_released + 1);
  EXPECT_EQ(s.reserved, before.reserved - kGranularity);
  EXPECT_TRUE(a.validate());
  // The key is free again.
  void* again = a.allocate_in_pack(kMember, nullptr, slot(1, 0, 2 * kGranularity));
  EXPECT_NE(again, nullptr);
  EXPECT_EQ(a.find(again)->state, residency::resident);
  a.deallocate(again);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, FreeingTheOnlyResidentMemberWhileTheOthersAreEvictingQueuesTheUnmap) {
  auto a = make();
  auto m = four_members(a);
  a.deallocate(m[3]);  // a freed member is gone for good
  a.evict(m[0]);
  a.evict(m[1]);
  EXPECT_EQ(a.reclaim(), 0u);
  const std::size_t mapped = in_segments(a);
  const auto recorded = events.recorded();
  a.deallocate(m[2]);  // the last resident member: its last use is recorded too
  EXPECT_GT(events.recorded(), recorded);
  EXPECT_EQ(in_segments(a), mapped) << "unmapped while the freed member's last use may be pending";
  EXPECT_EQ(a.reclaim(), 0u);
  EXPECT_TRUE(a.validate());
  events.complete_all();
  EXPECT_EQ(a.reclaim(), kGranularity);
  EXPECT_EQ(a.find(m[0])->state, residency::evicted);
  EXPECT_EQ(a.find(m[1])->state, residency::evicted);
  EXPECT_EQ(a.get_stats().evicted, 2 * kMember);
  EXPECT_TRUE(a.validate());
  a.deallocate(m[0]);
  a.deallocate(m[1]);
  EXPECT_EQ(a.get_stats().evicted, 0u);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, InconsistentSlotsAreRefused) {
  auto a = make();
  void* first = a.allocate_in_pack(kMember, stream(1), slot(1, 0));
  void* freed = a.allocate_in_pack(kMember, stream(1), slot(1, 32 * KiB));
  a.deallocate(freed);
  const auto before = a.get_stats();
  const auto refused = [&](std::size_t size, stream_handle s, pack_slot sl, const char* why) {
    try {
      (void)a.allocate_in_pack(size, s, sl);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find("allocate_in_pack"), std::string::npos) << e.what();
    }
  };
  refused(kMember, stream(1), slot(1, 8 * KiB), "overlapping a live member");
  refused(kMember, stream(1), slot(1, 40 * KiB), "overlapping a freed member's range");
  refused(kMember, stream(1), slot(1, 32 * KiB), "the very range of a freed member");
  refused(kMember, stream(1), slot(1, 56 * KiB), "beyond the pack");
  refused(kMember, stream(2), slot(1, 16 * KiB), "another stream");
  refused(kMember, stream(1), slot(1, 16 * KiB, 2 * kGranularity), "another pack size");
  refused(kMember, stream(1), slot(1, 16 * KiB + 100), "a misaligned offset");
  refused(kMember, stream(1), slot(0, 16 * KiB), "key 0");
  refused(kMember, stream(1), slot(2, 0, 0), "a pack of no bytes");
  refused(2 * kGranularity, stream(1), slot(3, 0), "a member larger than its new pack");
  const auto s = a.get_stats();
  EXPECT_EQ(s.pack_members, before.pack_members);
  EXPECT_EQ(s.packs_created, before.packs_created) << "a refused slot opened a pack";
  EXPECT_EQ(s.mapped, before.mapped);
  EXPECT_TRUE(a.validate());
  // A consistent slot still works after all that.
  void* ok = a.allocate_in_pack(kMember, stream(1), slot(1, 16 * KiB));
  EXPECT_EQ(static_cast<char*>(ok), static_cast<char*>(first) + 16 * KiB);
  EXPECT_TRUE(a.validate());
  for (const auto& b : a.live_blocks()) a.deallocate(b.base);
  EXPECT_TRUE(a.validate());
}

// The replay engine's part: evictable placement with a planned slot per request.
struct planner final : allocation_observer {
  std::optional<pack_slot> next;
  int asked = 0;
  std::vector<bool> told;  // on_allocate's `evictable`, in order
  bool place_evictable(std::size_t, stream_handle) override { return true; }
  std::optional<pack_slot> pack_slot_for(std::size_t, stream_handle) override {
    ++asked;
    return next;
  }
  void on_allocate(void*, std::size_t, stream_handle, bool e) override { told.push_back(e); }
};

TEST_F(Packs, TheObserverPlacesRequestsInPacksAndAnInconsistentSlotGetsPagesOfItsOwn) {
  auto a = make();
  planner plan;
  a.set_observer(&plan);
  plan.next = slot(7, 0);
  char* x = static_cast<char*>(a.allocate(kMember, nullptr));
  plan.next = slot(7, kMember);
  char* y = static_cast<char*>(a.allocate(kMember, nullptr));
  EXPECT_EQ(y, x + kMember);
  EXPECT_EQ(a.get_stats().mapped, kGranularity);
  EXPECT_EQ(a.get_stats().pack_members, 2u);
  plan.next = slot(7, 8 * KiB);  // overlaps x
  char* own = static_cast<char*>(a.allocate(kMember, nullptr));
  plan.next.reset();
  char* plain = static_cast<char*>(a.allocate(kMember, nullptr));  // no slot: pages of its own
  void* asked = a.allocate(kMember, nullptr, true);  // the caller asked: no slot is asked for
  a.set_observer(nullptr);
  EXPECT_EQ(plan.asked, 4);
  ASSERT_EQ(plan.told.size(), 5u);
  for (bool e : plan.told) EXPECT_TRUE(e);
  for (char* p : {own, plain}) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kGranularity, 0u);
    auto info = a.find(p);
    ASSERT_TRUE(info.has_value());
    EXPECT_TRUE(info->evictable);
    EXPECT_EQ(info->size, kGranularity) << "pages of its own";
  }
  const auto s = a.get_stats();
  EXPECT_EQ(s.pack_refusals, 1u);
  EXPECT_EQ(s.pack_members, 2u);
  EXPECT_EQ(s.mapped, 4 * kGranularity);
  EXPECT_TRUE(a.validate());
  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(own), static_cast<void*>(plain), asked})
    a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, WithNoRoomUnderTheBudgetTheObserverPathFallsBackToASharedPlacement) {
  auto a = make(4 * MiB);
  void* held = a.allocate(3 * MiB + 512 * KiB, nullptr);  // an exact segment
  char* member = static_cast<char*>(a.allocate_in_pack(kMember, nullptr, slot(1, 0)));  // the next page
  void* small = a.allocate(400 * KiB, nullptr);  // 448 KiB: 48 KiB of it free
  ASSERT_EQ(a.get_stats().mapped, 4 * MiB);
  planner plan;
  a.set_observer(&plan);
  plan.next = slot(1, kMember);  // the pack's page is mapped: no room needed
  char* sibling = static_cast<char*>(a.allocate(kMember, nullptr));
  plan.next = slot(2, 0);  // a new pack needs a page that does not fit
  void* x = a.allocate(kMember, nullptr);
  a.set_observer(nullptr);
  EXPECT_EQ(sibling, member + kMember);
  ASSERT_EQ(plan.told.size(), 2u);
  EXPECT_TRUE(plan.told[0]);
  EXPECT_FALSE(plan.told[1]) << "the observer was told the block is evictable";
  ASSERT_NE(x, nullptr);
  EXPECT_FALSE(a.find(x)->evictable);
  const auto s = a.get_stats();
  EXPECT_EQ(s.shared_placements, 1u);
  EXPECT_EQ(s.pack_refusals, 0u);
  EXPECT_EQ(s.packs_created, 1u);
  EXPECT_LE(s.mapped_peak, 4 * MiB);
  EXPECT_TRUE(a.validate());
  for (void* p : {held, small, x, static_cast<void*>(member), static_cast<void*>(sibling)}) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, UnderPressureThePressureHandlerMakesRoomForANewPack) {
  auto a = make(2 * kGranularity);
  void* e1 = a.allocate(kGranularity, nullptr, true);
  void* e2 = a.allocate(kGranularity, nullptr, true);
  int calls = 0;
  a.set_pressure_handler([&](std::size_t) -> std::size_t {
    if (calls++ > 0) return 0;
    a.evict(e1);
    return kGranularity;
  });
  void* m = a.allocate_in_pack(kMember, nullptr, slot(4, 0));
  EXPECT_NE(m, nullptr);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(a.find(e1)->state, residency::evicted);
  EXPECT_LE(a.get_stats().mapped_peak, 2 * kGranularity);
  // Nothing left to evict: a second pack is out of memory.
  EXPECT_THROW((void)a.allocate_in_pack(kMember, nullptr, slot(5, 0)), out_of_memory);
  EXPECT_TRUE(a.validate());
  a.set_pressure_handler({});
  for (void* p : {e1, e2, m}) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(Packs, RandomOperationsKeepTheInvariantsAndTheResidentContents) {
  // Packs of four 16 KiB slots on two streams, plain evictable blocks beside them, some used
  // on a third stream, under a budget of eight pages that is often short; events complete at
  // random. Every resident member keeps what was written to it.
  auto a = make(8 * kGranularity);
  std::mt19937 rng(7);
  struct member {
    char* p = nullptr;
    unsigned char tag = 0;
    std::uint64_t key = 0;  // 0: pages of its own
  };
  std::vector<member> live;
  std::vector<std::size_t> next_slot(16, 0);  // per pack key 1..15: the next unused slot
  std::vector<std::uint64_t> ending;           // keys whose members are all freed
  unsigned char tag = 1;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 8);
    if (op <= 1 || live.empty()) {
      const std::uint64_t key = 1 + rng() % 15;
      stream_handle s = stream(static_cast<int>(1 + key % 2));
      if (next_slot[key] == 4) continue;  // a full pack stays full until it ends
      const bool own = rng() % 5 == 0;
      void* p = nullptr;
      try {
        if (own) {
          p = a.allocate(kMember, s, true);
        } else {
          p = a.allocate_in_pack(kMember, s, slot(key, next_slot[key] * kMember));
          ++next_slot[key];
        }
      } catch (const out_of_memory&) {
        continue;
      }
      std::memset(p, tag, kMember);
      live.push_back({static_cast<char*>(p), tag++, own ? 0 : key});
    } else {
      const std::size_t i = rng() % live.size();
      member& m = live[i];
      switch (op) {
        case 2:
        case 3:
          a.evict(m.p);
          break;
        case 4:
          try {
            const bool was_resident = a.find(m.p)->state == residency::resident;
            a.restore(m.p);
            if (!was_resident) {
              m.tag = tag++;
              std::memset(m.p, m.tag, kMember);
            }
          } catch (const out_of_memory&) {
          }
          break;
        case 5: {
          const std::uint64_t key = m.key;
          a.deallocate(m.p);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          // A pack whose members are all gone ends (once the frees used on stream 3 are
          // done): its key starts a new pack at slot 0 after the next completion.
          if (key != 0 && std::none_of(live.begin(), live.end(), [&](const member& x) { return x.key == key; })) {
            next_slot[key] = 4;
            ending.push_back(key);
          }
          break;
        }
        case 6:
          events.complete_all();
          a.reclaim();
          for (std::uint64_t key : ending) next_slot[key] = 0;
          ending.clear();
          break;
        default:
          if (rng() % 2 == 0) {
            a.record_stream(m.p, stream(3));  // its free and its pack's unmap wait for stream 3
          } else {
            a.reclaim();
          }
          break;
      }
    }
    for (const member& x : live) {
      const auto info = a.find(x.p);
      ASSERT_TRUE(info.has_value()) << "step " << step;
      if (info->state != residency::resident) continue;
      ASSERT_EQ(static_cast<unsigned char>(x.p[0]), x.tag) << "step " << step;
      ASSERT_EQ(static_cast<unsigned char>(x.p[kMember - 1]), x.tag) << "step " << step;
    }
    ASSERT_TRUE(a.validate()) << "step " << step;
    ASSERT_LE(a.get_stats().mapped, 8 * kGranularity);
  }
  const auto s = a.get_stats();
  EXPECT_GT(s.pack_members, 100u);
  EXPECT_GT(s.evictions, 100u);
  EXPECT_GT(s.restores, 10u);
  EXPECT_GT(s.oom_errors, 0u) << "the budget was never short";
  for (const member& x : live) a.deallocate(x.p);
  EXPECT_TRUE(a.validate());
  EXPECT_EQ(a.get_stats().allocated, 0u);
  EXPECT_EQ(a.get_stats().evicted, 0u);
}

struct gated_fixture : ::testing::Test {
  device::host_vmm device{device::host_vmm_options{kGranularity, 1 * GiB}};
  stream_gated_events events;
  caching_allocator make() { return caching_allocator(device, events, make_options(0)); }
};

using PacksAcrossStreams = gated_fixture;

TEST_F(PacksAcrossStreams, AMemberUsedOnAnotherStreamDelaysTheUnmapUntilThatStreamsWorkCompletes) {
  auto a = make();
  auto m = four_members(a, 1, stream(1));
  a.record_stream(m[2], stream(2));
  for (char* p : m) a.evict(p);
  const std::size_t mapped = in_segments(a);
  events.complete(stream(1));
  EXPECT_EQ(a.reclaim(), 0u) << "unmapped while stream 2 may still use a member";
  EXPECT_EQ(in_segments(a), mapped);
  for (char* p : m) EXPECT_EQ(a.find(p)->state, residency::evicting);
  EXPECT_TRUE(a.validate());
  events.complete(stream(2));
  EXPECT_EQ(a.reclaim(), kGranularity);
  for (char* p : m) EXPECT_EQ(a.find(p)->state, residency::evicted);
  EXPECT_TRUE(a.validate());
  for (char* p : m) a.deallocate(p);
  EXPECT_TRUE(a.validate());
}

TEST_F(PacksAcrossStreams, AMemberFreedWhileStillUsedOnAnotherStreamHoldsThePagesUntilThatWorkCompletes) {
  auto a = make();
  auto m = four_members(a, 1, stream(1));
  a.record_stream(m[0], stream(2));
  a.deallocate(m[0]);  // waits for stream 2 before it leaves the pack
  for (int i = 1; i < 4; ++i) a.evict(m[i]);
  const std::size_t mapped = in_segments(a);
  events.complete(stream(1));
  EXPECT_EQ(a.reclaim(), 0u) << "unmapped under stream 2's use of a freed member";
  EXPECT_EQ(in_segments(a), mapped);
  EXPECT_TRUE(a.validate());
  events.complete(stream(2));
  EXPECT_EQ(a.reclaim(), 0u) << "the freed member's last use on its own stream is recorded when it leaves";
  events.complete(stream(1));
  EXPECT_EQ(a.reclaim(), kGranularity);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(a.find(m[i])->state, residency::evicted);
  EXPECT_EQ(a.get_stats().evicted, 3 * kMember);
  EXPECT_TRUE(a.validate());
  for (int i = 1; i < 4; ++i) a.deallocate(m[i]);
  EXPECT_EQ(a.get_stats().evicted, 0u);
  EXPECT_TRUE(a.validate());
}

}  // namespace
}  // namespace sublinear::allocator
