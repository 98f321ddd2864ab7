#include "allocator/default_allocator.hpp"

#include <atomic>

namespace sublinear::allocator {
namespace {
std::atomic<caching_allocator*> installed{nullptr};
}  // namespace

caching_allocator* default_allocator() noexcept { return installed.load(std::memory_order_acquire); }

caching_allocator* set_default_allocator(caching_allocator* a) noexcept {
  return installed.exchange(a, std::memory_order_acq_rel);
}

}  // namespace sublinear::allocator
