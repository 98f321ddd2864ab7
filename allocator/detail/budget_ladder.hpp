// The budget ladder: every mapping goes through it, and it decides, cheapest first, what
// gives way when the mapping would pass the budget.
//
// Note [Strict budget]
// Rationale: the budget bounds mapped physical bytes strictly (the allocator never maps
//   past it), and the ways of making room differ in cost: a poll costs nothing, a
//   released cached segment a create later, a wait a drained stream, an eviction a
//   regeneration. So every path that maps pages (a new segment, a restore, a pack mapped
//   again) goes through one ladder, cheapest rung first, and fails only at the bottom.
// Approach: mapping `bytes` first checks mapped + bytes <= budget (a pooled or handed-off
//   chunk of that size needs no check: it is already counted). When it would not fit:
//   poll completed evictions and frees; hand off a chunk whose last use is queued on the
//   requesting stream (Note [Stream-ordered handoff]); trim the pool, release cached free
//   segments (Note [Idle first]), trim the pool again; wait for pending evictions, frees
//   and old mappings, and give back again; cut holes out of shared segments (Note
//   [Segment trim], when on). An allocation then borrows a free block of the stream's
//   other size class. Outside the lock, a pressure handler (the replay engine's, Note
//   [Pressure valve] in runtime/engine_pressure.cpp) is asked to evict more, and the request is
//   retried while it frees something. A request the observer chose to place evictable
//   that still finds no room for its own pages is served from a free block of a shared
//   segment: not evictable (on_allocate says so, and evict() refuses it). Otherwise
//   out_of_memory names requested, mapped, reserved, budget, the largest free block and
//   what the handler could not do, unless an overrun handler lifts the budget and the
//   request is tried once more (set_overrun_handler).
// Limitations: the waits stall the host thread; a handler that keeps freeing without
//   effect is asked at most 64 times per request.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "allocator/caching_allocator.hpp"
#include "allocator/detail/address_space.hpp"
#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/blocks.hpp"
#include "allocator/detail/chunk_source.hpp"
#include "allocator/detail/context.hpp"
#include "allocator/detail/segment_table.hpp"
#include "allocator/detail/segment_trim.hpp"

namespace sublinear::allocator::detail {

class budget_ladder {
 public:
  // The rungs held by work the allocator has queued (eviction_queue, which sits above the
  // ladder): memory that comes back once events complete (Note [Deferred unmap]).
  class deferred_work {
   public:
    // Completes what has completed: frees, evictions, a batch of old mappings. No wait.
    virtual void poll() = 0;
    [[nodiscard]] virtual bool pending() const = 0;
    // Waits for every pending eviction, then every pending free.
    virtual void wait() = 0;
    // Waits for every pending eviction.
    virtual void wait_evictions() = 0;

   protected:
    ~deferred_work() = default;
  };

  budget_ladder(context& ctx, address_space& space, chunk_source& chunks, block_pool& pool, segment_table& segments,
                segment_trim& trim);
  budget_ladder(const budget_ladder&) = delete;
  budget_ladder& operator=(const budget_ladder&) = delete;
  // Before the first mapping.
  void attach(deferred_work& work) noexcept { work_ = &work; }

  // ---- under the allocator's lock -----------------------------------------------------
  // The rungs of Note [Strict budget] up to segment trim. False if `bytes` cannot be made
  // to fit. `stream`: the mapping's pages are used on it (none: unknown), which allows a
  // handoff.
  bool make_room(std::size_t bytes, std::optional<stream_handle> stream = std::nullopt);
  // Maps `seg` under the budget, retrying after giving back everything it can when the
  // device itself is out of physical memory. Throws out_of_memory (`requested`: what the
  // caller asked for, for the message).
  void map(segment& seg, std::size_t requested, std::optional<stream_handle> stream = std::nullopt);
  // A new segment of `size` bytes mapped under the budget, one block spanning it.
  block* new_segment(std::size_t size, pool_kind kind, stream_handle stream, std::size_t requested);
  // A whole dedicated segment of exactly `bytes` for `stream`: a free one of that size,
  // else a new one.
  block* dedicated_segment(std::size_t bytes, stream_handle stream, std::size_t requested);
  // Changes the budget (0: physical capacity) and empties the pool; throws out_of_memory,
  // leaving the budget unchanged, if what is mapped cannot be brought under it.
  void set_budget(std::size_t bytes);
  [[noreturn]] void throw_oom(std::size_t requested, out_of_memory::cause ran_out, const std::string& why);

  void set_pressure_handler(caching_allocator::pressure_handler handler) { pressure_ = std::move(handler); }
  void set_overrun_handler(caching_allocator::overrun_handler handler) { overrun_ = std::move(handler); }

  // ---- outside the lock (each takes `mutex` itself, and so does `attempt`) ------------
  // Runs `attempt`; when it fails for want of room under the budget, asks the pressure
  // handler to evict more and tries again while the handler frees something.
  void with_pressure_valve(std::mutex& mutex, const std::function<void()>& attempt);
  // Runs `attempt`; when it fails for want of room and the overrun handler lifts the
  // budget, runs it once more.
  void with_overrun(std::mutex& mutex, const std::function<void()>& attempt);

 private:
  bool hand_off(std::size_t bytes, std::optional<stream_handle> stream);
  vmm_status map_segment(segment& seg);

  context& ctx_;
  address_space& space_;
  chunk_source& chunks_;
  block_pool& pool_;
  segment_table& segments_;
  segment_trim& trim_;
  deferred_work* work_ = nullptr;
  caching_allocator::pressure_handler pressure_;
  caching_allocator::overrun_handler overrun_;
  std::size_t last_shortfall_ = 0;  // bytes missing at the last budget failure
};

}  // namespace sublinear::allocator::detail
