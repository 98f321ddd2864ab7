// The caching allocator's shell: the components of allocator/detail/ composed in one
// `impl`, the allocation paths that choose between them, and the public methods, which
// take the one lock and call the observer and the handlers outside it.
#include "allocator/caching_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "allocator/detail/address_space.hpp"
#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/blocks.hpp"
#include "allocator/detail/budget_ladder.hpp"
#include "allocator/detail/chunk_source.hpp"
#include "allocator/detail/context.hpp"
#include "allocator/detail/eviction_queue.hpp"
#include "allocator/detail/pack_table.hpp"
#include "allocator/detail/segment_table.hpp"
#include "allocator/detail/segment_trim.hpp"
#include "allocator/detail/validator.hpp"
#include "common/round_up.hpp"

namespace sublinear::allocator {

using detail::block;
using detail::pool_kind;

// Lowest first: each component refers only to those declared before it (the ladder
// reaches the eviction queue through budget_ladder::deferred_work).
struct caching_allocator::impl {
  detail::context ctx;
  detail::address_space space;  // released last, when the members are destroyed
  detail::chunk_source chunks{ctx, space};
  detail::block_pool pool{ctx};
  detail::segment_table segments{ctx, space, chunks, pool};
  detail::segment_trim trim{ctx, space, pool, segments};
  detail::budget_ladder ladder{ctx, space, chunks, pool, segments, trim};
  detail::pack_table packs{ctx, pool, segments, ladder};
  detail::eviction_queue evictions{ctx, chunks, pool, segments, ladder, packs};

  mutable std::mutex mutex;
  std::atomic<allocation_observer*> observer{nullptr};

  impl(vmm& device, stream_events& events, options opts) : ctx(device, events, opts), space(ctx) {
    ladder.attach(evictions);
  }

  ~impl() {
    // Wait for everything still pending, then give every page and the range back.
    evictions.shutdown();
    chunks.shutdown_old_mappings();
    pool.clear();
    segments.shutdown();
    chunks.shutdown_pool();
  }

  void* allocate(std::size_t size, stream_handle stream, bool evictable) {
    if (size == 0) return nullptr;
    evictions.poll();
    const options& opts = ctx.opts;
    block* b = nullptr;
    if (evictable) {
      b = ladder.dedicated_segment(round_up(size, ctx.granularity), stream, size);
    } else {
      std::size_t rounded = pool.round_size(size);
      pool_kind kind = rounded <= opts.small_size ? pool_kind::small : pool_kind::large;
      b = pool.take_fit(stream, kind, rounded);
      bool borrowed = false;
      if (b == nullptr) {
        std::size_t seg_size = pool.segment_size(rounded);
        std::size_t minimal = round_up(rounded, ctx.granularity);
        if (kind == pool_kind::large && opts.exact_large_segments) {
          seg_size = minimal;
          segments.release_idle_smaller(stream, minimal);
        }
        // Under pressure a smaller segment beats an out-of-memory error.
        if (!chunks.ready(seg_size) && minimal < seg_size) seg_size = minimal;
        if (!ladder.make_room(seg_size, stream)) {
          // Still no room: a free block of the stream's other size class will do, split
          // as finely as a small block (Note [Strict budget]).
          b = pool.take_at_least(stream, kind == pool_kind::small ? pool_kind::large : pool_kind::small, rounded);
          if (b != nullptr) {
            borrowed = true;
            ++ctx.st.borrowed_blocks;
          }
        }
        if (b == nullptr) b = ladder.new_segment(seg_size, kind, stream, size);
      }
      if (borrowed ? b->size - rounded >= opts.min_block : pool.should_split(*b, rounded)) pool.split(b, rounded);
    }
    return hand_out(b, size, stream);
  }

  void* allocate_in_pack(std::size_t size, stream_handle stream, const pack_slot& slot) {
    if (size == 0) return nullptr;
    evictions.poll();
    return hand_out(packs.place(size, stream, slot), size, stream);
  }

  // Marks `b` allocated for `size` bytes on `stream` and counts it: the last step of every
  // allocation, packed or not.
  void* hand_out(block* b, std::size_t size, stream_handle stream) {
    b->allocated = true;
    b->requested = size;
    b->stream = stream;
    pool.add_live(b);
    stats& st = ctx.st;
    st.allocated += b->size;
    st.allocated_peak = std::max(st.allocated_peak, st.allocated);
    st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
    st.requested += size;
    ++st.allocs;
    return b->ptr;
  }

  void deallocate(void* ptr) {
    block* b = pool.live_at(ptr);
    if (b == nullptr) {
      std::fprintf(stderr, "sublinear: free of %p, which is not a live allocation (double free or foreign pointer); ignored\n",
                   ptr);
      return;
    }
    pool.remove_live(b);
    b->allocated = false;
    stats& st = ctx.st;
    st.allocated -= b->size;
    st.requested -= b->requested;
    ++st.frees;
    // Evicted bytes stop counting here: a block waiting for its other streams is no longer
    // allocated, and its eviction (or its pack's unmap, Note [Pack segments]) may complete meanwhile.
    if (b->state == residency::evicted) st.evicted -= b->size;
    evictions.free_block(b);
  }

