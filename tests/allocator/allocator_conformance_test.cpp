// One conformance suite for every allocator over every VMM backend it can run on:
// the caching allocator on the host and CUDA backends, and the uncached baseline.
// Instances that need a GPU skip with the reason when no driver is present.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/host_vmm.hpp"
#include "allocator/uncached_allocator.hpp"
#if defined(SUBLINEAR_HAVE_CUDA)
#include "device/cuda/cuda_events.hpp"
#include "device/cuda/cuda_vmm.hpp"
#endif

namespace sublinear::allocator {
namespace {

// What the suite needs from an allocator under test.
class subject {
 public:
  virtual ~subject() = default;
  virtual void* allocate(std::size_t size) = 0;
  virtual void deallocate(void* p) = 0;
  virtual std::size_t mapped() = 0;
  virtual bool host_accessible() const { return true; }
};

class caching_subject final : public subject {
 public:
  caching_subject(std::unique_ptr<vmm> device, std::unique_ptr<stream_events> events, std::size_t budget,
                  bool host_accessible)
      : device_(std::move(device)), events_(std::move(events)), host_accessible_(host_accessible) {
    options o;
    o.budget = budget;
    o.reserve = std::max<std::size_t>(4 * budget, 1 * GiB);
    alloc_ = std::make_unique<caching_allocator>(*device_, *events_, o);
  }
  ~caching_subject() override {
    EXPECT_TRUE(alloc_->validate());
    alloc_.reset();
  }
  void* allocate(std::size_t size) override { return alloc_->allocate(size, nullptr); }
  void deallocate(void* p) override { alloc_->deallocate(p); }
  std::size_t mapped() override { return alloc_->get_stats().mapped; }
  bool host_accessible() const override { return host_accessible_; }

 private:
  std::unique_ptr<vmm> device_;
  std::unique_ptr<stream_events> events_;
  std::unique_ptr<caching_allocator> alloc_;
  bool host_accessible_;
};

class uncached_subject final : public subject {
 public:
  explicit uncached_subject(std::size_t budget)
      : device_(device::host_vmm_options{64 * KiB, 1 * GiB}), alloc_(device_, budget) {}
  void* allocate(std::size_t size) override { return alloc_.allocate(size); }
  void deallocate(void* p) override { alloc_.deallocate(p); }
  std::size_t mapped() override { return alloc_.mapped(); }

 private:
  device::host_vmm device_;
  uncached_allocator alloc_;
};

constexpr std::size_t kBudget = 64 * MiB;

struct caching_on_host {
  static std::unique_ptr<subject> make(std::string*) {
    return std::make_unique<caching_subject>(std::make_unique<device::host_vmm>(device::host_vmm_options{64 * KiB, 1 * GiB}),
                                             std::make_unique<device::immediate_events>(), kBudget, true);
  }
};
struct uncached_on_host {
  static std::unique_ptr<subject> make(std::string*) { return std::make_unique<uncached_subject>(kBudget); }
};
struct caching_on_cuda {
  static std::unique_ptr<subject> make(std::string* why) {
#if defined(SUBLINEAR_HAVE_CUDA)
    auto device = device::make_cuda_vmm(0, why);
    if (!device) return nullptr;
    return std::make_unique<caching_subject>(std::move(device), std::make_unique<device::cuda_events>(), kBudget, false);
#else
    *why = "built without the CUDA backend";
    return nullptr;
#endif
  }
};

template <class Factory>
class AllocatorConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    subject_ = Factory::make(&why);
    if (!subject_) GTEST_SKIP() << "not run: " << why;
  }
  void TearDown() override { subject_.reset(); }
  std::unique_ptr<subject> subject_;
};

TYPED_TEST_SUITE_P(AllocatorConformance);

