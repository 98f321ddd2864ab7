// Randomized differential stress test: the caching allocator against a simple reference
// model, over a million operations with fixed seeds, single- and multi-threaded, with
// events that complete late. After every step: no two live blocks overlap, alignment
// holds, every live block still holds the bytes written into it, mapped bytes never
// exceed the budget, and evicted-then-restored blocks are writable at the same address.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/host_vmm.hpp"
#include "test_events.hpp"

namespace sublinear::allocator {
namespace {

constexpr std::size_t kGranularity = 64 * KiB;
constexpr std::size_t kBudget = 96 * MiB;

// Writes and checks a pattern in the first, middle and last 8 bytes of a block.
std::vector<std::size_t> stamp_offsets(std::size_t size) {
  if (size < 24) return {0};
  return {0, size / 2 / 8 * 8, size - 8};
}
void stamp(void* p, std::size_t size, std::uint64_t tag) {
  auto* c = static_cast<char*>(p);
  for (std::size_t off : stamp_offsets(size)) {
    std::size_t n = std::min<std::size_t>(8, size - off);
    std::uint64_t v = tag ^ off;
    std::memcpy(c + off, &v, n);
  }
}
bool stamped(const void* p, std::size_t size, std::uint64_t tag) {
  const auto* c = static_cast<const char*>(p);
  for (std::size_t off : stamp_offsets(size)) {
    std::size_t n = std::min<std::size_t>(8, size - off);
    std::uint64_t v = tag ^ off;
    if (std::memcmp(c + off, &v, n) != 0) return false;
  }
  return true;
}

struct model_block {
  char* ptr;
  std::size_t size;
  std::uint64_t tag;
  bool evictable;
  bool evicted;  // evict() was called and restore() not since: contents are undefined
};

// Live ranges of every thread, to catch two threads being handed overlapping blocks.
class overlap_checker {
 public:
  // Returns false if [p, p+size) overlaps a live range.
  bool insert(char* p, std::size_t size) {
    std::lock_guard lock(mutex_);
    auto next = ranges_.lower_bound(p);
    if (next != ranges_.end() && next->first < p + size) return false;
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second > p) return false;
    }
    ranges_.emplace(p, size);
    return true;
  }
  void erase(char* p) {
    std::lock_guard lock(mutex_);
    ranges_.erase(p);
  }

 private:
  std::mutex mutex_;
  std::map<char*, std::size_t> ranges_;
};

std::size_t random_size(std::mt19937_64& rng) {
  // Log-uniform from 1 B to 4 MiB: mostly small, a few large, as in training.
  std::uniform_real_distribution<double> exponent(0.0, 22.0);
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(exponent(rng))));
}

struct worker_result {
  std::uint64_t ops = 0, ooms = 0, evictions = 0, restores = 0;
  std::string failure;
};

// Runs `ops` random operations on stream `s`, checking the model after each.
worker_result run_worker(caching_allocator& a, overlap_checker& overlaps, stream_handle s, std::uint64_t seed,
                         std::uint64_t ops, bool check_stats_exactly) {
  worker_result r;
  std::mt19937_64 rng(seed);
  std::vector<model_block> live;
  std::size_t requested = 0;
  auto fail = [&](const std::string& what) {
    if (r.failure.empty()) r.failure = what + " (seed " + std::to_string(seed) + ", op " + std::to_string(r.ops) + ")";
  };
  for (; r.ops < ops && r.failure.empty(); ++r.ops) {
    const int action = static_cast<int>(rng() % 100);
    if (action < 45 || live.empty()) {
      const std::size_t size = random_size(rng);
      const bool evictable = rng() % 4 == 0;
      void* p = nullptr;
      try {
        p = a.allocate(size, s, evictable);
      } catch (const out_of_memory&) {
        ++r.ooms;
        continue;
      }
      const std::size_t align = evictable ? kGranularity : 512;
      if (reinterpret_cast<std::uintptr_t>(p) % align != 0) fail("misaligned block");
      if (!overlaps.insert(static_cast<char*>(p), size)) fail("overlapping live blocks");
      const std::uint64_t tag = rng();
      stamp(p, size, tag);
      live.push_back({static_cast<char*>(p), size, tag, evictable, false});
      requested += size;
    } else if (action < 85) {
      const std::size_t i = rng() % live.size();
      model_block b = live[i];
      if (!b.evicted && !stamped(b.ptr, b.size, b.tag)) fail("contents changed while the block was live");
      overlaps.erase(b.ptr);
      a.deallocate(b.ptr);
      live[i] = live.back();
      live.pop_back();
      requested -= b.size;
    } else {
      std::vector<std::size_t> candidates;
      for (std::size_t i = 0; i < live.size(); ++i)
        if (live[i].evictable) candidates.push_back(i);
      if (candidates.empty()) continue;
      model_block& b = live[candidates[rng() % candidates.size()]];
      if (!b.evicted) {
        if (!stamped(b.ptr, b.size, b.tag)) fail("contents changed before eviction");
        a.evict(b.ptr);
        b.evicted = true;
        ++r.evictions;
      } else {
        try {
          // Half the restores name the stream, which lets them take a chunk whose last use
          // is still pending there (Note [Stream-ordered handoff]).
          if (rng() % 2 == 0) {
            a.restore(b.ptr, s);
          } else {
            a.restore(b.ptr);
          }
        } catch (const out_of_memory&) {
          ++r.ooms;
          continue;
        }
        auto info = a.find(b.ptr);
        if (!info || info->base != b.ptr || info->state != residency::resident) fail("restore moved or lost the block");
        stamp(b.ptr, b.size, b.tag);  // restored pages must be writable at the same address
        b.evicted = false;
        ++r.restores;
      }
    }
    const stats st = a.get_stats();
    if (st.mapped > st.budget) fail("mapped bytes exceed the budget");
    if (check_stats_exactly) {
      if (st.requested != requested) fail("requested bytes disagree with the model");
      if (st.allocs - st.frees != live.size()) fail("live block count disagrees with the model");
      if (r.ops % 4096 == 0 && !a.validate()) fail("allocator invariants broken");
    }
  }
  for (auto& b : live) {
    if (!b.evicted && !stamped(b.ptr, b.size, b.tag)) fail("contents changed before the final free");
    overlaps.erase(b.ptr);
    a.deallocate(b.ptr);
  }
  return r;
}

