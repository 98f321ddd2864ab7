#include "allocator/detail/segment_table.hpp"

#include <algorithm>
#include <utility>

#include "common/text.hpp"

namespace sublinear::allocator::detail {
namespace {

// Appends the free blocks of `set` that span their whole, mapped segment.
void collect_whole(free_set& set, std::vector<block*>& out) {
  for (block& b : set) {
    if (b.size == b.seg->size && b.seg->mapped) out.push_back(&b);
  }
}

}  // namespace

segment_table::segment_table(context& ctx, address_space& space, chunk_source& chunks, block_pool& pool)
    : ctx_(ctx), space_(space), chunks_(chunks), pool_(pool) {}

block* segment_table::add(std::unique_ptr<segment> seg) {
  block* b = pool_.make();
  b->ptr = seg->base;
  b->size = seg->size;
  b->seg = seg.get();
  b->stream = seg->stream;
  seg->first = b;
  stats& st = ctx_.st;
  st.reserved += seg->size;
  st.reserved_peak = std::max(st.reserved_peak, st.reserved);
  ++st.segments_created;
  insert(std::move(seg));
  return b;
}

void segment_table::insert(std::unique_ptr<segment> seg) {
  char* base = seg->base;
  segments_.emplace(base, std::move(seg));
}

void segment_table::erase(segment* seg) { segments_.erase(seg->base); }

void segment_table::release(block* b, bool keep_chunk, bool give_range) {
  segment* seg = b->seg;
  if (seg->has_free_event) {
    ctx_.events.release(seg->free_event);
    seg->has_free_event = false;
  }
  if (b->in_free_set) pool_.erase_free(b);
  if (seg->mapped) {
    segment* one[] = {seg};
    unmap(one, keep_chunk);
  }
  ctx_.st.reserved -= seg->size;
  ++ctx_.st.segments_released;
  if (give_range) space_.give(seg->base, seg->size);
  pool_.recycle(b);
  segments_.erase(seg->base);
}

// Adjacent segments merge into one range on the host (Note [Batched unmap] in host_vmm.cpp).
void segment_table::unmap(std::span<segment* const> segs, bool keep) {
  std::vector<vmm_range> ranges;
  ranges.reserve(segs.size());
  for (const segment* seg : segs) ranges.push_back({seg->base, seg->size});
  chunks_.unmap(ranges);
  for (segment* seg : segs) {
    const vmm_status r = chunks_.retire(seg->handle, seg->size, keep);
    seg->mapped = false;
    if (r != vmm_status::ok) throw ctx_.device_failure("releasing a chunk of " + format_bytes(seg->size), r);
  }
}

void segment_table::note_whole_free(block* b) {
  segment* seg = b->seg;
  if (b->size != seg->size) return;
  if (seg->has_free_event) {
    // An older event says nothing about this free: never leave a stale one behind.
    ctx_.events.release(seg->free_event);
    seg->has_free_event = false;
  }
  // Without a budget only exact large segments need it (Note [Exact large segments]).
  const bool exact_large = ctx_.opts.exact_large_segments && seg->kind == pool_kind::large;
  if (ctx_.st.budget >= ctx_.physical_capacity && !exact_large) return;  // releasing waits for the stream
  seg->free_event = ctx_.events.record(seg->stream);
  seg->has_free_event = true;
}

// Releases the wholly free segments `whole` (blocks spanning their segment) until
// `done(released bytes)` says so, in Note [Idle first]'s order; a segment of exactly
// `keep_size` bytes (0: none) has its chunk pooled (Note [Chunk pool]).
template <class Done>
std::size_t segment_table::release_whole(const std::vector<block*>& whole, std::size_t keep_size, Done done) {
  stream_events& events = ctx_.events;
  std::vector<std::pair<block*, bool>> order;
  order.reserve(whole.size());
  for (block* b : whole) order.emplace_back(b, b->seg->has_free_event && events.query(b->seg->free_event));
  std::sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
    if (x.second != y.second) return x.second;
    const bool kx = keep_size != 0 && x.first->size == keep_size;
    const bool ky = keep_size != 0 && y.first->size == keep_size;
    if (kx != ky) return kx;
    return x.first->size > y.first->size;
  });
  std::size_t released = 0;
  std::vector<stream_handle> drained;
  for (auto [b, idle] : order) {
    if (done(released)) break;
    // A free block may still be read by work queued on its stream before the free
    // (stream-ordered reuse is safe, unmapping is not): wait for the event recorded when
    // the segment became free, or else for that stream once.
    if (idle || std::find(drained.begin(), drained.end(), b->seg->stream) != drained.end()) {
      // nothing to wait for
    } else if (b->seg->has_free_event) {
      events.synchronize(b->seg->free_event);
      ++ctx_.st.release_waits;
    } else {
      ctx_.wait_for_stream(b->seg->stream);
      drained.push_back(b->seg->stream);
      ++ctx_.st.release_waits;
    }
    released += b->size;
    release(b, keep_size != 0 && b->size == keep_size);
  }
  return released;
}

