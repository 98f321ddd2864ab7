// See Note [Default allocator factory] in default_allocator.hpp.
#include "allocator/default_allocator.hpp"

#include <atomic>

namespace sublinear::allocator {
namespace {
// Constant-initialized: a factory registered from another object's static initializer
// must find these already set up.
constinit std::atomic<caching_allocator*> installed{nullptr};
constinit std::atomic<const default_allocator_factory*> factory{nullptr};

const char* const no_factory =
    "sublinear: no allocator is installed in this process. Start the program with `sublinear run`, "
    "call sublinear.torch.enable(), or install one with sublinear::allocator::set_default_allocator()";
}  // namespace

caching_allocator* default_allocator() noexcept { return installed.load(std::memory_order_acquire); }

caching_allocator* set_default_allocator(caching_allocator* a) noexcept {
  return installed.exchange(a, std::memory_order_acq_rel);
}

const default_allocator_factory* set_default_allocator_factory(const default_allocator_factory* f) noexcept {
  return factory.exchange(f, std::memory_order_acq_rel);
}

const default_allocator_factory* registered_default_allocator_factory() noexcept {
  return factory.load(std::memory_order_acquire);
}

caching_allocator* default_allocator_or_create(std::string* why) noexcept {
  if (caching_allocator* a = default_allocator()) return a;
  const default_allocator_factory* f = registered_default_allocator_factory();
  if (f == nullptr || f->create == nullptr) {
    if (why != nullptr) {
      try {
        *why = no_factory;
      } catch (...) {
      }
    }
    return nullptr;
  }
  caching_allocator* created = f->create(why);
  if (created == nullptr) return nullptr;
  // Another thread may have installed one meanwhile: keep theirs.
  caching_allocator* expected = nullptr;
  if (installed.compare_exchange_strong(expected, created, std::memory_order_acq_rel)) return created;
  return expected;
}

}  // namespace sublinear::allocator