  block* evictable_block(void* ptr, const char* what) {
    block* b = pool.live_at(ptr);
    if (b == nullptr) {
      char text[160];
      std::snprintf(text, sizeof text, "sublinear: %s(%p): not the base address of a live allocation", what, ptr);
      throw config_error(text);
    }
    if (b->seg->kind != pool_kind::dedicated) {
      char text[200];
      std::snprintf(text, sizeof text,
                    "sublinear: %s(%p): the block was not allocated as evictable, so it shares pages with others",
                    what, ptr);
      throw config_error(text);
    }
    return b;
  }

  static block_info info(const block& b) {
    return block_info{b.ptr, b.size, b.requested, b.stream, b.seg->kind == pool_kind::dedicated, b.state};
  }
};

caching_allocator::caching_allocator(vmm& device, stream_events& events, options opts)
    : impl_(std::make_unique<impl>(device, events, opts)) {}

caching_allocator::~caching_allocator() = default;

void caching_allocator::set_overrun_handler(overrun_handler handler) {
  std::lock_guard lock(impl_->mutex);
  impl_->ladder.set_overrun_handler(std::move(handler));
}

void caching_allocator::set_pressure_handler(pressure_handler handler) {
  std::lock_guard lock(impl_->mutex);
  impl_->ladder.set_pressure_handler(std::move(handler));
}

void* caching_allocator::allocate(std::size_t size, stream_handle stream, bool evictable) {
  allocation_observer* obs = impl_->observer.load(std::memory_order_acquire);
  const bool asked_evictable = evictable;
  if (obs != nullptr && !evictable && size != 0) evictable = obs->place_evictable(size, stream);
  // Note [Pack segments]: the observer may give the block a place in a pack.
  std::optional<pack_slot> slot;
  if (obs != nullptr && evictable && !asked_evictable) slot = obs->pack_slot_for(size, stream);
  void* ptr = nullptr;
  detail::budget_ladder& ladder = impl_->ladder;
  ladder.with_overrun(impl_->mutex, [&] {
    try {
      ladder.with_pressure_valve(impl_->mutex, [&] {
        std::lock_guard lock(impl_->mutex);
        if (slot) {
          try {
            ptr = impl_->allocate_in_pack(size, stream, *slot);
            return;
          } catch (const config_error&) {
            // An inconsistent slot changed nothing: pages of its own instead.
            slot.reset();
            ++impl_->ctx.st.pack_refusals;
          }
        }
        ptr = impl_->allocate(size, stream, evictable);
      });
    } catch (const out_of_memory&) {
      if (!evictable || asked_evictable) throw;
      // The observer wanted pages of its own for a plain request and there is no room even
      // after the valve: a free block of a shared segment will do, resident for good (Note
      // [Strict budget]). Failing that, the first error (with what the valve could not do)
      // is the one to report.
      const std::exception_ptr first = std::current_exception();
      std::lock_guard lock(impl_->mutex);
      try {
        ptr = impl_->allocate(size, stream, false);
      } catch (const out_of_memory&) {
        std::rethrow_exception(first);
      }
      evictable = false;
      ++impl_->ctx.st.shared_placements;
    }
  });
  if (obs != nullptr && ptr != nullptr) obs->on_allocate(ptr, size, stream, evictable);
  return ptr;
}

void* caching_allocator::allocate_in_pack(std::size_t size, stream_handle stream, const pack_slot& slot) {
  allocation_observer* obs = impl_->observer.load(std::memory_order_acquire);
  void* ptr = nullptr;
  detail::budget_ladder& ladder = impl_->ladder;
  ladder.with_overrun(impl_->mutex, [&] {
    ladder.with_pressure_valve(impl_->mutex, [&] {
      std::lock_guard lock(impl_->mutex);
      ptr = impl_->allocate_in_pack(size, stream, slot);
    });
  });
  if (obs != nullptr && ptr != nullptr) obs->on_allocate(ptr, size, stream, true);
  return ptr;
}

void caching_allocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  allocation_observer* obs = impl_->observer.load(std::memory_order_acquire);
  // Only an observer needs the block's size and stream: it is asked before the free
  // (defer_free) and told after it (on_free), both outside the lock. A free racing
  // another free of the same pointer is the caller's double free either way.
  std::size_t size = 0;
  stream_handle stream = nullptr;
  bool live = false;
  if (obs != nullptr) {
    {
      std::lock_guard lock(impl_->mutex);
      if (block* b = impl_->pool.live_at(ptr); b != nullptr) {
        size = b->requested;
        stream = b->stream;
        live = true;
      }
    }
    try {
      if (live && obs->defer_free(ptr, size, stream)) return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sublinear: allocation observer failed before the free of %p: %s\n", ptr, e.what());
    }
  }
  {
    std::lock_guard lock(impl_->mutex);
    try {
      impl_->deallocate(ptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sublinear: error while freeing %p: %s\n", ptr, e.what());
    }
  }
  if (obs != nullptr && live) {
    try {
      obs->on_free(ptr, size, stream);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sublinear: allocation observer failed on free of %p: %s\n", ptr, e.what());
    }
  }
}

allocation_observer* caching_allocator::set_observer(allocation_observer* observer) noexcept {
  return impl_->observer.exchange(observer, std::memory_order_acq_rel);
}

void caching_allocator::record_stream(void* ptr, stream_handle stream) {
  std::lock_guard lock(impl_->mutex);
  block* b = impl_->pool.live_containing(ptr);
  if (b == nullptr || stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

void caching_allocator::evict(void* ptr) {
  std::lock_guard lock(impl_->mutex);
  impl_->evictions.evict(impl_->evictable_block(ptr, "evict"));
}

void caching_allocator::restore(void* ptr) {
  detail::budget_ladder& ladder = impl_->ladder;
  ladder.with_overrun(impl_->mutex, [&] {
    ladder.with_pressure_valve(impl_->mutex, [&] {
      std::lock_guard lock(impl_->mutex);
      impl_->evictions.restore(impl_->evictable_block(ptr, "restore"), std::nullopt);
    });
  });
}

void caching_allocator::restore(void* ptr, stream_handle stream) {
  detail::budget_ladder& ladder = impl_->ladder;
  ladder.with_overrun(impl_->mutex, [&] {
    ladder.with_pressure_valve(impl_->mutex, [&] {
      std::lock_guard lock(impl_->mutex);
      impl_->evictions.restore(impl_->evictable_block(ptr, "restore"), stream);
    });
  });
}

std::optional<block_info> caching_allocator::find(const void* address) const {
  std::lock_guard lock(impl_->mutex);
  const detail::block_pool& pool = impl_->pool;
  const block* b = pool.live_containing(address);
  if (b == nullptr) return std::nullopt;
  return impl::info(*b);
}

std::vector<block_info> caching_allocator::live_blocks() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<block_info> out;
  out.reserve(impl_->pool.live().size());
  for (const block& b : impl_->pool.live()) out.push_back(impl::info(b));
  return out;
}

std::size_t caching_allocator::reclaim() {
  std::lock_guard lock(impl_->mutex);
  const stats& st = impl_->ctx.st;
  // Bytes taken out of segments: a chunk that goes to the pool is unmapped too.
  std::size_t before = st.mapped - st.pooled;
  impl_->evictions.poll();
  impl_->chunks.settle_completed();  // every completed one, not only a batch
  return before - (st.mapped - st.pooled);
}

std::size_t caching_allocator::empty_cache() {
  std::lock_guard lock(impl_->mutex);
  std::size_t before = impl_->ctx.st.mapped;
  impl_->evictions.process_frees(true);
  impl_->evictions.process_evictions(true);
  impl_->chunks.settle_all();
  impl_->segments.release_cached(0, true);
  impl_->chunks.empty_pool();
  return before - impl_->ctx.st.mapped;
}

void caching_allocator::set_exact_large_segments(bool exact) {
  std::lock_guard lock(impl_->mutex);
  impl_->ctx.opts.exact_large_segments = exact;
}

void caching_allocator::set_exact_small_segments(bool exact) {
  std::lock_guard lock(impl_->mutex);
  impl_->ctx.opts.exact_small_segments = exact;
}

void caching_allocator::set_segment_trim(bool trim) {
  std::lock_guard lock(impl_->mutex);
  impl_->ctx.opts.trim_segments = trim;
}

void caching_allocator::set_stream_ordered_handoff(bool handoff) {
  std::lock_guard lock(impl_->mutex);
  impl_->ctx.opts.stream_ordered_handoff = handoff;
  if (!handoff) impl_->chunks.orphan_handoff();
}

void caching_allocator::set_budget(std::size_t bytes) {
  std::lock_guard lock(impl_->mutex);
  impl_->ladder.set_budget(bytes);
}

std::size_t caching_allocator::budget() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->ctx.st.budget;
}

stats caching_allocator::get_stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->ctx.st;
}

void caching_allocator::reset_peaks() {
  std::lock_guard lock(impl_->mutex);
  stats& st = impl_->ctx.st;
  st.allocated_peak = st.allocated;
  st.resident_peak = st.allocated - st.evicted;
  st.mapped_peak = st.mapped;
  st.reserved_peak = st.reserved;
}

std::size_t caching_allocator::granularity() const noexcept { return impl_->ctx.granularity; }

vmm& caching_allocator::device_vmm() const noexcept { return impl_->ctx.device; }

bool caching_allocator::validate() const {
  std::lock_guard lock(impl_->mutex);
  const impl& m = *impl_;
  return detail::validate(m.ctx, m.space, m.chunks, m.pool, m.segments, m.packs);
}

}  // namespace sublinear::allocator
