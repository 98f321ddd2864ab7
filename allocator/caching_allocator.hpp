// The caching allocator: PyTorch-style size classes, per-stream reuse, split and merge,
// over the VMM interface, with page-level eviction and a strict budget on mapped bytes.
//
// Its parts are components in allocator/detail/, each a header (its interface and Notes)
// and a .cpp:
//   address_space   the reserved range, handed out in pieces   Note [Address space]
//   chunk_source    chunks: fresh, pooled, handed off          Notes [Chunk pool], [Stream-ordered handoff]
//   block_pool      size classes, free sets, split and merge   Notes [Segments and blocks], [Exact small segments]
//   segment_table   segments, released under pressure          Notes [Idle first], [Exact large segments]
//   segment_trim    free pages cut out of shared segments      Note [Segment trim]
//   budget_ladder   every mapping, under the budget            Note [Strict budget]
//   pack_table      evictable blocks sharing pages             Note [Pack segments]
//   eviction_queue  evict, restore and free, after events      Notes [Evictable blocks], [Deferred unmap]
//   validator       the whole-structure walk of validate()     Note [Allocator invariants]
// caching_allocator.cpp composes them, takes the one lock, and calls the observer and the
// handlers outside it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "allocator/allocation_observer.hpp"
#include "allocator/device_types.hpp"
#include "sublinear/error.hpp"

