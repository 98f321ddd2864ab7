// The host-device collector: launches from the device's ENTER/EXIT hooks, measured
// durations and observed write sets.
//
// Note [Host collector]
// Rationale: the host device calls launch hooks exactly where CUPTI's callbacks fire, so
//   recording there exercises the same path the CUPTI collector takes on a GPU.
// Approach: on_enter records the launch (kernel, dimensions, stream, packed parameter
//   bytes) into the recorder; nothing else happens on the default path, which is what the
//   interception benchmark measures. Timing and write observation bracket the kernel
//   with two host functions on its stream: one queued at on_enter (it runs just before
//   the kernel, Note [Hook re-entrancy] in allocator/host/device.hpp) and one at on_exit
//   (just after). They run on the stream's worker, so the interval is the kernel's own
//   execution, whether the device is asynchronous or synchronous.
//
// Note [Write observation]
// Rationale: the planner must know which buffers a launch modifies (a replay must not
//   repeat a side effect; an input written after its producer ran makes a recipe stale).
//   Parameter scanning only says what a launch may touch.
// Approach: for an observed launch, the blocks its parameters point into are hashed
//   before and after the kernel (by the bracketing host functions); a block whose hash
//   changed was written. The result is attached to the launch (trace::writes).
// Limitations: a write that leaves the bytes as they were (ReLU in place over positive
//   values, adding zeros) is not seen; the runtime's validation pass catches what that
//   breaks. Hashing costs a read of every touched block per launch: a tracing-iteration
//   mode, not a steady one.
//
// Copies, sets and application events reach the collector through the device's
// on_memory_op / on_event_op hooks and are recorded as they are issued. They are not
// timed (the device calls no hook after queueing them); analysis estimates their cost.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/host/device.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::tracer {

struct host_collector_options {
  bool time_launches = false;   // measure each kernel's execution on its stream
  bool observe_writes = false;  // hash touched blocks around each kernel
};

class host_collector final : public host::launch_hook {
 public:
  // Registers itself as a hook of `dev`. `dev` and `rec` must outlive the collector.
  host_collector(host::device& dev, recorder& rec, host_collector_options options = {});
  // Waits for every stream (pending measurements refer to this collector), then removes
  // the hook.
  ~host_collector() override;
  host_collector(const host_collector&) = delete;
  host_collector& operator=(const host_collector&) = delete;

  void on_enter(const host::launch_record& rec) override;
  void on_exit(const host::launch_record& rec) override;
  // Copies, sets and application event operations issued on the device, however issued.
  void on_memory_op(const host::memory_op_record& rec) override;
  void on_event_op(const host::event_op_record& rec) override;

  [[nodiscard]] const host_collector_options& options() const noexcept { return options_; }

 private:
  allocator::stream_handle handle_of(host::stream* s) const noexcept {
    return s == nullptr || s == default_stream_ ? nullptr : s;
  }

  host::device& dev_;
  recorder& rec_;
  host_collector_options options_;
  host::stream* default_stream_;
};

// 64-bit content hash used by write observation (fast, not cryptographic).
[[nodiscard]] std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept;

}  // namespace sublinear::tracer
