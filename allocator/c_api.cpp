// The C entry points (include/sublinear/sublinear.h) over the installed default allocator.
#include <cstring>
#include <exception>
#include <string>

#include "allocator/default_allocator.hpp"
#include "sublinear/sublinear.h"

namespace {

thread_local std::string last_error;

sublinear::allocator::caching_allocator* installed_or_error() {
  auto* a = sublinear::allocator::default_allocator();
  if (a == nullptr) {
    last_error =
        "sublinear: no allocator is installed in this process. Start the program with `sublinear run`, "
        "call sublinear.torch.enable(), or install one with sublinear::allocator::set_default_allocator()";
  }
  return a;
}

}  // namespace

extern "C" {

void* sublinear_alloc(ssize_t size, int /*device*/, void* stream) {
  if (size < 0) {
    last_error = "sublinear_alloc: negative size " + std::to_string(size);
    return nullptr;
  }
  auto* a = installed_or_error();
  if (a == nullptr) return nullptr;
  try {
    return a->allocate(static_cast<std::size_t>(size), stream);
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

void sublinear_free(void* ptr, ssize_t /*size*/, int /*device*/, void* /*stream*/) {
  if (ptr == nullptr) return;
  if (auto* a = installed_or_error()) a->deallocate(ptr);
}

void sublinear_record_stream(void* ptr, void* stream) {
  auto* a = installed_or_error();
  if (a == nullptr) return;
  try {
    a->record_stream(ptr, stream);
  } catch (const std::exception& e) {
    last_error = e.what();
  }
}

void sublinear_empty_cache(void) {
  if (auto* a = installed_or_error()) {
    try {
      a->empty_cache();
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
}

int sublinear_get_stats(sublinear_stats* out) {
  auto* a = installed_or_error();
  if (a == nullptr || out == nullptr) return -1;
  auto s = a->get_stats();
  *out = sublinear_stats{s.allocated, s.allocated_peak, s.mapped,     s.mapped_peak, s.reserved,
                         s.reserved_peak, s.evicted,    s.evicted_total, s.budget,   s.allocs,
                         s.frees,     s.evictions,      s.restores,   s.map_calls,   s.unmap_calls,
                         s.set_access_calls, s.resident_peak};
  return 0;
}

void sublinear_reset_peaks(void) {
  if (auto* a = installed_or_error()) a->reset_peaks();
}

const char* sublinear_last_error(void) { return last_error.c_str(); }

}  // extern "C"
