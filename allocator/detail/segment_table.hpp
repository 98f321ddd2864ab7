// The segments: every piece of the address space that has a chunk behind it (or had, for
// an evicted block), how they are given back, and which cached ones go first under
// pressure. Segments are made by budget_ladder::new_segment (mapped under the budget) and
// cut by segment_trim; blocks inside them are block_pool's (Note [Segments and blocks]).
//
// Note [Idle first]
// Rationale: a wait before releasing a cached segment is for the event recorded when it
//   became free, most often at a kernel the host has only just queued: the host waits
//   until the stream has drained that far, and then the stream idles while the host maps
//   the next pages. A pooled chunk of the wanted size saves a create and the first touch
//   of its pages, which costs less than a drained queue.
// Approach: release_cached gives back the wholly free segments whose free has completed
//   on their stream first, of any size, with no wait; then those the host must wait for.
//   In each group a segment of exactly the wanted size goes first, its chunk pooled
//   (Note [Chunk pool]), then the largest. `sublinear demo --depth 434 --batch 32` at
//   0.5x waits here about 8 times per planned iteration (docs/benchmarks.md, "Where the
//   time goes").
// Limitations: an idle segment of another size goes although one of the wanted size, had
//   the host waited for it, would have been mapped again with no create.
//
// Note [Exact large segments]
// Rationale: with exact_large_segments (on while the replay engine runs, so that mapped
//   bytes follow live bytes) a large request gets a segment of its own size, and a run of
//   growing sizes (DenseNet's concatenations) would leave a trail of cached segments too
//   small for anything that follows: DenseNet-121's traced iteration mapped 82.9 MiB for
//   30.3 MiB of live bytes that way (docs/allocator.md).
// Approach: when no free large block of the stream fits and a new exact segment is about
//   to be mapped, the stream's wholly free large segments are given back first
//   (release_idle_smaller), until as many bytes as the new segment's have been released.
//   Idle ones go first; for the others the host waits for the event recorded when the
//   segment became free (recorded for exact large segments even without a budget:
//   note_whole_free), never for the whole stream. `stats::idle_releases` counts them.
// Limitations: their chunks are released, not pooled; a later request that one of them
//   would have fitted maps a new segment.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "allocator/detail/address_space.hpp"
#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/blocks.hpp"
#include "allocator/detail/chunk_source.hpp"
#include "allocator/detail/context.hpp"

namespace sublinear::allocator::detail {

class segment_table {
 public:
  using map_type = std::map<char*, std::unique_ptr<segment>>;

  segment_table(context& ctx, address_space& space, chunk_source& chunks, block_pool& pool);
  segment_table(const segment_table&) = delete;
  segment_table& operator=(const segment_table&) = delete;

  // Registers a segment just mapped and counts it: one block spans it, neither free nor
  // allocated yet. Returns that block.
  block* add(std::unique_ptr<segment> seg);
  // Registers or forgets a segment as it is, uncounted (a trim's pieces, Note [Segment trim]).
  void insert(std::unique_ptr<segment> seg);
  void erase(segment* seg);
  // Every segment, by base address.
  [[nodiscard]] const map_type& all() const noexcept { return segments_; }

  // Releases a fully free segment whose single block `b` is in a free set (or, for an
  // evicted dedicated block, already unmapped): unmapped (its chunk pooled with
  // `keep_chunk`), its range back to the address space unless `give_range` is false (a
  // handed-off chunk's old mapping still covers it and gives it back once settled).
  void release(block* b, bool keep_chunk = false, bool give_range = true);
  // Unmaps the segments in one device call, then pools (`keep`) or releases each chunk.
  // Precondition: no pending work touches them (Note [Deferred unmap]).
  void unmap(std::span<segment* const> segs, bool keep = false);
  // `b`, just put in a free set, may span its segment: under a budget (or for an exact
  // large segment) record on its stream where that happened, so that releasing it later
  // waits for no more than that.
  void note_whole_free(block* b);

  // Releases cached fully free segments until `bytes` more fit under the budget (or
  // every one when `all`). One of exactly `keep_size` bytes goes first and its chunk is
  // pooled, so that the caller maps it again with no create (Note [Idle first]). Returns
  // the bytes released.
  std::size_t release_cached(std::size_t bytes, bool all, std::size_t keep_size = 0);
  // Note [Exact large segments]: before a new exact large segment of `bytes` for `stream`.
  void release_idle_smaller(stream_handle stream, std::size_t bytes);
  // Hands the chunk of a wholly free cached segment of exactly `bytes` on `stream` to the
  // next mapping (Note [Stream-ordered handoff]); the segment is released. False if none.
  bool hand_off(std::size_t bytes, stream_handle stream);

  // Shutdown: waits for the packs' events, unmaps and releases every chunk, deletes the
  // blocks. Statuses are ignored. Precondition: the block pool's sets are cleared.
  void shutdown() noexcept;

 private:
  template <class Done>
  std::size_t release_whole(const std::vector<block*>& whole, std::size_t keep_size, Done done);

  context& ctx_;
  address_space& space_;
  chunk_source& chunks_;
  block_pool& pool_;
  map_type segments_;
};

}  // namespace sublinear::allocator::detail
