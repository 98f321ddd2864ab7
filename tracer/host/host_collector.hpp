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
//   the kernel, Note [Hook re-entrancy] in device/host/device.hpp) and one at on_exit
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
//   breaks. Hashing costs a read of every touched block after each launch, and before it
//   of those not kept (Note [Hash reuse]): a tracing-iteration mode, not a steady one.
//
// Note [Hash reuse]
// Rationale: hashing a kernel's blocks just before timing it reads them into the CPU's
//   caches, so a kernel whose operands were otherwise cold runs on warm ones: on
//   ResNet-434 BatchNorm's backward measured 0.70x and the optimizer step 0.29x of their
//   durations untraced (docs/tracer.md, "Figures"; over all kernels the warming and the
//   cache pollution of the hashes after nearly cancel). And every read costs tracing time.
//   A kernel's inputs were, in most cases, hashed already: right after the kernel that
//   last touched them.
// Approach: the hashes taken after each observed kernel are kept per allocation (the
//   recorder's name for it, so a later block at the same address never matches). Before a
//   kernel, a block whose hash is kept is not read again; only blocks no observed kernel
//   has touched yet (a fresh output, a batch just copied in) are hashed there. What can
//   change a block's bytes other than an observed kernel makes its hash stale: a copy or
//   set drops the kept hashes it overlaps (in stream order: a host function queued before
//   it), and a kernel launched while nothing is recorded drops them all (an epoch: hashes
//   kept in an earlier epoch are not used). The kept hashes never overlap: keeping one
//   drops those it overlaps, so they number at most the blocks that fit in memory.
// Limitations: bytes written from the host other than by a copy or set the device sees
//   (none of the workloads does that, and on a GPU device memory cannot be) would make a
//   kept hash stale and show as a write of the next kernel touching the block, a false
//   write and so a conservative one. A fresh block is still hashed just before its first
//   kernel; its first writer is timed with that block warm.
//
// Copies, sets and application events reach the collector through the device's
// on_memory_op / on_event_op hooks and are recorded as they are issued. They are not
// timed (the device calls no hook after queueing them); analysis estimates their cost.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "device/host/device.hpp"
#include "tracer/block_hashes.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::tracer {

struct host_collector_options {
  bool time_launches = false;   // measure each kernel's execution on its stream
  bool observe_writes = false;  // hash touched blocks around each kernel
  // Take a block's hash before a kernel from the last observed kernel that touched it
  // (Note [Hash reuse]); off, every touched block is hashed just before every kernel.
  bool reuse_hashes = true;
};

class host_collector final : public device::host::launch_hook {
 public:
  // Registers itself as a hook of `dev`. `dev` and `rec` must outlive the collector.
  host_collector(device::host::device& dev, recorder& rec, host_collector_options options = {});
  // Waits for every stream (pending measurements refer to this collector), then removes
  // the hook.
  ~host_collector() override;
  host_collector(const host_collector&) = delete;
  host_collector& operator=(const host_collector&) = delete;

  void on_enter(const device::host::launch_record& rec) override;
  void on_exit(const device::host::launch_record& rec) override;
  // Copies, sets and application event operations issued on the device, however issued.
  void on_memory_op(const device::host::memory_op_record& rec) override;
  void on_event_op(const device::host::event_op_record& rec) override;

  [[nodiscard]] const host_collector_options& options() const noexcept { return options_; }
  // Block hashes kept for reuse now (Note [Hash reuse]).
  [[nodiscard]] std::size_t kept_hash_count() const { return kept_.size(); }
  // Blocks observed before a kernel so far: hashed there, or taken from a kept hash.
  struct before_counts {
    std::uint64_t hashed = 0;
    std::uint64_t reused = 0;
  };
  [[nodiscard]] before_counts before_hashes() const;

 private:
  device::stream_handle handle_of(device::host::stream* s) const noexcept {
    return s == nullptr || s == default_stream_ ? nullptr : s;
  }

  device::host::device& dev_;
  recorder& rec_;
  host_collector_options options_;
  device::host::stream* default_stream_;
  // Used by host functions on the streams; the destructor waits for them first.
  kept_hashes kept_;
  std::atomic<std::uint64_t> hashed_{0};  // blocks hashed just before a kernel
  std::atomic<std::uint64_t> reused_{0};  // blocks whose kept hash served instead
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<bool> kept_in_epoch_{false};  // a probe of this epoch may keep hashes
};


}  // namespace sublinear::tracer
