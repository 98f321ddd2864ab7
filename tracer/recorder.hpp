// The recorder: turns allocator callbacks and collector reports into a trace.
//
// Note [Recorder]
// Rationale: one sink for every source of events (the allocator's observer hooks, the
//   host device's launch hooks, CUPTI callbacks, explicit markers), so that ordering is
//   decided in one place and every trace is self-contained.
// Approach: every event takes the next sequence number under one mutex and is appended to
//   the current trace; a launch's parameter bytes are copied into the trace's arena. The
//   recorder keeps its own map of live blocks (from on_allocate/on_free) whether or not
//   it is recording, so that (a) a trace begins with a `preexisting` alloc event for every
//   block live when recording started: analysis never needs history the trace lacks, and
//   (b) collectors can scan parameters at launch time (write observation). The kernel
//   table is keyed by the device's handle; a collector describes a kernel only the first
//   time its handle is seen. Durations and observed writes arrive later (from stream
//   workers or activity buffers) and are attached to their launch by sequence number.
//   take() copies the trace out and keeps the recorder's buffers (events, parameter
//   arena) with their capacity, so a steady run of traced iterations appends into memory
//   that is already mapped: no reallocation copies or page faults per launch.
// Limitations: the caching allocator calls on_free after releasing its lock, so another
//   thread may allocate the same address and report it first; an alloc at a live address
//   therefore closes the old block (a synthetic free) and the late free is dropped. Reports
//   for a launch that belongs to a trace already taken are dropped: synchronize the device
//   before take() to keep them. One mutex: fine for the tens of threads a training process
//   launches from, not designed for hundreds. The buffers keep the largest trace's size
//   until the recorder is destroyed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "allocator/allocation_observer.hpp"
#include "device/stream_events.hpp"
#include "sublinear/export.h"
#include "tracer/events.hpp"
#include "tracer/pointer_scan.hpp"

namespace sublinear::tracer {

struct recorder_options {
  never_replay_list never_replay = never_replay_list::defaults();
  std::string device = "host";
  std::uint64_t granularity = 0;  // the allocator's, for analysis (0: unknown)
  bool start_recording = true;    // false: only track blocks until start()
};

// What a collector reports for one launch.
struct launch_args {
  std::uint64_t kernel_handle = 0;
  dims grid, block;
  std::uint32_t shared_mem = 0;
  device::stream_handle stream = nullptr;  // nullptr: the default stream
  std::span<const std::byte> params;          // packed (see param_packing.hpp)
  std::uint64_t correlation = 0;
  std::uint8_t flags = 0;                     // extra event_flags (names_event)
  // cuLaunchKernelEx's attributes: recorded in trace::launch_attributes (ignored entries
  // dropped); one a replay cannot reproduce sets names_event (Note [Launch attributes]).
  std::span<const device::launch_attribute> attributes;
};

// Describes the kernel behind a handle seen for the first time. Called under the
// recorder's lock: it must not call back into the recorder.
using describe_kernel_fn = kernel_info (*)(const void* context);

// A live block, as the recorder knows it.
struct block_extent {
  std::uint64_t base = 0;
  std::uint64_t size = 0;
  // The recorder's name for the allocation: a later block at the same address gets another
  // (names wrap only after 2^32 allocations).
  std::uint32_t allocation = 0;
  bool operator==(const block_extent&) const = default;
};

class recorder final : public allocator::allocation_observer {
 public:
  explicit recorder(recorder_options options = {});
  ~recorder() override;
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;

  // ---- allocation_observer (install with caching_allocator::set_observer) ----
  bool place_evictable(std::size_t size, device::stream_handle stream) override;
  std::optional<allocator::pack_slot> pack_slot_for(std::size_t size, device::stream_handle stream) override;
  void on_allocate(void* ptr, std::size_t size, device::stream_handle stream, bool evictable) override;
  void on_free(void* ptr, std::size_t size, device::stream_handle stream) override;
  bool defer_free(void* ptr, std::size_t size, device::stream_handle stream) override;
  // Another observer to forward every callback to (the runtime's placement). Not owned.
  void set_next(allocation_observer* next) noexcept { next_.store(next, std::memory_order_release); }
  // The allocator's page granularity, for traces recorded from now on (a recorder made
  // before its allocator: the CUDA process runtime's tracing side).
  void set_granularity(std::uint64_t granularity);

