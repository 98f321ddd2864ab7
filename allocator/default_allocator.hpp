// The process's default allocator: a resettable reference, not a singleton.
//
// The C entry points (include/sublinear/sublinear.h) use whatever allocator is installed
// here. Tests and the host device install their own instance and reset it afterwards;
// nothing in the library holds on to a default it did not install.
//
// Note [Default allocator factory]
// Rationale: a program that only calls the C API (PyTorch's pluggable allocator, a C++
//   trainer) never installs an allocator, yet its first sublinear_alloc must get the CUDA
//   process runtime (runtime/cuda/). The allocator library must not depend on
//   the runtime that sits above it.
// Approach: the runtime registers a factory (a static initializer in its CUDA sources,
//   linked whole into libsublinear.so and libsublinear_preload.so). When no default is
//   installed, default_allocator_or_create() asks the factory, once per call, and installs
//   what it returns. The factory remembers a failure (no driver) and answers it again
//   without retrying, so the C API can call it on every allocation.
// Limitations: one factory per process image; registering another replaces it.
#pragma once

#include <string>

#include "allocator/caching_allocator.hpp"

namespace sublinear::allocator {

// The installed default, or nullptr.
caching_allocator* default_allocator() noexcept;
// Installs `a` (may be nullptr) and returns the previous default. Does not take ownership.
caching_allocator* set_default_allocator(caching_allocator* a) noexcept;

// What a runtime registers (Note [Default allocator factory]). Every entry must not throw.
struct default_allocator_factory {
  // The process's allocator, created on first call; nullptr with the reason in *why.
  caching_allocator* (*create)(std::string* why) = nullptr;
  // The allocator create() returned, or nullptr if it has not (never creates).
  caching_allocator* (*existing)() = nullptr;
  // One line: "active on <device>, budget X, state Y", or why it is inactive.
  std::string (*status)() = nullptr;
  // Writes the run report to `path` (null or "": SUBLINEAR_REPORT); false with *why.
  bool (*write_report)(const char* path, std::string* why) = nullptr;
};

// Registers `f` (static storage; nullptr removes it) and returns the previous one.
const default_allocator_factory* set_default_allocator_factory(const default_allocator_factory* f) noexcept;
[[nodiscard]] const default_allocator_factory* registered_default_allocator_factory() noexcept;

// The installed default; failing that, the one the registered factory creates, installed
// as the default. nullptr with the reason in *why (when not null) otherwise.
caching_allocator* default_allocator_or_create(std::string* why = nullptr) noexcept;

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
