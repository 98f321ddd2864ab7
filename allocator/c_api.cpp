// The C entry points (include/sublinear/sublinear.h) over the process's default allocator.
// Allocation creates the process runtime on first use when none is installed (Note
// [Default allocator factory] in default_allocator.hpp); frees and queries never create
// anything.
#include <cstring>
#include <exception>
#include <string>

#include "allocator/c_api_error.hpp"
#include "allocator/default_allocator.hpp"
#include "common/text.hpp"
#include "sublinear/sublinear.h"

namespace {

thread_local std::string last_error;
// sublinear_status's line, kept per thread so the pointer stays valid until the next call.
thread_local std::string status_line;

void set_error(const std::string& text) noexcept {
  try {
    last_error = text;
  } catch (...) {
  }
}

// The default allocator, created by the registered factory if none is installed.
sublinear::allocator::caching_allocator* created_or_error() {
  std::string why;
  auto* a = sublinear::allocator::default_allocator_or_create(&why);
  if (a == nullptr) set_error(why);
  return a;
}

// The installed default allocator only.
sublinear::allocator::caching_allocator* installed_or_error() {
  auto* a = sublinear::allocator::default_allocator();
  if (a == nullptr) {
    set_error(sublinear::allocator::registered_default_allocator_factory() != nullptr
                  ? "sublinear: no allocator has been created in this process yet (the first sublinear_alloc "
                    "creates it)"
                  : "sublinear: no allocator is installed in this process. Start the program with `sublinear run`, "
                    "call sublinear.torch.enable(), or install one with sublinear::allocator::set_default_allocator()");
  }
  return a;
}

// An allocator installed by the program rather than created by the runtime's factory.
bool installed_by_program(const sublinear::allocator::default_allocator_factory* f) {
  auto* installed = sublinear::allocator::default_allocator();
  return installed != nullptr && (f == nullptr || f->existing == nullptr || installed != f->existing());
}

}  // namespace

void sublinear::allocator::set_c_api_error(const std::string& text) noexcept { set_error(text); }

extern "C" {

void* sublinear_alloc(ssize_t size, int /*device*/, void* stream) {
  if (size < 0) {
    set_error("sublinear_alloc: negative size " + std::to_string(size));
    return nullptr;
  }
  auto* a = created_or_error();
  if (a == nullptr) return nullptr;
  try {
    return a->allocate(static_cast<std::size_t>(size), stream);
  } catch (const std::exception& e) {
    set_error(e.what());
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
    set_error(e.what());
  }
}

void sublinear_empty_cache(void) {
  if (auto* a = installed_or_error()) {
    try {
      a->empty_cache();
    } catch (const std::exception& e) {
      set_error(e.what());
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

int sublinear_write_report(const char* path) {
  const auto* f = sublinear::allocator::registered_default_allocator_factory();
  if (installed_by_program(f) || f == nullptr || f->write_report == nullptr) {
    set_error("sublinear_write_report: no process runtime here: reports come from the runtime that `sublinear run`, "
              "libsublinear.so and sublinear.torch.enable() create, not from an allocator the program installed");
    return -1;
  }
  std::string why;
  if (!f->write_report(path, &why)) {
    set_error(why);
    return -1;
  }
  return 0;
}

const char* sublinear_status(void) {
  try {
    const auto* f = sublinear::allocator::registered_default_allocator_factory();
    if (installed_by_program(f)) {
      const auto s = sublinear::allocator::default_allocator()->get_stats();
      status_line = "active on an allocator the program installed, budget " +
                    (s.budget != 0 ? sublinear::format_bytes(s.budget) : std::string("none")) +
                    ", state caching (no process runtime)";
    } else if (f != nullptr && f->status != nullptr) {
      status_line = f->status();
    } else {
      status_line = "inactive: no allocator is installed and this library has no process runtime to create one";
    }
  } catch (...) {
    return "inactive: the status could not be read (out of memory)";
  }
  return status_line.c_str();
}

const char* sublinear_last_error(void) { return last_error.c_str(); }

const char* sublinear_version(void) { return SUBLINEAR_VERSION_STRING; }

}  // extern "C"
