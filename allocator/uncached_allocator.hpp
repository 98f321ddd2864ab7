// The cudaMalloc analogue: every allocation reserves, creates, maps and grants access;
// every free unmaps and releases. It exists as the baseline the caching allocator is
// measured against (benchmarks/allocator) and as the simplest correct allocator for
// the conformance suite.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "allocator/device_types.hpp"

namespace sublinear::allocator {

class uncached_allocator {
 public:
  // `budget` 0 means the device's physical capacity.
  explicit uncached_allocator(vmm& device, std::size_t budget = 0);
  ~uncached_allocator();
  uncached_allocator(const uncached_allocator&) = delete;
  uncached_allocator& operator=(const uncached_allocator&) = delete;

  // Throws out_of_memory past the budget or the device's memory.
  void* allocate(std::size_t size);
  // Precondition (as cudaFree guarantees by synchronizing): no pending work uses ptr.
  void deallocate(void* ptr) noexcept;
  [[nodiscard]] std::size_t mapped() const;

 private:
  struct mapping {
    std::size_t size;
    chunk_handle handle;
  };
  vmm& device_;
  std::size_t budget_;
  mutable std::mutex mutex_;
  std::map<char*, mapping> live_;
  std::size_t mapped_ = 0;
};

}  // namespace sublinear::allocator