namespace sublinear::allocator {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

struct options {
  // Strict limit on mapped physical bytes; 0 means the device's physical capacity.
  std::size_t budget = 0;
  // Virtual address space reserved up front; 0 means 2x the physical capacity.
  std::size_t reserve = 0;
  // PyTorch's size classes (CUDACachingAllocator.cpp constants).
  std::size_t min_block = 512;               // kMinBlockSize
  std::size_t small_size = 1 * MiB;          // kSmallSize
  std::size_t small_segment = 2 * MiB;       // kSmallBuffer
  std::size_t min_large_alloc = 10 * MiB;    // kMinLargeAlloc
  std::size_t large_segment = 20 * MiB;      // kLargeBuffer
  std::size_t round_large = 2 * MiB;         // kRoundLarge
  // Give every large allocation a segment of exactly its size (rounded to the
  // granularity) instead of packing it into a 20 MiB one: the replay engine turns this on,
  // so that mapped bytes follow live bytes closely and plans made from live bytes hold.
  bool exact_large_segments = false;
  // Give a small request that finds no free block a segment of its size rounded up to the
  // granularity (one page for most) instead of small_segment (Note [Exact small
  // segments]). The same on CUDA, whose 2 MiB page is PyTorch's small segment; on the host
  // device's 64 KiB pages it keeps a few live small blocks from holding 2 MiB each.
  bool exact_small_segments = false;
  // Under pressure, give back the pages of a free block inside a shared segment (a hole,
  // or a free head or tail) by moving the live parts around it into chunks of their own
  // at the same addresses (Note [Segment trim]). The replay engine turns it on; off by
  // default because the live parts are copied while no other thread may touch them (a
  // host write or launch from another thread during the move is lost).
  bool trim_segments = false;
  // Keep the chunks of evicted blocks for the next mapping of the same size instead of
  // releasing them (Note [Chunk pool]); pooled bytes count against the budget.
  bool pool_chunks = true;
  // Map a chunk still in use by queued work of the same stream at its new address instead
  // of waiting for that work (Note [Stream-ordered handoff]).
  bool stream_ordered_handoff = true;
};

struct stats {
  std::size_t allocated = 0;       // bytes in live blocks (rounded sizes)
  std::size_t allocated_peak = 0;
  std::size_t resident_peak = 0;   // peak of allocated minus evicted: live bytes with pages
  std::size_t requested = 0;       // bytes callers asked for in live blocks
  std::size_t mapped = 0;          // physical bytes held: mapped, or pooled for reuse (the budgeted
                                   // quantity, Note [Chunk pool])
  std::size_t mapped_peak = 0;
  std::size_t reserved = 0;        // virtual bytes handed to segments (mapped or evicted)
  std::size_t reserved_peak = 0;
  std::size_t evicted = 0;         // bytes of live blocks whose pages are given back now
  std::size_t evicted_total = 0;   // bytes ever unmapped by eviction
  std::size_t budget = 0;
  std::size_t pooled = 0;          // of `mapped`: bytes in unmapped chunks kept for reuse
  std::size_t pooled_peak = 0;
  std::uint64_t pool_reuses = 0;   // mappings served by a pooled chunk (no create)
  std::uint64_t pool_trims = 0;    // pooled chunks released to make room
  std::uint64_t handoffs = 0;      // mappings given a chunk whose old use was still queued on the
                                   // same stream, without a wait (Note [Stream-ordered handoff])
  std::uint64_t restore_handoffs = 0;  // of those, mappings for restore(ptr, stream)
  std::uint64_t pressure_calls = 0;  // times the pressure handler was asked to evict more
  std::uint64_t allocs = 0, frees = 0;
  std::uint64_t evictions = 0, restores = 0, cancelled_evictions = 0;
  std::uint64_t segments_created = 0, segments_released = 0;
  std::uint64_t create_calls = 0, map_calls = 0, set_access_calls = 0, unmap_calls = 0,
                release_calls = 0;
  std::uint64_t budget_waits = 0;  // times the budget forced a wait on a pending event
  std::uint64_t release_waits = 0; // times releasing cached segments waited for their stream
  std::uint64_t borrowed_blocks = 0; // requests served from the other size class under pressure
  std::uint64_t shared_placements = 0; // observer-evictable requests placed in a shared segment (Note [Strict budget])
  std::uint64_t packs_created = 0;   // pack segments opened (Note [Pack segments])
  std::uint64_t pack_members = 0;    // blocks placed in packs
  std::uint64_t pack_refusals = 0;   // observer pack slots refused as inconsistent: given pages of their own
  std::uint64_t segment_trims = 0;   // free pages cut out of segments by remapping their live parts (Note [Segment trim])
  std::size_t trimmed_bytes = 0;
  std::uint64_t idle_releases = 0;   // free exact large segments given back before a new one (Note [Exact large segments])
  std::uint64_t oom_errors = 0;
  std::uint64_t budget_overruns = 0; // requests the overrun handler let past a lifted budget
  // mapped / allocated at their peaks: 1.0 means no page is wasted.
  [[nodiscard]] double fragmentation() const {
    return allocated_peak == 0 ? 1.0 : static_cast<double>(mapped_peak) / static_cast<double>(allocated_peak);
  }
};

struct block_info {
  void* base = nullptr;
  std::size_t size = 0;       // rounded size
  std::size_t requested = 0;  // size the caller asked for
  stream_handle stream = nullptr;
  bool evictable = false;
  residency state = residency::resident;
};

class caching_allocator {
 public:
  // `vmm` and `events` must outlive the allocator. Throws out_of_memory if the
  // address space cannot be reserved, config_error for inconsistent options.
  caching_allocator(vmm& device, stream_events& events, options opts = {});
  ~caching_allocator();
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  // Returns a block of at least `size` bytes, 512-byte aligned (granularity-aligned when
  // evictable), usable on `stream`. Throws out_of_memory. size 0 returns nullptr.
  void* allocate(std::size_t size, stream_handle stream, bool evictable = false);
  // Places a block of `size` bytes at slot.offset of pack slot.key (creating the pack's
  // segment of round_up(slot.bytes, granularity) on first use, mapping it again if its
  // pages were given back). Throws config_error if the slot is inconsistent (offset not a
  // multiple of 512, offset+size beyond the pack, overlapping a live or previously used member
  // range of this pack, a different `bytes` than the pack was made with, a different stream than
  // the pack's), out_of_memory if the budget cannot be met (same strict-budget path as a normal
  // evictable allocation, pressure handler included). Note [Pack segments]. size 0 returns nullptr.
  void* allocate_in_pack(std::size_t size, stream_handle stream, const pack_slot& slot);
  // Returns a block for reuse on its stream. nullptr is ignored; an unknown pointer is a
  // programming error reported on stderr (never throws: frees run at shutdown).
  void deallocate(void* ptr) noexcept;
  // Marks the block as used on `stream`: its reuse and unmap wait for that stream.
  void record_stream(void* ptr, stream_handle stream);

