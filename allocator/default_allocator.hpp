// The process's default allocator: a resettable reference, not a singleton.
//
// The C entry points (include/sublinear/sublinear.h) use whatever allocator is installed
// here. Tests and the host device install their own instance and reset it afterwards;
// nothing in the library holds on to a default it did not install.
#pragma once

#include "allocator/caching_allocator.hpp"

namespace sublinear::allocator {

// The installed default, or nullptr.
caching_allocator* default_allocator() noexcept;
// Installs `a` (may be nullptr) and returns the previous default. Does not take ownership.
caching_allocator* set_default_allocator(caching_allocator* a) noexcept;

// Installs `a` for the lifetime of this object, then puts the previous default back.
class scoped_default_allocator {
 public:
  explicit scoped_default_allocator(caching_allocator& a) : previous_(set_default_allocator(&a)) {}
  ~scoped_default_allocator() { set_default_allocator(previous_); }
  scoped_default_allocator(const scoped_default_allocator&) = delete;
  scoped_default_allocator& operator=(const scoped_default_allocator&) = delete;

 private:
  caching_allocator* previous_;
};

}  // namespace sublinear::allocator
