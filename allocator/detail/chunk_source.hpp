// Where a segment's physical pages come from and go to: fresh chunks, the pool of unmapped
// chunks kept by exact size, and chunks handed from an old mapping to a new one while the
// old one waits for its events.
//
// Note [Chunk pool]
// Rationale: eviction gives pages back and regeneration wants the same amount again a
//   few launches later. Releasing the chunk and creating a fresh one costs a create, a
//   release and, worst of all, a page fault per page on first touch (zero-filled pages on
//   the host, the driver's own zeroing on CUDA). Profiles of replayed training spent more
//   time there than in most kernels.
// Approach: when an eviction completes, the segment's chunk is unmapped but kept, in a
//   pool keyed by its exact size (a mapping covers a whole chunk, so only an equal size
//   can reuse it). Every mapping (a new segment of any kind, a restore) first takes a
//   pooled chunk of its size: one map and one set_access, no create, and on the host
//   device no fresh pages. A cached free segment released under pressure whose size is
//   the one wanted goes through the pool too. The pool is honest about memory: pooled
//   chunks are physical memory, so `stats::mapped` (the budgeted quantity) counts them
//   (`stats::pooled` says how much of it is pooled) and a budget bounds mapped + pooled.
//   Under pressure the pool is trimmed first (other sizes before the wanted one), before
//   cached segments are released or pending evictions waited for. empty_cache() and
//   set_budget() empty it. `options::pool_chunks = false` restores release + create.
// Limitations: exact sizes only; a workload whose evicted sizes never recur gains
//   nothing and holds up to the budget in pooled chunks until pressure trims them.
//
// Note [Stream-ordered handoff]
// Rationale: at a tight budget the pages a mapping needs are often held by a freed
//   segment whose last use is still queued on the stream. Waiting for that
//   event drains the stream's queue, and the stream then idles while the host maps and
//   queues the next work: at the Re-forwarding table's smallest ResNet-152 budget about
//   35 such waits per iteration, 28 of them for a chunk of exactly the size wanted, on the
//   very stream that would use the new mapping.
// Approach: work queued later on the same stream runs after that last use, so the chunk
//   can be mapped at its new address at once (a second mapping of the same physical
//   chunk: the ledger counts mappings per chunk, and a CUDA chunk is freed only once
//   every mapping of it is gone). The old address is unmapped once its events complete,
//   and only then given back to the address space; the chunk is counted once, as the new
//   mapping's. Taken only for an exact size, when every event of the old use is on the
//   requesting stream: allocate() (a block is used on its stream) and restore() with the
//   stream the caller will use the pages on; restore() without one never hands off.
//   Only a freed segment's chunk is handed off, never a pending eviction's: an evicted
//   block's address must show its own bytes until it is unmapped, so that a stray access
//   through a pointer the engine's safety net cannot see reads them or faults, never
//   another buffer's (CachingAllocatorDeathTest.AnEvictedBlocksAddress...). Mapping over
//   an address whose old mapping is still pending settles that one first.
//   `options::stream_ordered_handoff = false` waits as before.
// Limitations: exact sizes only, like the pool; work on other streams never takes part;
//   a mapping that needs an evicted block's pages waits for its eviction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "allocator/detail/address_space.hpp"
#include "allocator/detail/context.hpp"

namespace sublinear::allocator::detail {

class chunk_source {
 public:
  chunk_source(context& ctx, address_space& space);
  chunk_source(const chunk_source&) = delete;
  chunk_source& operator=(const chunk_source&) = delete;

  // Maps a chunk of `size` bytes at `base` and grants access: the chunk set aside by a
  // handoff, else a pooled one, else a fresh one; an old mapping still pending over the
  // range is settled first. On success `handle` names the chunk. Returns the status of
  // the failing call, having rolled back what succeeded.
  vmm_status map(char* base, std::size_t size, chunk_handle& handle);
  // Unmaps the ranges in one device call (Note [Batched unmap] in host_vmm.cpp). Throws
  // device_error. Precondition: no pending work touches them (Note [Deferred unmap]).
  void unmap(std::span<const vmm_range> ranges);
  // A chunk just unmapped from its segment: kept in the pool (`keep`, still counted in
  // mapped) or released (no longer counted). Returns the release's status.
  [[nodiscard]] vmm_status retire(chunk_handle chunk, std::size_t size, bool keep);