  // ---- reports from collectors; each returns the event's sequence number, or no_seq when
  // not recording ----
  std::uint64_t record_launch(const launch_args& args, describe_kernel_fn describe, const void* context);
  // `kind` unknown: inferred from which side is a live block.
  std::uint64_t record_memcpy(const void* dst, const void* src, std::size_t bytes,
                              device::stream_handle stream, copy_kind kind = copy_kind::unknown);
  std::uint64_t record_memset(const void* dst, int value, std::size_t bytes, device::stream_handle stream);
  std::uint64_t record_event_record(std::uint64_t event_handle, device::stream_handle stream);
  std::uint64_t record_event_wait(std::uint64_t event_handle, device::stream_handle stream);
  // The explicit iteration marker: a new iteration begins here.
  std::uint64_t mark_iteration();

  // Measurements attached later to a recorded launch, memcpy or memset.
  void set_duration(std::uint64_t seq, std::uint64_t duration_ns);
  // The observed write set of a launch: marks it observed and lists the blocks written
  // (possibly none).
  // `fresh`: blocks it found still filled as allocated (Note [Filled fresh blocks]).
  void set_writes(std::uint64_t seq, std::span<const std::uint64_t> block_bases,
                  std::span<const std::uint64_t> fresh = {});

  // Time the collectors spent observing launches' writes (hashing the blocks each touches,
  // before and after it, where that work runs in line with the launches): work only a
  // recorded iteration does, which a caller timing iterations can leave out.
  void add_observation_ns(std::uint64_t ns) noexcept { observation_ns_.fetch_add(ns, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t observation_ns() const noexcept { return observation_ns_.load(std::memory_order_relaxed); }
  // Host time the collectors spent recording launches on the launching thread (their
  // interception callbacks: the record, the pointer scan, queuing the observation), work
  // only a recorded iteration does. Both collectors count it, reading the clock only while
  // recording.
  void add_recording_ns(std::uint64_t ns) noexcept { recording_ns_.fetch_add(ns, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t recording_ns() const noexcept { return recording_ns_.load(std::memory_order_relaxed); }

  // ---- pointer scan against the live blocks, now ----
  void scan(std::span<const std::byte> params, std::vector<scan_hit>& out) const;
  // The distinct live blocks `params` points into, in address order.
  [[nodiscard]] std::vector<block_extent> touched_blocks(std::span<const std::byte> params) const;
  [[nodiscard]] std::size_t live_blocks() const;

  // ---- control ----
  // Starts a new trace (the current one is discarded), beginning with a preexisting alloc
  // for every live block.
  void start();
  // Stops recording; the trace so far is kept for take()/snapshot().
  void stop();
  [[nodiscard]] bool recording() const noexcept { return recording_.load(std::memory_order_acquire); }
  // The trace so far; recording, if on, continues into a fresh trace (with preexisting
  // allocs) that keeps the kernel and stream tables.
  trace take();
  [[nodiscard]] trace snapshot() const;
  [[nodiscard]] std::size_t event_count() const;
  [[nodiscard]] const recorder_options& options() const noexcept { return options_; }

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  recorder_options options_;
  std::atomic<bool> recording_{false};
  std::atomic<allocation_observer*> next_{nullptr};
  std::atomic<std::uint64_t> observation_ns_{0};
  std::atomic<std::uint64_t> recording_ns_{0};
};

// The process's default recorder, for the C marker below: a resettable reference, not a
// singleton. Returns the previous one.
recorder* default_recorder() noexcept;
recorder* set_default_recorder(recorder* r) noexcept;

// Steady clock, nanoseconds: the time base of every event.
[[nodiscard]] std::uint64_t now_ns() noexcept;

}  // namespace sublinear::tracer

extern "C" {
// Marks an iteration boundary in the default recorder's trace (no-op without one).
// Belongs in include/sublinear/sublinear.h; declared here until it is added there.
SUBLINEAR_API void sublinear_mark_iteration(void);
}