  // Gives the pages of an evictable block back once its last use has completed.
  // Throws config_error if the block is unknown or not evictable. Idempotent.
  void evict(void* ptr);
  // Ensures the block's pages are mapped at its address (contents undefined if they had
  // been given back). Throws out_of_memory if the budget cannot be met. With `stream`,
  // every use of the pages until the block's next eviction or free is queued on it (or
  // ordered after it), which lets the mapping take a chunk whose last use is still queued
  // there (Note [Stream-ordered handoff]).
  void restore(void* ptr);
  void restore(void* ptr, stream_handle stream);

  // The live block containing `address` (interior pointers count).
  [[nodiscard]] std::optional<block_info> find(const void* address) const;

  // Every live block, in address order (an observer installed late learns what exists).
  [[nodiscard]] std::vector<block_info> live_blocks() const;

  // Unmaps what has become free to unmap (completed evictions, frees awaiting events).
  // Never blocks. Returns the bytes unmapped.
  std::size_t reclaim();
  // Waits for pending work, then releases every cached free segment. Returns bytes unmapped.
  std::size_t empty_cache();

  // Switches Note [Segments and blocks]'s packing of large blocks off (see options).
  void set_exact_large_segments(bool exact);
  // Switches Note [Exact small segments] on or off (see options).
  void set_exact_small_segments(bool exact);
  // Switches Note [Segment trim] on or off (see options).
  void set_segment_trim(bool trim);
  // Switches Note [Stream-ordered handoff] on or off (see options).
  void set_stream_ordered_handoff(bool handoff);

  // Changes the budget (0: physical capacity). Throws out_of_memory, leaving the budget
  // unchanged, if the mapped bytes cannot be brought under it.
  void set_budget(std::size_t bytes);
  [[nodiscard]] std::size_t budget() const;

  [[nodiscard]] stats get_stats() const;
  void reset_peaks();
  [[nodiscard]] std::size_t granularity() const noexcept;
  // The device it maps through (the replay engine probes its costs: Note [VMM cost probe]).
  [[nodiscard]] vmm& device_vmm() const noexcept;

  // Installs an observer (nullptr removes it); returns the previous one. Not owned.
  allocation_observer* set_observer(allocation_observer* observer) noexcept;

  // Called, outside the allocator's lock and on the allocating thread, when a mapping
  // cannot be made to fit under the budget by the allocator alone (Note [Strict
  // budget]): `shortfall` is how many bytes are missing. The handler may call evict() on
  // blocks it can regenerate and returns the bytes it asked to evict (0: nothing more can
  // go); the allocator then retries. An empty function removes the handler.
  using pressure_handler = std::function<std::size_t(std::size_t shortfall)>;
  void set_pressure_handler(pressure_handler handler);

  // Called, outside the lock, when an allocation or a restore still finds no room under
  // the budget after the pressure handler and every fallback (Note [Strict budget]), with
  // the error about to be thrown. A handler that lifts the budget (set_budget(0)) and
  // returns true has the request tried once more; false lets the error propagate. The
  // replay engine lifts it only for a plan made with the scaled cache allowance (Note
  // [Scaled cache allowance] in policy/planning_overhead.hpp). An empty function removes it.
  using overrun_handler = std::function<bool(const out_of_memory& error)>;
  void set_overrun_handler(overrun_handler handler);

  // Whole-structure validator (expensive): blocks tile their segments, free sets match
  // block states, statistics match a recount. Returns false and prints the first broken
  // invariant on stderr.
  [[nodiscard]] bool validate() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sublinear::allocator
