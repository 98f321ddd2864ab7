// Which CUPTI driver callbacks the collector takes, what each one is, and which it needs
// in each phase of a run. Plain data over callback ids, so that it is tested without a
// GPU (tests/tracer/cupti_callbacks_test.cpp). This header does not include CUPTI's.
//
// Note [Phase-aware subscription]
// Rationale: with nothing evicted, sublinear must cost next to nothing, yet CUPTI calls
//   the collector for every driver call it enabled and times every kernel while activity
//   records are on. Most of that is needed only while an iteration is traced: events and
//   waits feed the recorder alone, durations only the planners.
// Approach: three phases. `tracing`: every callback the recorder or the engine uses, and
//   activity records. `steady` (planned iterations): what the engine needs to follow
//   the trace and to act at a launch (kernel, graph, copy and set launches), stream
//   capture (captured launches do not run), and the calls that must be refused
//   (stream-ordered allocation, Note [Stream-ordered allocation]); no event callbacks, no
//   activity records. `off` (no engine, or tracing stopped): nothing. The collector
//   enables and disables single callback ids as the phase changes (set_phase); in steady
//   iterations a launch's callback decodes its parameters into thread-local storage that
//   keeps its capacity (no allocation per launch).
// Limitations: the packed parameter block is still built for every launch the engine
//   sees (it scans it for evicted blocks and saves it for recipes); CUPTI calls the
//   subscriber at both ENTER and EXIT of each enabled id.
//
// Note [Stream-ordered allocation]
// Rationale: memory from cuMemAllocAsync or a memory pool that does not come from
//   sublinear's allocator is outside its budget: a plan made while such memory comes and
//   goes would not hold. The preload route serves cudaMallocAsync and cuMemAllocAsync
//   itself, so those calls never reach the driver; what CUPTI still sees bypassed it.
// Approach: the collector reports every such call that succeeded to its listener. The
//   process runtime stops tracing (sublinear runs as a plain caching allocator) when one
//   comes while it traces, and warns once when one comes later, with
//   stream_ordered_message: which call, and the setting that avoids it.
// Limitations: a pool allocation made before tracing begins is not refused (it is
//   memory the program holds, as any other); its bytes are not under the budget.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "device/stream_events.hpp"

namespace sublinear::tracer {

enum class callback_class : std::uint8_t {
  other,
  kernel_launch,          // cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel (and _ptsz)
  graph_launch,           // cuGraphLaunch
  capture_begin,          // cuStreamBeginCapture (every form), cuStreamBeginCaptureToGraph
  capture_end,            // cuStreamEndCapture
  memcpy,                 // the async copies the engine follows
  memset,
  event_record,
  event_wait,
  stream_ordered_alloc,   // cuMemAllocAsync, cuMemAllocFromPoolAsync
  stream_ordered_free,    // cuMemFreeAsync
  pool,                   // cuMemPoolCreate, cuMemPoolTrimTo, ... (pool management)
};
[[nodiscard]] const char* to_string(callback_class c) noexcept;

// What a CUPTI driver callback id is (other for ids the collector does not take).
[[nodiscard]] callback_class classify_driver_callback(std::uint32_t cbid) noexcept;
// The id of a driver function by its name ("cuLaunchKernelEx_ptsz"), 0 if the collector
// does not know it. Names are the driver's, as CUPTI's callback ids spell them.
[[nodiscard]] std::uint32_t driver_callback_id(std::string_view name) noexcept;
// The driver function's name for an id the collector knows ("" otherwise).
[[nodiscard]] std::string_view driver_callback_name(std::uint32_t cbid) noexcept;

enum class collector_phase : std::uint8_t { off, tracing, steady };
[[nodiscard]] const char* to_string(collector_phase p) noexcept;

struct subscription {
  std::vector<std::uint32_t> callbacks;  // driver callback ids, ascending
  bool activity = false;                 // kernel, copy and set activity records (durations)
};
// Note [Phase-aware subscription].
[[nodiscard]] subscription subscription_for(collector_phase phase);

// Note [Stream-ordered allocation]: the message for a stream-ordered allocation or pool
// call `call` ("cuMemAllocAsync") of `bytes` (0: not an allocation) that bypassed
// sublinear's allocator; `tracing`: it came while the engine traced.
[[nodiscard]] std::string stream_ordered_message(std::string_view call, std::size_t bytes, bool tracing);

// Streams with a stream capture in progress, as cuStreamBeginCapture / cuStreamEndCapture
// report them: launches on them are captured into a graph, not run, and are neither
// recorded nor shown to the listener. Fixed capacity, no allocation; thread-safe enough
// for the collector's use (captures begin and end on the capturing thread; a lookup
// races only with a capture of another stream). More concurrent captures than the
// capacity are counted in `overflow` and make every launch look captured (safe: not
// recorded, the engine sees a diverging iteration).
class capture_set {
 public:
  static constexpr std::size_t capacity = 16;
  void begin(device::stream_handle s) noexcept;
  void end(device::stream_handle s) noexcept;
  [[nodiscard]] bool capturing(device::stream_handle s) const noexcept;
  [[nodiscard]] bool any() const noexcept {
    return count_.load(std::memory_order_acquire) != 0 || overflow_.load(std::memory_order_acquire) != 0;
  }

 private:
  std::array<std::atomic<device::stream_handle>, capacity> streams_{};
  std::atomic<bool> used_[capacity] = {};
  std::atomic<std::size_t> count_{0};
  std::atomic<std::size_t> overflow_{0};
};

}  // namespace sublinear::tracer
