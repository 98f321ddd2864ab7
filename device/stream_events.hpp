// What the allocator needs from a device's streams: events it can record and poll.
//
// The caching allocator never synchronizes a stream on its hot path. It records an
// event where a block was last used and polls it later (see Note [Deferred unmap] in
// allocator/detail/eviction_queue.hpp). Backends: the host device's streams
// (device/host), CUDA events (device/cuda), and `immediate_events` for programs with no
// asynchronous work at all (every event is complete when recorded).
#pragma once

#include <cstdint>

namespace sublinear::device {

// An opaque stream handle (cudaStream_t on CUDA, host::stream* on the host device).
// nullptr is the default stream.
using stream_handle = void*;
using event_handle = void*;

class stream_events {
 public:
  virtual ~stream_events() = default;
  // Records an event on `stream` that completes when all work queued there so far has.
  virtual event_handle record(stream_handle stream) = 0;
  // True once the event has completed. Never blocks.
  virtual bool query(event_handle event) = 0;
  // Blocks the calling thread until the event has completed.
  virtual void synchronize(event_handle event) = 0;
  // Gives the event back (it may be pooled). The event may still be pending.
  virtual void release(event_handle event) noexcept = 0;
};

// For callers whose work is synchronous: every recorded event has already completed.
class immediate_events final : public stream_events {
 public:
  event_handle record(stream_handle) override { return this; }
  bool query(event_handle) override { return true; }
  void synchronize(event_handle) override {}
  void release(event_handle) noexcept override {}
};

}  // namespace sublinear::device
