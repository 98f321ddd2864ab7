// What happens to a block after it is handed out: eviction and restore of its pages, and
// its free; each waits, where it must, for events recorded on the streams that used it.
//
// Note [Evictable blocks]
// Rationale: a page can be unmapped only if nothing else lives on it, and CUDA cannot
//   unmap part of a mapping.
// Approach: a block allocated with `evictable` gets a dedicated segment of its size
//   rounded up to the granularity; it is never split or merged. evict() gives that
//   segment's chunk back and restore() maps a fresh chunk at the same address.
//
// Note [Deferred unmap]
// Rationale: cuMemUnmap does not wait for queued kernels, and a kernel touching an
//   unmapped page is a sticky fault that kills the process (allocator_anchors.md §6).
// Approach: evict() records an event on the block's stream and on every stream passed
//   to record_stream(), and queues the block. Its pages are unmapped only once every
//   event has completed: polled on each allocate() and reclaim(), waited for only when
//   the budget cannot be met otherwise. Until then the pages count as mapped. restore()
//   of a block whose eviction is still pending simply cancels it. A free of a block used
//   on other streams waits the same way, in its own queue, before the block is reused.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/blocks.hpp"
#include "allocator/detail/budget_ladder.hpp"
#include "allocator/detail/chunk_source.hpp"
#include "allocator/detail/context.hpp"
#include "allocator/detail/pack_table.hpp"
#include "allocator/detail/segment_table.hpp"

namespace sublinear::allocator::detail {

class eviction_queue final : public budget_ladder::deferred_work {
 public:
  eviction_queue(context& ctx, chunk_source& chunks, block_pool& pool, segment_table& segments, budget_ladder& ladder,
                 pack_table& packs);
  eviction_queue(const eviction_queue&) = delete;
  eviction_queue& operator=(const eviction_queue&) = delete;

  // An evictable block's pages go once its last uses complete. No-op unless resident.
  void evict(block* b);
  // Ensures an evictable block's pages are mapped (a pending eviction cancelled, or a
  // chunk mapped under the budget). Throws out_of_memory.
  void restore(block* b, std::optional<stream_handle> stream);
  // A block just taken out of the live set: reused once the work of the other streams it
  // was used on has completed (PyTorch's insert_events), at once if there is none.
  void free_block(block* b);

  // Completes the frees whose events are done (all of them, waiting, with `wait`).
  void process_frees(bool wait);
  // Unmaps, in one device call, every block and pack whose eviction events are done
  // (all of them, waiting, with `wait`).
  void process_evictions(bool wait);

  // budget_ladder::deferred_work
  void poll() override;
  [[nodiscard]] bool pending() const override;
  void wait() override;
  void wait_evictions() override;

  // Shutdown: waits for every pending event and forgets the queues.
  void shutdown() noexcept;

 private:
  // Events a block waits on before it can be reused (frees) or unmapped (evictions).
  struct pending_block {
    block* b = nullptr;
    std::uint64_t generation = 0;  // an eviction's: cancelled when the block's moves on
    std::vector<event_handle> events;
  };
  static void drain(stream_events& events, pending_block& p, bool wait);
  void return_to_pool(block* b);
  void cancel(block* b);

  context& ctx_;
  chunk_source& chunks_;
  block_pool& pool_;
  segment_table& segments_;
  budget_ladder& ladder_;
  pack_table& packs_;
  std::deque<pending_block> frees_;
  std::deque<pending_block> evictions_;
};

}  // namespace sublinear::allocator::detail