TYPED_TEST_P(AllocatorConformance, ReturnsDistinctAlignedNonOverlappingBlocks) {
  std::mt19937 rng(7);
  std::map<char*, std::size_t> live;
  for (int i = 0; i < 300; ++i) {
    std::size_t size = 1 + rng() % (256 * KiB);
    auto* p = static_cast<char*>(this->subject_->allocate(size));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
    auto next = live.lower_bound(p);
    if (next != live.end()) {
      EXPECT_LE(p + size, next->first);
    }
    if (next != live.begin()) {
      EXPECT_LE(std::prev(next)->first + std::prev(next)->second, p);
    }
    live.emplace(p, size);
  }
  for (auto& [p, size] : live) this->subject_->deallocate(p);
}

TYPED_TEST_P(AllocatorConformance, KeepsContentsOfLiveBlocks) {
  if (!this->subject_->host_accessible()) GTEST_SKIP() << "device memory is not host-accessible";
  std::vector<std::pair<unsigned char*, std::size_t>> blocks;
  for (int i = 0; i < 100; ++i) {
    std::size_t size = 100 + static_cast<std::size_t>(i) * 3000;
    auto* p = static_cast<unsigned char*>(this->subject_->allocate(size));
    std::memset(p, i, size);
    blocks.emplace_back(p, size);
  }
  for (std::size_t i = 0; i < blocks.size(); i += 2) this->subject_->deallocate(blocks[i].first);
  for (std::size_t i = 1; i < blocks.size(); i += 2) {
    auto [p, size] = blocks[i];
    EXPECT_EQ(p[0], i);
    EXPECT_EQ(p[size - 1], i);
    this->subject_->deallocate(p);
  }
}

TYPED_TEST_P(AllocatorConformance, FailsPastTheBudgetWithOutOfMemory) {
  std::vector<void*> held;
  bool failed = false;
  for (int i = 0; i < 100 && !failed; ++i) {
    try {
      held.push_back(this->subject_->allocate(3 * MiB));
    } catch (const out_of_memory& e) {
      failed = true;
      EXPECT_EQ(e.details().requested, 3 * MiB);
      EXPECT_EQ(e.details().ran_out, out_of_memory::cause::budget) << e.what();
    }
    EXPECT_LE(this->subject_->mapped(), kBudget);
  }
  EXPECT_TRUE(failed);
  EXPECT_GE(held.size(), kBudget / (3 * MiB) - 4) << "far fewer blocks fit than the budget allows";
  for (void* p : held) this->subject_->deallocate(p);
  // Everything freed: the same request succeeds again.
  void* p = this->subject_->allocate(3 * MiB);
  this->subject_->deallocate(p);
}

TYPED_TEST_P(AllocatorConformance, IsSafeFromSeveralThreads) {
  std::vector<std::thread> threads;
  std::vector<int> errors(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<unsigned char*, unsigned char>> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.size() < 20 && rng() % 2 == 0) {
          auto* p = static_cast<unsigned char*>(this->subject_->allocate(1 + rng() % 8192));
          auto tag = static_cast<unsigned char>(rng());
          if (this->subject_->host_accessible()) *p = tag;
          mine.emplace_back(p, tag);
        } else if (!mine.empty()) {
          auto [p, tag] = mine.back();
          if (this->subject_->host_accessible() && *p != tag) ++errors[static_cast<std::size_t>(t)];
          this->subject_->deallocate(p);
          mine.pop_back();
        }
      }
      for (auto [p, tag] : mine) this->subject_->deallocate(p);
    });
  }
  for (auto& th : threads) th.join();
  for (int e : errors) EXPECT_EQ(e, 0);
}

REGISTER_TYPED_TEST_SUITE_P(AllocatorConformance, ReturnsDistinctAlignedNonOverlappingBlocks,
                            KeepsContentsOfLiveBlocks, FailsPastTheBudgetWithOutOfMemory, IsSafeFromSeveralThreads);

using subjects = ::testing::Types<caching_on_host, uncached_on_host, caching_on_cuda>;

struct subject_names {
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, caching_on_host>) return "CachingOnHost";
    if (std::is_same_v<T, uncached_on_host>) return "UncachedOnHost";
    return "CachingOnCuda";
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(All, AllocatorConformance, subjects, subject_names);

}  // namespace
}  // namespace sublinear::allocator
