// sublinear inside a real CUDA process: the driver's VMM under the caching allocator, the
// CUPTI collector feeding the replay engine, and replay through the driver, in one object.
//
// Note [Process runtime]
// Rationale: `sublinear run` (LD_PRELOAD + CUDA_INJECTION64_PATH), PyTorch's pluggable
//   allocator and a C++ program calling the C API all need the same thing: on the first
//   allocation, an allocator and a replay engine over the GPU the program uses, configured
//   from SUBLINEAR_*, with no call the program has to make. It is the GPU twin of
//   host_runtime (runtime/host/), wired the same way.
// Approach: two halves with different lifetimes.
//   - The tracing side (a recorder and the CUPTI collector) must exist before the first
//     launch, so InitializeInjection starts it from inside cuInit. Without injection it
//     starts with the runtime: launches before that are not seen, which only costs the
//     first traced iteration's completeness.
//   - The runtime proper (allocator, engine and replay device over the calling thread's
//     device) is created on first use from the environment, the driver loaded by dlopen.
//   - Iteration markers reach the engine through a marker inbox (Note [Marker inbox] in
//     marker_inbox.hpp), polled before every allocation, free and launch ENTER.
//   - At exit SUBLINEAR_REPORT is written, and SUBLINEAR_TRACE when the run ended before
//     the engine planned (the engine writes it at planning otherwise).
//   The process's runtime (instance()) is never destroyed: frameworks free memory from
//   static destructors and CUDA calls back until the process exits. The start-up in
//   detail: docs/design-notes.md#process-runtime.
// Limitations: one device per process (allocations on other devices are the caller's to
//   pass through; see serves_current_device). Without CUPTI (missing, or another subscriber
//   such as a profiler) or with SUBLINEAR_DISABLE the engine is disabled: plain caching.
//   Without iteration markers the engine keeps tracing; past 4M recorded events in one
//   iteration it stops tracing and says so.
//
// This header does not include <cuda.h>.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "allocator/caching_allocator.hpp"
#include "runtime/engine.hpp"
#include "runtime/settings.hpp"

namespace sublinear::runtime {

class process_runtime {
 public:
  // A runtime over the calling thread's current CUDA device (device 0 when no context is
  // current), configured by `config`. Throws sublinear::device_error when no usable CUDA
  // driver or device is found (the message says so and what to do), config_error for a
  // malformed budget. It is not the process's runtime: instance() is.
  static std::unique_ptr<process_runtime> create(const settings& config);
  ~process_runtime();
  process_runtime(const process_runtime&) = delete;
  process_runtime& operator=(const process_runtime&) = delete;

  // The process's runtime, created on the first call from the SUBLINEAR_* environment and
  // never destroyed. nullptr with the reason in *why when it cannot be created; the
  // failure is remembered and answered again without retrying.
  static process_runtime* instance(std::string* why = nullptr) noexcept;
  // The process's runtime if it has been created; never creates it.
  static process_runtime* existing() noexcept;
  // The process runtime's status line, creating it if needed: "active on cuda:0 (<name>),
  // budget 8GiB, state steady" or "inactive: <why>".
  static std::string status() noexcept;
  // Starts the tracing side (Note [Process runtime]); idempotent. `inside_injection`: called
  // from InitializeInjection, inside cuInit.
  static void start_tracing(bool inside_injection) noexcept;

  [[nodiscard]] allocator::caching_allocator& allocator() noexcept;
  [[nodiscard]] engine& get() noexcept;
  [[nodiscard]] const settings& config() const noexcept;
  [[nodiscard]] int device() const noexcept;
  // "cuda:0 (NVIDIA H100 80GB HBM3)".
  [[nodiscard]] std::string device_name() const;
  [[nodiscard]] std::string status_line() const;

  // Delivers an iteration boundary to the engine now (sublinear_mark_iteration reaches it
  // through the marker inbox; this is the direct route).
  void mark_iteration();
  // Writes the JSON report (docs/reports.md); throws sublinear::error naming the path.
  void write_report(const std::string& path);

  // Whether `p` lies in a block of this runtime's allocator (interior pointers count).
  [[nodiscard]] bool owns(const void* p) const;
  // Whether the calling thread's current CUDA device is this runtime's.
  [[nodiscard]] bool serves_current_device() const noexcept;
  // Waits for all work in the device's context (what cudaFree implies).
  void synchronize();
  // The bytes to report as the device's total memory (cudaMemGetInfo): the planned budget,
  // or the budget as set when it is absolute (bytes, a share of the device); 0 when there
  // is no budget to report (none set, or a multiple of the traced peak not yet planned).
  [[nodiscard]] std::size_t reported_total_memory() const noexcept;

 private:
  struct impl;
  explicit process_runtime(std::unique_ptr<impl> i);
  void write_outputs_at_exit() noexcept;
  // SUBLINEAR_REPORT, from the fatal path at a launch's entry (Note [Listener failure at a
  // launch] in tracer/cupti/cupti_collector.hpp).
  void write_report_at_failure() noexcept;
  std::unique_ptr<impl> impl_;
};

// The message of the device_error create() throws without a driver; `why` is the
// loader's reason (device::load_driver).
[[nodiscard]] std::string no_driver_message(const std::string& why);

}  // namespace sublinear::runtime
