// Iteration markers for the process runtime: sublinear_mark_iteration() reaches the engine.
//
// Note [Marker inbox]
// Rationale: programs mark iterations with sublinear_mark_iteration() (the Python package's
//   optimizer-step hook, a C++ trainer), which tracer/recorder.cpp defines as a marker on
//   the process's default recorder. The engine must learn of it at the same place in the
//   program's sequence of allocations, frees and launches, and the tracer must not call
//   into the runtime above it.
// Approach: the inbox installs a recorder of its own as the default recorder; that
//   recorder records nothing but the markers it is sent. poll() takes what arrived and
//   runs `deliver` once per marker. The process runtime polls before every event the
//   engine sees: as the allocator's observer (place_evictable, on_allocate and on_free
//   poll, then forward to the engine's chain) and at every launch ENTER. So a marker is
//   delivered before the first event that follows it, which is where the engine would
//   have seen it. While this thread is inside the engine (engine_scope: a launch callback,
//   a marker's delivery), poll() delivers nothing: the engine's own allocations must not
//   end an iteration in the middle of its work.
// Limitations: a marker is delivered at the next event, not at the call: an iteration's
//   wall time includes the gap until then. One inbox per process (it is the default
//   recorder); a hook in sublinear_mark_iteration would make polling unnecessary.
//
// This header does not include <cuda.h>: it is tested on the host device.
#pragma once

#include <functional>

#include "allocator/caching_allocator.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::runtime {

class marker_inbox final : public allocator::allocation_observer {
 public:
  // Installs the inbox as the default recorder; `deliver` runs once per marker, on the
  // thread that polls, inside an engine_scope.
  explicit marker_inbox(std::function<void()> deliver);
  // Puts the previous default recorder back.
  ~marker_inbox() override;
  marker_inbox(const marker_inbox&) = delete;
  marker_inbox& operator=(const marker_inbox&) = delete;

  // Delivers the markers that arrived, unless this thread is inside the engine.
  void poll();

  // The allocator's observer: poll, then forward to `next` (the engine's chain).
  void set_next(allocation_observer* next) noexcept { next_ = next; }
  [[nodiscard]] allocation_observer* next() const noexcept { return next_; }
  bool place_evictable(std::size_t size, device::stream_handle stream) override;
  std::optional<allocator::pack_slot> pack_slot_for(std::size_t size, device::stream_handle stream) override;
  void on_allocate(void* ptr, std::size_t size, device::stream_handle stream, bool evictable) override;
  void on_free(void* ptr, std::size_t size, device::stream_handle stream) override;
  bool defer_free(void* ptr, std::size_t size, device::stream_handle stream) override;

  // While alive, this thread is inside the engine and poll() delivers nothing. Nests.
  class engine_scope {
   public:
    engine_scope() noexcept;
    ~engine_scope();
    engine_scope(const engine_scope&) = delete;
    engine_scope& operator=(const engine_scope&) = delete;
  };

 private:
  std::function<void()> deliver_;
  tracer::recorder inbox_;
  tracer::recorder* previous_ = nullptr;
  allocation_observer* next_ = nullptr;
};

}  // namespace sublinear::runtime