std::size_t segment_table::release_cached(std::size_t bytes, bool all, std::size_t keep_size) {
  std::vector<block*> whole;
  pool_.for_each_free_set([&](free_set& s) { collect_whole(s, whole); });
  const std::size_t keep = ctx_.opts.pool_chunks && !all && keep_size != 0 ? keep_size : 0;
  return release_whole(whole, keep, [&](std::size_t) {
    return !all && (ctx_.fits(bytes) || (keep != 0 && chunks_.pooled(keep)));
  });
}

void segment_table::release_idle_smaller(stream_handle stream, std::size_t bytes) {
  std::vector<block*> whole;
  collect_whole(pool_.free_blocks(stream, pool_kind::large), whole);
  const std::uint64_t before = ctx_.st.segments_released;
  release_whole(whole, 0, [&](std::size_t released) { return released >= bytes; });
  ctx_.st.idle_releases += ctx_.st.segments_released - before;
}

bool segment_table::hand_off(std::size_t bytes, stream_handle stream) {
  for (pool_kind kind : {pool_kind::dedicated, pool_kind::large, pool_kind::small}) {
    free_set& set = pool_.free_blocks(stream, kind);
    for (auto it = set.lower_bound(by_size_key::type{bytes, nullptr}); it != set.end() && it->size == bytes; ++it) {
      block* b = &*it;
      segment* seg = b->seg;
      if (seg->size != bytes || !seg->mapped) continue;
      // Frees used on other streams reach the free sets only once that work is done
      // (eviction_queue), so what may still touch the segment is queued on `stream`.
      std::vector<event_handle> evs;
      if (seg->has_free_event) {
        evs.push_back(seg->free_event);
        seg->has_free_event = false;
      } else {
        evs.push_back(ctx_.events.record(seg->stream));
      }
      chunks_.hand_over(seg->base, seg->size, seg->handle, std::move(evs), true, stream);
      seg->mapped = false;  // the old mapping is unmapped when settled, not here
      release(b, false, false);
      return true;
    }
  }
  return false;
}

void segment_table::shutdown() noexcept {
  stream_events& events = ctx_.events;
  for (auto& [base, seg] : segments_) {
    if (seg->has_free_event) events.release(seg->free_event);
    if (seg->pack) {
      for (auto [s, e] : seg->pack->events) {
        events.synchronize(e);
        events.release(e);
      }
      seg->pack->events.clear();
    }
    if (seg->mapped) {
      ctx_.device.unmap(seg->base, seg->size);
      ctx_.device.release_chunk(seg->handle);
    }
    for (block* b = seg->first; b != nullptr;) {
      block* next = b->next;
      delete b;
      b = next;
    }
  }
  segments_.clear();
}

}  // namespace sublinear::allocator::detail
