#include "allocator/detail/pack_table.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "common/round_up.hpp"

namespace sublinear::allocator::detail {
namespace {

[[noreturn]] void refuse_slot(const pack_slot& slot, std::size_t size, const char* why) {
  char text[256];
  std::snprintf(text, sizeof text, "sublinear: allocate_in_pack(%zu bytes, pack %llu of %zu bytes at offset %zu): %s", size,
                static_cast<unsigned long long>(slot.key), slot.bytes, slot.offset, why);
  throw config_error(text);
}

}  // namespace

pack_table::pack_table(context& ctx, block_pool& pool, segment_table& segments, budget_ladder& ladder)
    : ctx_(ctx), pool_(pool), segments_(segments), ladder_(ladder) {}

// The pack a queued unmap belongs to, or nullptr if that unmap was cancelled (the pack
// ended, or a restore or a new member cancelled it).
segment* pack_table::queued(const queued_unmap& q) const {
  auto it = packs_.find(q.key);
  if (it == packs_.end() || it->second->pack->unmap_id != q.id) return nullptr;
  return it->second;
}

bool pack_table::events_complete(const pack_info& pk, bool wait) {
  for (auto [s, e] : pk.events) {
    if (wait) {
      ctx_.events.synchronize(e);
    } else if (!ctx_.events.query(e)) {
      return false;
    }
  }
  return true;
}

void pack_table::release_events(pack_info& pk) {
  for (auto [s, e] : pk.events) ctx_.events.release(e);
  pk.events.clear();
}

// Records the last use of a member on `stream`: the latest event per stream covers the rest.
void pack_table::add_event(pack_info& pk, stream_handle stream) {
  event_handle e = ctx_.events.record(stream);
  for (auto& [s, old] : pk.events) {
    if (s == stream) {
      ctx_.events.release(old);
      old = e;
      return;
    }
  }
  pk.events.emplace_back(stream, e);
}

// Cancels a queued unmap (the entry is dropped when next taken).
void pack_table::cancel_unmap(pack_info& pk) {
  if (pk.unmap_id == 0) return;
  pk.unmap_id = 0;
  ++ctx_.st.cancelled_evictions;
}

// After a member left or was evicted: ends the pack if no member is left, else queues
// its unmap if no member is resident and its pages are still mapped.
void pack_table::settle(segment* seg) {
  pack_info& pk = *seg->pack;
  if (pk.pinned) return;
  std::size_t members = 0, resident = 0;
  for (const block* b = seg->first; b != nullptr; b = b->next) {
    if (b->filler) continue;
    ++members;  // allocated, or freed and waiting for its other streams
    if (b->state == residency::resident) ++resident;
  }
  if (members == 0) {
    end(seg);
    return;
  }
  if (resident == 0 && seg->mapped && pk.unmap_id == 0) {
    pk.unmap_id = ++next_unmap_id_;
    unmaps_.push_back({pk.key, pk.unmap_id});
  }
}

// No member is left: the segment becomes one free dedicated block, or goes if its pages
// were given back; the key may name a new pack.
void pack_table::end(segment* seg) {
  pack_info& pk = *seg->pack;
  cancel_unmap(pk);
  // Work on other streams completed before the members left (pending frees), and reuse
  // on the segment's own stream is ordered after what is queued there.
  release_events(pk);
  packs_.erase(pk.key);
  seg->pack.reset();
  block* first = seg->first;
  for (block* b = first->next; b != nullptr;) {
    block* next = b->next;
    pool_.recycle(b);
    b = next;
  }
  first->next = nullptr;
  first->size = seg->size;
  first->filler = false;
  first->allocated = false;
  first->requested = 0;
  first->stream = seg->stream;
  first->stream_uses.clear();
  first->state = residency::resident;
  if (seg->mapped) {
    pool_.insert_free(first);
    segments_.note_whole_free(first);
  } else {
    segments_.release(first);
  }
}

void pack_table::leave(block* member) {
  pack_info& pk = *member->seg->pack;
  if (member->state == residency::resident && member->seg->mapped) add_event(pk, member->stream);
  member->filler = true;
  member->allocated = false;
  member->requested = 0;
  member->stream_uses.clear();
  settle(member->seg);
}

void pack_table::evict(block* member) {
  pack_info& pk = *member->seg->pack;
  add_event(pk, member->stream);
  for (stream_handle s : member->stream_uses) add_event(pk, s);
  member->state = residency::evicting;
  settle(member->seg);
}

// The pack's pages are mapped again: members other than `except` were evicted and are
// now evicting (pages there, contents undefined).
void pack_table::remapped(segment* seg, const block* except) {
  stats& st = ctx_.st;
  for (block* b = seg->first; b != nullptr; b = b->next) {
    if (b->filler || b == except || b->state != residency::evicted) continue;
    b->state = residency::evicting;
    if (b->allocated) st.evicted -= b->size;
  }
  st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
}

// Maps an unmapped pack under the budget, the pack pinned so that nothing the mapping
// polls can end it. Throws out_of_memory (after ending the pack if it was left empty).
void pack_table::map(segment* seg, std::size_t requested, std::optional<stream_handle> stream) {
  seg->pack->pinned = true;
  try {
    ladder_.map(*seg, requested, stream);
  } catch (...) {
    seg->pack->pinned = false;
    settle(seg);
    throw;
  }
  seg->pack->pinned = false;
}

void pack_table::restore(block* member, std::optional<stream_handle> stream) {
  stats& st = ctx_.st;
  segment* seg = member->seg;
  pack_info& pk = *seg->pack;
  if (seg->mapped) {
    const bool queued = pk.unmap_id != 0;
    cancel_unmap(pk);
    if (!queued) ++st.cancelled_evictions;  // this member's eviction, pages never given back
    member->state = residency::resident;
    if (queued) ++st.restores;
    return;
  }
  const std::uint64_t handoffs_before = st.handoffs;
  map(seg, member->requested, stream);
  if (st.handoffs != handoffs_before) ++st.restore_handoffs;
  remapped(seg, member);
  member->state = residency::resident;
  st.evicted -= member->size;
  st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
  ++st.restores;
}

block* pack_table::place(std::size_t size, stream_handle stream, const pack_slot& slot) {
  const std::size_t rounded = pool_.round_size(size);
  const std::size_t seg_size = round_up(std::max<std::size_t>(slot.bytes, 1), ctx_.granularity);
  if (slot.key == 0) refuse_slot(slot, size, "the pack key must be nonzero");
  if (slot.bytes == 0) refuse_slot(slot, size, "a pack must have a size");
  if (slot.offset % 512 != 0) refuse_slot(slot, size, "the offset is not a multiple of 512");
  if (slot.offset > seg_size || rounded > seg_size - slot.offset)
    refuse_slot(slot, size, "the member does not fit in the pack");
  const std::size_t lo = slot.offset, hi = slot.offset + rounded;
  segment* seg = nullptr;
  block* f = nullptr;  // the filler holding [lo, hi)
  if (auto it = packs_.find(slot.key); it != packs_.end()) {
    seg = it->second;
    const pack_info& pk = *seg->pack;
    if (pk.bytes != slot.bytes) refuse_slot(slot, size, "the pack was made with a different size");
    if (seg->stream != stream) refuse_slot(slot, size, "the pack belongs to another stream");
    for (auto [ulo, uhi] : pk.used) {
      if (lo < uhi && ulo < hi) refuse_slot(slot, size, "the range overlaps a member placed in the pack before");
    }
    // Never-used space lies in fillers that no member range ever split, so one holds it.
    for (f = seg->first; f != nullptr; f = f->next) {
      const auto from = static_cast<std::size_t>(f->ptr - seg->base);
      if (from <= lo && lo < from + f->size) break;
    }
    if (f == nullptr || !f->filler || static_cast<std::size_t>(f->ptr - seg->base) + f->size < hi)
      refuse_slot(slot, size, "the range is not free in the pack");
    // Mapping (pinned) may turn freed members into fillers but never splits or merges.
    if (!seg->mapped) {
      map(seg, size, stream);
      remapped(seg, nullptr);
    } else {
      cancel_unmap(*seg->pack);
    }
  } else {
    block* whole = ladder_.dedicated_segment(seg_size, stream, size);
    seg = whole->seg;
    f = whole;
    whole->filler = true;
    whole->state = residency::resident;
    whole->stream = stream;
    seg->pack = std::make_unique<pack_info>();
    seg->pack->key = slot.key;
    seg->pack->bytes = slot.bytes;
    packs_.emplace(slot.key, seg);
    ++ctx_.st.packs_created;
  }
  char* const at = seg->base + lo;
  const auto split_off = [&](block* b, char* cut) {  // b keeps [b->ptr, cut); a new filler the rest
    block* rest = pool_.make();
    rest->ptr = cut;
    rest->size = static_cast<std::size_t>(b->ptr + b->size - cut);
    rest->seg = seg;
    rest->stream = seg->stream;
    rest->filler = true;
    rest->state = b->state;
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = static_cast<std::size_t>(cut - b->ptr);
    return rest;
  };
  block* b = f;
  if (b->ptr < at) b = split_off(b, at);
  if (b->size > rounded) split_off(b, at + rounded);
  seg->pack->used.emplace_back(lo, hi);
  b->filler = false;
  b->state = residency::resident;
  b->stream_uses.clear();
  ++ctx_.st.pack_members;
  return b;
}

void pack_table::take_due_unmaps(bool wait, std::vector<segment*>& out) {
  for (auto it = unmaps_.begin(); it != unmaps_.end();) {
    segment* seg = queued(*it);
    if (seg != nullptr && !events_complete(*seg->pack, wait)) {
      ++it;
      continue;
    }
    if (seg != nullptr) {
      release_events(*seg->pack);
      seg->pack->unmap_id = 0;
      out.push_back(seg);
    }
    it = unmaps_.erase(it);
  }
}

void pack_table::unmapped(segment* seg) {
  for (block* b = seg->first; b != nullptr; b = b->next) {
    if (b->filler) continue;
    if (b->allocated) {
      note_evicted(*b, ctx_.st);
    } else {
      b->state = residency::evicted;  // freed, waiting for other streams: not counted
    }
  }
}

}  // namespace sublinear::allocator::detail
