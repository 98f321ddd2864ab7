#include "allocator/detail/eviction_queue.hpp"

#include <algorithm>
#include <utility>

namespace sublinear::allocator::detail {
namespace {

bool all_complete(stream_events& events, const std::vector<event_handle>& pending, bool wait) {
  for (event_handle e : pending) {
    if (wait) {
      events.synchronize(e);
    } else if (!events.query(e)) {
      return false;
    }
  }
  return true;
}

}  // namespace

eviction_queue::eviction_queue(context& ctx, chunk_source& chunks, block_pool& pool, segment_table& segments,
                               budget_ladder& ladder, pack_table& packs)
    : ctx_(ctx), chunks_(chunks), pool_(pool), segments_(segments), ladder_(ladder), packs_(packs) {}

void eviction_queue::drain(stream_events& events, pending_block& p, bool wait) {
  for (event_handle e : p.events) {
    if (wait) events.synchronize(e);
    events.release(e);
  }
  p.events.clear();
}

void eviction_queue::cancel(block* b) {
  ++b->eviction_generation;  // the queued entry is dropped when next polled
  b->state = residency::resident;
  ++ctx_.st.cancelled_evictions;
}

void eviction_queue::evict(block* b) {
  if (b->state != residency::resident) return;
  if (b->seg->pack) {
    packs_.evict(b);
    process_evictions(false);
    return;
  }
  pending_block p{b, ++b->eviction_generation, {}};
  p.events.push_back(ctx_.events.record(b->stream));
  for (stream_handle s : b->stream_uses) p.events.push_back(ctx_.events.record(s));
  b->state = residency::evicting;
  evictions_.push_back(std::move(p));
  process_evictions(false);
}

void eviction_queue::restore(block* b, std::optional<stream_handle> stream) {
  if (b->state == residency::resident) return;
  if (b->seg->pack) {
    packs_.restore(b, stream);
    return;
  }
  if (b->state == residency::evicting) {
    cancel(b);
    return;
  }
  stats& st = ctx_.st;
  const std::uint64_t handoffs_before = st.handoffs;
  ladder_.map(*b->seg, b->requested, stream);
  if (st.handoffs != handoffs_before) ++st.restore_handoffs;
  b->state = residency::resident;
  st.evicted -= b->size;
  st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
  ++st.restores;
}

void eviction_queue::free_block(block* b) {
  if (!b->stream_uses.empty() && b->state != residency::evicted) {
    // Used on other streams: reuse must wait for their work (PyTorch's insert_events).
    pending_block p{b, 0, {}};
    for (stream_handle s : b->stream_uses) p.events.push_back(ctx_.events.record(s));
    frees_.push_back(std::move(p));
    return;
  }
  return_to_pool(b);
}

// Puts a block no longer in use back in its pool, merging free neighbours.
void eviction_queue::return_to_pool(block* b) {
  segment* seg = b->seg;
  if (seg->pack) {
    packs_.leave(b);
    return;
  }
  if (seg->kind == pool_kind::dedicated) {
    if (b->state == residency::evicting) cancel(b);
    if (b->state == residency::evicted) {
      // Its pages are already gone (its bytes stopped counting as evicted at the free):
      // give the address range back too.
      b->state = residency::resident;
      segments_.release(b);
      return;
    }
    pool_.insert_free(b);
    segments_.note_whole_free(b);
    return;
  }
  b = pool_.merge(b);
  pool_.insert_free(b);
  segments_.note_whole_free(b);
}

void eviction_queue::process_frees(bool wait) {
  while (!frees_.empty()) {
    pending_block& p = frees_.front();
    if (!all_complete(ctx_.events, p.events, wait)) break;  // FIFO: later ones were recorded later
    drain(ctx_.events, p, false);
    block* b = p.b;
    frees_.pop_front();
    b->stream_uses.clear();
    return_to_pool(b);
  }
}

void eviction_queue::process_evictions(bool wait) {
  std::vector<block*> done;
  for (auto it = evictions_.begin(); it != evictions_.end();) {
    block* b = it->b;
    bool cancelled = b->eviction_generation != it->generation || b->state != residency::evicting;
    if (!cancelled && !all_complete(ctx_.events, it->events, wait)) {
      ++it;
      continue;
    }
    drain(ctx_.events, *it, false);
    if (!cancelled) done.push_back(b);
    it = evictions_.erase(it);
  }
  std::vector<segment*> done_packs;
  packs_.take_due_unmaps(wait, done_packs);
  if (done.empty() && done_packs.empty()) return;
  // Every eviction completed now goes in one device call (Note [Batched unmap]).
  std::vector<segment*> segs;
  segs.reserve(done.size() + done_packs.size());
  for (block* b : done) segs.push_back(b->seg);
  segs.insert(segs.end(), done_packs.begin(), done_packs.end());
  segments_.unmap(segs, ctx_.opts.pool_chunks);
  for (block* b : done) note_evicted(*b, ctx_.st);
  for (segment* seg : done_packs) packs_.unmapped(seg);
}

void eviction_queue::poll() {
  if (!frees_.empty()) process_frees(false);
  if (!evictions_.empty() || packs_.unmaps_queued()) process_evictions(false);
  chunks_.poll();
}

bool eviction_queue::pending() const { return !evictions_.empty() || packs_.unmaps_queued() || !frees_.empty(); }

void eviction_queue::wait() {
  process_evictions(true);
  process_frees(true);
}

void eviction_queue::wait_evictions() { process_evictions(true); }

void eviction_queue::shutdown() noexcept {
  for (auto& p : frees_) drain(ctx_.events, p, true);
  for (auto& p : evictions_) drain(ctx_.events, p, true);
  frees_.clear();
  evictions_.clear();
}

}  // namespace sublinear::allocator::detail