std::uint64_t operations() {
  // 10^6 by default; SUBLINEAR_STRESS_OPS overrides (e.g. for a longer soak).
  if (const char* v = std::getenv("SUBLINEAR_STRESS_OPS")) return std::strtoull(v, nullptr, 10);
  return 1'000'000;
}

TEST(AllocatorStress, SingleThreadMatchesTheReferenceModel) {
  device::host_vmm device{device::host_vmm_options{kGranularity, 1 * GiB, /*populate_on_access=*/false}};  // stamps 3 words per block
  testing::countdown_events events(3);
  options o;
  o.budget = kBudget;
  o.reserve = 8 * GiB;
  caching_allocator a(device, events, o);
  overlap_checker overlaps;
  auto r = run_worker(a, overlaps, nullptr, 42, operations(), true);
  EXPECT_EQ(r.failure, "");
  EXPECT_EQ(r.ops, operations());
  EXPECT_GT(r.evictions, 1000u);
  EXPECT_GT(r.restores, 1000u);
  EXPECT_GT(r.ooms, 0u) << "the budget was never reached: the test does not exercise the ladder";
  auto st = a.get_stats();
  EXPECT_LE(st.mapped_peak, kBudget);
  EXPECT_GT(st.handoffs, 0u) << "no stream-ordered handoff ran: the test does not exercise it";
  EXPECT_EQ(st.allocated, 0u);
  EXPECT_TRUE(a.validate());
}

TEST(AllocatorStress, FourThreadsOnTheirOwnStreamsShareOneBudget) {
  device::host_vmm device{device::host_vmm_options{kGranularity, 1 * GiB, /*populate_on_access=*/false}};  // stamps 3 words per block
  testing::countdown_events events(2);
  options o;
  o.budget = kBudget;
  o.reserve = 8 * GiB;
  caching_allocator a(device, events, o);
  overlap_checker overlaps;
  constexpr int kThreads = 4;
  std::vector<worker_result> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto s = reinterpret_cast<stream_handle>(static_cast<std::uintptr_t>(0x100 * (t + 1)));
      results[static_cast<std::size_t>(t)] = run_worker(a, overlaps, s, 1000 + static_cast<std::uint64_t>(t),
                                                        operations() / kThreads, false);
    });
  }
  for (auto& th : threads) th.join();
  std::uint64_t total = 0;
  for (const auto& r : results) {
    EXPECT_EQ(r.failure, "");
    total += r.ops;
  }
  EXPECT_EQ(total, operations() / kThreads * kThreads);
  auto st = a.get_stats();
  EXPECT_LE(st.mapped_peak, kBudget);
  EXPECT_GT(st.handoffs, 0u) << "no stream-ordered handoff ran: the test does not exercise it";
  EXPECT_EQ(st.allocated, 0u);
  EXPECT_EQ(st.allocs, st.frees);
  EXPECT_TRUE(a.validate());
}

}  // namespace
}  // namespace sublinear::allocator
