// What the allocator tells the layers above it: every allocation and free, and the
// placement questions the replay runtime answers (evictable pages, packs, deferred frees).
// The tracer and the runtime implement allocation_observer; this header is the only part
// of the allocator the tracer includes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "allocator/device_types.hpp"

namespace sublinear::allocator {

enum class residency : std::uint8_t { resident, evicting, evicted };

// A place in a pack (Note [Pack segments]): several evictable blocks sharing one dedicated segment.
struct pack_slot {
  std::uint64_t key = 0;     // identifies the pack; nonzero; unique among live packs
  std::size_t bytes = 0;     // the pack's segment size before rounding (rounded up to the granularity)
  std::size_t offset = 0;    // the member's offset in the segment; a multiple of 512
};

// Sees every allocation and free, outside the allocator's lock, on the calling thread.
// The tracer records from it; the runtime decides placement through it. Callbacks must
// not call back into the allocator that invoked them.
class allocation_observer {
 public:
  virtual ~allocation_observer() = default;
  // Before an allocation of `size` bytes that the caller did not mark evictable:
  // return true to place it as evictable (Note [Evictable blocks]). Under a budget with no
  // room for its pages it may still be placed shared; on_allocate's `evictable` says.
  virtual bool place_evictable(std::size_t /*size*/, stream_handle /*stream*/) { return false; }
  // After place_evictable returned true: a slot in a pack for this block, or nullopt for
  // pages of its own (Note [Pack segments]).
  virtual std::optional<pack_slot> pack_slot_for(std::size_t /*size*/, stream_handle /*stream*/) { return std::nullopt; }
  virtual void on_allocate(void* /*ptr*/, std::size_t /*size*/, stream_handle /*stream*/, bool /*evictable*/) {}
  virtual void on_free(void* /*ptr*/, std::size_t /*size*/, stream_handle /*stream*/) {}
  // Before a free the caller asked for: return true to keep the block allocated (its
  // bytes and address stay as they are; on_free is not called). The observer frees it
  // later with deallocate, from a call in which this returns false (Note [Retention] in
  // policy/retention.hpp: the runtime keeps small freed inputs of recipes alive).
  virtual bool defer_free(void* /*ptr*/, std::size_t /*size*/, stream_handle /*stream*/) { return false; }
};

}  // namespace sublinear::allocator
