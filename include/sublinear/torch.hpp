// sublinear in a LibTorch (C++ PyTorch) program: one call before the first CUDA tensor.
//
//   #include <sublinear/torch.hpp>
//
//   sublinear::torch::install();                 // before anything touches CUDA
//   for (...) {                                  // the training loop
//     auto loss = ...; loss.backward();
//     sublinear::torch::step(optimizer);         // optimizer.step() + iteration marker
//     optimizer.zero_grad();
//   }
//   sublinear::torch::write_report("report.json");
//
// Link the program with libsublinear.so (CMake: sublinear::sublinear, or the library that
// `pip install .` puts in the package: python -c "import sublinear; print(sublinear.library_path())").
//
// Note [LibTorch helper]
// Rationale: PyTorch's CUDA allocator can be replaced by a pluggable one made of two C
//   functions, and sublinear exports exactly those (sublinear_alloc, sublinear_free).
//   From Python only those two can be given; from C++ the other hooks PyTorch calls can be
//   set as well, and they matter: without record_stream a tensor used on a second stream
//   could be reused before that stream is done with it, and without reset
//   torch::cuda::empty_cache() (c10's emptyCache) would keep every cached page.
// Approach: createCustomAllocator(sublinear_alloc, sublinear_free), then on that
//   CUDAPluggableAllocator: set_record_stream_fn -> sublinear_record_stream, set_reset_fn ->
//   sublinear_empty_cache, set_memory_fraction_fn -> a one-time warning (the budget comes
//   from SUBLINEAR_BUDGET, which accepts a share of device memory: "60%"), set_init_fn ->
//   nothing to prepare (sublinear creates its allocator on the first allocation, after
//   the settings have been read). Then changeCurrentAllocator. Iteration boundaries come
//   from step() or mark_iteration(): LibTorch's optimizers have no global step hook.
// Limitations: header-only, so it compiles against the LibTorch the program uses; it must run
//   before the first CUDA allocation (PyTorch refuses to swap an initialized allocator, and
//   install() says so first). c10's device statistics (getDeviceStats, the memory_* family)
//   cannot see a pluggable allocator: use stats(). Settings given to install() are set in
//   the process environment and are checked when sublinear reads them, at the first
//   allocation; a malformed one then fails that allocation with sublinear's message.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "sublinear/sublinear.h"

namespace sublinear::torch {

// Settings for install(); an empty field leaves the environment's SUBLINEAR_* value (or
// the default) in force. The accepted forms are in docs/settings.md.
struct options {
  std::string budget;  // SUBLINEAR_BUDGET: "8GiB", "60%", "0.5x"
  std::string policy;  // SUBLINEAR_POLICY: "reforward", "chen", ...
  std::string report;  // SUBLINEAR_REPORT: a JSON report written at exit
};

namespace detail {

inline void set_setting(const char* name, const std::string& value) {
  if (!value.empty() && ::setenv(name, value.c_str(), 1) != 0) {
    throw std::runtime_error(std::string("sublinear::torch::install: cannot set ") + name);
  }
}

inline void warn_memory_fraction(double fraction, int device) {
  static bool warned = false;  // PyTorch calls this per device; one line is enough
  if (warned) return;
  warned = true;
  std::fprintf(stderr,
               "sublinear: set_per_process_memory_fraction(%g, device %d) has no effect under sublinear; "
               "set the budget with SUBLINEAR_BUDGET (for this fraction: SUBLINEAR_BUDGET=%g%%)\n",
               fraction, device, fraction * 100.0);
}

}  // namespace detail

// Makes sublinear PyTorch's CUDA allocator. Throws std::runtime_error when there is no CUDA
// device or when PyTorch's allocator has already been used (call install() first).
inline void install(const options& o = {}) {
  namespace pluggable = ::torch::cuda::CUDAPluggableAllocator;
  if (!::torch::cuda::is_available()) {
    throw std::runtime_error(
        "no CUDA device: sublinear::torch::install() needs a GPU (torch::cuda::is_available() is false). "
        "On a machine without one, `sublinear demo` shows the engine on the host device.");
  }
  auto* current = c10::cuda::CUDACachingAllocator::get();
  if (current != nullptr && current->initialized()) {
    throw std::runtime_error(
        "sublinear::torch::install(): PyTorch's CUDA allocator (" + current->name() +
        ") is already in use, and PyTorch cannot swap an allocator after its first allocation. "
        "Call sublinear::torch::install() at the start of main(), before any CUDA tensor is created.");
  }
  detail::set_setting("SUBLINEAR_BUDGET", o.budget);
  detail::set_setting("SUBLINEAR_POLICY", o.policy);
  detail::set_setting("SUBLINEAR_REPORT", o.report);

  auto base = pluggable::createCustomAllocator(
      [](size_t size, int device, cudaStream_t stream) -> void* {
        return sublinear_alloc(static_cast<ssize_t>(size), device, stream);
      },
      [](void* ptr, size_t size, int device, cudaStream_t stream) {
        sublinear_free(ptr, static_cast<ssize_t>(size), device, stream);
      });
  auto allocator = std::dynamic_pointer_cast<pluggable::CUDAPluggableAllocator>(base);
  if (!allocator) {
    throw std::runtime_error("sublinear::torch::install(): createCustomAllocator did not return a "
                             "CUDAPluggableAllocator; this LibTorch is not supported");
  }
  allocator->set_record_stream_fn([](void* ptr, cudaStream_t stream) { sublinear_record_stream(ptr, stream); });
  allocator->set_reset_fn([] { sublinear_empty_cache(); });
  allocator->set_memory_fraction_fn(detail::warn_memory_fraction);
  allocator->set_init_fn([](int /*device_count*/) {});  // see Note [LibTorch helper]
  pluggable::changeCurrentAllocator(allocator);
}

// An iteration boundary (the tracer and the replay engine start a new iteration here).
inline void mark_iteration() noexcept { sublinear_mark_iteration(); }

// optimizer.step(), then the iteration boundary. Any type with step() works.
template <class Optimizer>
auto step(Optimizer& optimizer) {
  if constexpr (std::is_void_v<decltype(optimizer.step())>) {
    optimizer.step();
    sublinear_mark_iteration();
  } else {
    auto result = optimizer.step();
    sublinear_mark_iteration();
    return result;
  }
}

// sublinear's statistics (c10's device statistics cannot see a pluggable allocator).
// Throws when sublinear has no allocator yet (nothing was allocated since install()).
inline sublinear_stats stats() {
  sublinear_stats s{};
  if (sublinear_get_stats(&s) != 0) {
    throw std::runtime_error(std::string("sublinear::torch::stats(): ") + sublinear_last_error());
  }
  return s;
}

// One line: "active on <device>, budget <X>, state <Y>" or "inactive: <why>". Creates
// sublinear's runtime if there is none yet, which reads the settings: call it after install().
inline std::string status() {
  const char* line = sublinear_status();
  return line != nullptr ? line : "";
}

// Writes the JSON report (docs/reports.md) to path ("" means the SUBLINEAR_REPORT path).
inline void write_report(const std::string& path = {}) {
  if (sublinear_write_report(path.empty() ? nullptr : path.c_str()) != 0) {
    throw std::runtime_error(std::string("sublinear::torch::write_report(): ") + sublinear_last_error());
  }
}

}  // namespace sublinear::torch
