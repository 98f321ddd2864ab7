// The blocks: PyTorch's size classes, the free sets per stream and size class with best
// fit, split and merge, and the live set that answers find() and deallocate().
//
// Note [Segments and blocks]
// Rationale: a cudaMalloc per tensor costs tens of microseconds; a caching allocator
//   reuses freed blocks in ~100 ns. We keep PyTorch's size classes (allocator_anchors.md
//   §1) so behaviour is comparable to what users run today.
// Approach: one virtual range is reserved up front and never moves. A *segment* is a
//   piece of it backed by one physical chunk (one create + one map + one set_access).
//   Segments hold *blocks* in an address-ordered prev/next list; free blocks live in
//   Boost.Intrusive sets ordered by (size, address) per stream and size class, so reuse
//   is best fit on the same stream. A free block is split when the remainder is worth
//   keeping and merged with free neighbours on free. A fully free segment stays mapped
//   (cached) until budget pressure or empty_cache() gives its pages back; before that,
//   the allocator waits for the segment's stream, because work queued before the free may
//   still read the block (reuse in stream order is safe; unmapping is not).
//
// Note [Exact small segments]
// Rationale: under a budget, a small-pool segment that holds one live block cannot give
//   any of its pages back (a mapping is unmapped whole). With PyTorch's 2 MiB small
//   segments on the host device's 64 KiB pages, `sublinear demo` ran out of memory at a
//   regeneration in 6 of 24 stress runs, one page short, with 1.5-1.9 MiB free inside
//   small segments (docs/allocator.md).
// Approach: with exact_small_segments (on while the replay engine runs) a new small
//   segment is the request rounded up to the granularity; later small requests still
//   split it (best fit), and a wholly free one is released like any cached segment. On
//   CUDA the granularity is the small segment size, so nothing changes there. Best fit
//   alone still lets one tiny block pin a large segment (a 512-byte request splitting a
//   wholly free 576 KiB one), so in this mode a small request prefers a free block in a
//   segment already partly used (take_fit: among the next 32 candidates in size order).
// Limitations: more, smaller segments: a map call per page of small requests the first
//   time they are needed (the chunk pool serves later ones). A new exact segment is not
//   preferred to splitting a wholly free larger one: that grows the cache of the
//   unbudgeted traced iteration, which every plan pays for.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "allocator/detail/blocks.hpp"
#include "allocator/detail/context.hpp"

namespace sublinear::allocator::detail {

class block_pool {
 public:
  explicit block_pool(context& ctx);
  ~block_pool();  // deletes the spare blocks; the segments' blocks are segment_table's
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;

  // ---- size classes (PyTorch's rules) -----------------------------------------------
  [[nodiscard]] std::size_t round_size(std::size_t size) const;
  // The size of a new segment for a block of `rounded` bytes (Note [Exact small segments]).
  [[nodiscard]] std::size_t segment_size(std::size_t rounded) const;
  // Splitting `b` to `size` bytes leaves a remainder worth keeping.
  [[nodiscard]] bool should_split(const block& b, std::size_t size) const;

  // ---- block objects ----------------------------------------------------------------
  [[nodiscard]] block* make();
  void recycle(block* b);

  // ---- free sets ----------------------------------------------------------------------
  [[nodiscard]] free_set& free_blocks(stream_handle stream, pool_kind kind);
  void insert_free(block* b);  // marks it free and puts it in its segment's set
  void erase_free(block* b);
  // Takes the free block an allocation of `rounded` bytes uses: best fit, for small
  // blocks with Note [Exact small segments]'s preference. nullptr if none is large enough.
  [[nodiscard]] block* take_fit(stream_handle stream, pool_kind kind, std::size_t rounded);
  // Takes the smallest free block of at least `rounded` bytes, nullptr if none.
  [[nodiscard]] block* take_at_least(stream_handle stream, pool_kind kind, std::size_t rounded);
  // Takes a free block of exactly `bytes`, nullptr if none.
  [[nodiscard]] block* take_exact(stream_handle stream, pool_kind kind, std::size_t bytes);
  // Cuts `b` to `size` bytes; the rest becomes a free block after it.
  void split(block* b, std::size_t size);
  // Merges `b` (not in a free set) with its free neighbours; returns the merged block.
  [[nodiscard]] block* merge(block* b);
  [[nodiscard]] std::size_t largest_free() const;
  // Every free set: streams in the order they were first seen; small, large, dedicated.
  template <class F>
  void for_each_free_set(F&& f) const {
    for (const auto& p : pools_) {
      for (free_set* s : {&p->small, &p->large, &p->dedicated}) f(*s);
    }
  }

  // ---- live blocks --------------------------------------------------------------------
  void add_live(block* b) { live_.insert(*b); }
  void remove_live(block* b) { live_.erase(live_set::s_iterator_to(*b)); }
  // The live block starting at `ptr`, or nullptr.
  [[nodiscard]] block* live_at(const void* ptr);
  // The live block containing `address` (interior pointers count), or nullptr.
  [[nodiscard]] block* live_containing(const void* address);
  [[nodiscard]] const block* live_containing(const void* address) const;
  [[nodiscard]] const live_set& live() const noexcept { return live_; }

  // Unlinks every block from the sets (shutdown, before the blocks are deleted).
  void clear() noexcept;

 private:
  struct stream_pool {
    stream_handle stream = nullptr;
    free_set small;
    free_set large;
    free_set dedicated;  // whole free segments of evictable blocks, reused by exact size

    free_set& of(pool_kind k) { return k == pool_kind::small ? small : k == pool_kind::large ? large : dedicated; }
  };
  stream_pool& pool_for(stream_handle stream);
  free_set::iterator small_fit(free_set& set, std::size_t rounded);

  context& ctx_;
  std::vector<std::unique_ptr<stream_pool>> pools_;
  stream_pool* last_pool_ = nullptr;
  live_set live_;
  std::vector<block*> spare_;
};

}  // namespace sublinear::allocator::detail