  // A pooled chunk of exactly `size` bytes is there.
  [[nodiscard]] bool pooled(std::size_t size) const;
  // A mapping of `bytes` can be made now: the handed-off chunk or a pooled one of that
  // size (already counted), or room under the budget.
  [[nodiscard]] bool ready(std::size_t bytes) const;
  // Releases pooled chunks until `bytes` more fit under the budget: other sizes first,
  // largest first, then chunks of `keep_size`.
  void trim(std::size_t bytes, std::size_t keep_size);
  // Releases every pooled chunk.
  void empty_pool();

  // Sets aside the chunk mapped at [base, base + size), whose last use is queued on
  // `stream` behind `events`, for the next map() on that stream; the old address is
  // unmapped once the events complete (and given back to the address space with
  // `give_range`).
  void hand_over(char* base, std::size_t size, chunk_handle chunk, std::vector<event_handle> events,
                 bool give_range, stream_handle stream);
  [[nodiscard]] bool holding_handoff() const noexcept { return handoff_.has_value(); }
  // A chunk set aside by a request that failed before mapping it serves only a request of
  // its own size and stream: any other request orphans it.
  void keep_handoff_for(std::size_t bytes, std::optional<stream_handle> stream);
  // The chunk set aside is not wanted: released once its old address is unmapped.
  void orphan_handoff();
  [[nodiscard]] bool has_orphans() const;

  // Unmaps a batch of old mappings whose events have completed, oldest first (the
  // allocation path's poll). Never blocks.
  void poll();
  // Unmaps every old mapping whose events have completed. Never blocks.
  void settle_completed();
  // Waits for every old mapping's events, then unmaps them all.
  void settle_all();

  // Shutdown, in the allocator's order: the old mappings (waited for, unmapped, orphans
  // released), and later the pool. Statuses are ignored.
  void shutdown_old_mappings() noexcept;
  void shutdown_pool() noexcept;

  // For the validator: bytes in the pool, and in orphaned chunks (counted in mapped).
  [[nodiscard]] std::size_t pooled_bytes() const;
  [[nodiscard]] std::size_t orphaned_bytes() const;

 private:
  // The old address of a chunk handed to a new mapping while work queued on its stream
  // may still use it: unmapped once `events` have completed.
  struct old_mapping {
    char* base = nullptr;
    std::size_t size = 0;
    chunk_handle chunk = 0;
    std::vector<event_handle> events;
    bool give_range = false;  // the range belonged to a released segment: back to the address space
    bool orphan = false;      // the new mapping failed: the chunk is released after the unmap
  };
  struct handed_chunk {
    std::size_t size = 0;
    chunk_handle chunk = 0;
    stream_handle stream = nullptr;
  };
  static constexpr std::size_t kSettleBatch = 16;  // old mappings a poll lets build up

  using pool_map = std::multimap<std::size_t, chunk_handle>;
  void release_pooled(pool_map::iterator it);
  void trim_pool(std::size_t bytes, std::size_t keep_size, bool all);
  // Unmaps the old mappings whose events have completed (all of them with `wait`), or
  // only those overlapping [lo, lo + bytes) when `lo` is given, or only those of `chunk`.
  // With `in_order`, stops at the first one not complete: polls take them oldest first.
  void settle(bool wait, const char* lo = nullptr, std::size_t bytes = 0,
              std::optional<chunk_handle> chunk = std::nullopt, bool in_order = false);
  void mark_orphan(chunk_handle chunk);

  context& ctx_;
  address_space& space_;
  pool_map pool_;                        // size -> unmapped chunk (Note [Chunk pool])
  std::vector<old_mapping> old_mappings_;
  std::optional<handed_chunk> handoff_;  // set aside by hand_over for the next map()
};

}  // namespace sublinear::allocator::detail
