// The caching allocator. Design notes live in caching_allocator.hpp and in the component
// headers of allocator/detail/ (the data types in blocks.hpp); this file keeps the
// slow-path ladder of Note [Strict budget], packs (found by key in `packs`), evictions and
// the validator.
#include "allocator/caching_allocator.hpp"
#include "allocator/detail/address_space.hpp"
#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/blocks.hpp"
#include "allocator/detail/chunk_source.hpp"
#include "allocator/detail/context.hpp"
#include "allocator/detail/segment_table.hpp"
#include "allocator/detail/segment_trim.hpp"
#include "common/round_up.hpp"
#include "common/text.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sublinear::allocator {
namespace {

using detail::block;
using detail::by_size_key;
using detail::free_set;
using detail::pack_info;
using detail::pool_kind;
using detail::segment;

// Events a block waits on before it can be reused (frees) or unmapped (evictions). A
// pack's unmap (Note [Packs]) has no block: `pack_key` names the pack, `generation` is the
// pack's unmap_id when queued, and the events are the pack's own.
struct pending {
  block* b = nullptr;
  std::uint64_t generation = 0;
  std::vector<event_handle> events;
  std::uint64_t pack_key = 0;
};

}  // namespace

struct caching_allocator::impl {
  detail::context ctx;
  // Shorthands for the shared parts, while the rest of the allocator lives here.
  vmm& device = ctx.device;
  stream_events& events = ctx.events;
  options& opts = ctx.opts;
  const std::size_t granularity = ctx.granularity;
  const std::size_t physical_capacity = ctx.physical_capacity;
  stats& st = ctx.st;
  detail::address_space space;
  detail::chunk_source chunks{ctx, space};
  detail::block_pool pool{ctx};
  detail::segment_table segments{ctx, space, chunks, pool};
  detail::segment_trim trim{ctx, space, pool, segments};

  mutable std::mutex mutex;
  std::atomic<allocation_observer*> observer{nullptr};
  std::deque<pending> pending_frees;
  std::deque<pending> pending_evictions;
  std::map<std::uint64_t, segment*> packs;                 // live packs by key (Note [Packs])
  std::uint64_t next_unmap_id = 0;
  caching_allocator::pressure_handler pressure;
  caching_allocator::overrun_handler overrun;
  std::size_t last_shortfall = 0;                          // bytes missing at the last budget failure

  impl(vmm& d, stream_events& e, options o) : ctx(d, e, o), space(ctx) {}

  ~impl() {
    // Wait for everything still pending, then give every page and the range back.
    for (auto& p : pending_frees) drain(p, true);
    for (auto& p : pending_evictions) drain(p, true);
    chunks.shutdown_old_mappings();
    pool.clear();
    segments.shutdown();
    chunks.shutdown_pool();  // the address space releases the reservation after this
  }

  void drain(pending& p, bool wait) {
    for (event_handle e : p.events) {
      if (wait) events.synchronize(e);
      events.release(e);
    }
    p.events.clear();
  }

  // ---- physical pages -----------------------------------------------------------------
  // Maps a chunk at `seg` (Note [Chunk pool]). Returns the status of the failing call.
  vmm_status map_segment(segment& seg) {
    chunk_handle handle = 0;
    const vmm_status s = chunks.map(seg.base, seg.size, handle);
    if (s == vmm_status::ok) {
      seg.handle = handle;
      seg.mapped = true;
    }
    return s;
  }

  // An evicting block's pages are gone from it (unmapped, or handed to another mapping).
  void note_evicted(block* b) {
    b->state = residency::evicted;
    st.evicted += b->size;
    st.evicted_total += b->size;
    ++st.evictions;
  }

  // ---- stream-ordered handoff (Note [Stream-ordered handoff]) -------------------------
  // Finds a chunk of exactly `bytes` whose last use is queued on `stream` and nowhere else,
  // and sets it aside for the next map_segment: a pending eviction's first (its block is
  // gone for now anyway), else a wholly free cached segment's. Returns false if none.
  bool hand_off(std::size_t bytes, std::optional<stream_handle> on) {
    if (!opts.stream_ordered_handoff || !on || bytes == 0 || chunks.holding_handoff()) return false;
    const stream_handle stream = *on;
    for (auto it = pending_evictions.begin(); it != pending_evictions.end(); ++it) {
      block* b = it->b;
      if (b == nullptr) continue;  // a pack's unmap is never handed off (Note [Packs])
      if (b->eviction_generation != it->generation || b->state != residency::evicting) continue;
      if (b->seg->size != bytes || b->stream != stream) continue;
      if (std::any_of(b->stream_uses.begin(), b->stream_uses.end(), [&](stream_handle u) { return u != stream; }))
        continue;
      segment* seg = b->seg;
      chunks.hand_over(seg->base, seg->size, seg->handle, std::move(it->events), false, stream);
      pending_evictions.erase(it);
      seg->mapped = false;
      note_evicted(b);
      return true;
    }
    return segments.hand_off(bytes, stream);
  }

  // ---- pending events -----------------------------------------------------------------
  static bool all_complete(stream_events& ev, pending& p, bool wait) {
    for (event_handle e : p.events) {
      if (wait) {
        ev.synchronize(e);
      } else if (!ev.query(e)) {
        return false;
      }
    }
    return true;
  }

  // Completes frees whose events are done. With `wait`, waits for all of them.
  void process_pending_frees(bool wait) {
    while (!pending_frees.empty()) {
      pending& p = pending_frees.front();
      if (!all_complete(events, p, wait)) break;  // FIFO: later ones were recorded later
      drain(p, false);
      block* b = p.b;
      pending_frees.pop_front();
      b->stream_uses.clear();
      return_to_pool(b);
    }
  }

  // Unmaps evicted blocks whose last-use events are done. Returns bytes unmapped.
  std::size_t process_pending_evictions(bool wait) {
    std::size_t unmapped = 0;
    std::vector<block*> done;
    std::vector<segment*> done_packs;
    for (auto it = pending_evictions.begin(); it != pending_evictions.end();) {
      if (it->b == nullptr) {
        segment* seg = queued_pack(*it);
        if (seg != nullptr && !pack_events_complete(*seg->pack, wait)) {
          ++it;
          continue;
        }
        if (seg != nullptr) {
          release_pack_events(*seg->pack);
          seg->pack->unmap_id = 0;
          done_packs.push_back(seg);
        }
        it = pending_evictions.erase(it);
        continue;
      }
      block* b = it->b;
      bool cancelled = b->eviction_generation != it->generation || b->state != residency::evicting;
      if (!cancelled && !all_complete(events, *it, wait)) {
        ++it;
        continue;
      }
      drain(*it, false);
      if (!cancelled) done.push_back(b);
      it = pending_evictions.erase(it);
    }
    if (done.empty() && done_packs.empty()) return 0;
    // Every eviction completed now goes in one device call (Note [Batched unmap]).
    std::vector<segment*> segs;
    segs.reserve(done.size() + done_packs.size());
    for (block* b : done) segs.push_back(b->seg);
    segs.insert(segs.end(), done_packs.begin(), done_packs.end());
    segments.unmap(segs, opts.pool_chunks);
    for (block* b : done) {
      note_evicted(b);
      unmapped += b->size;
    }
    for (segment* seg : done_packs) {
      for (block* b = seg->first; b != nullptr; b = b->next) {
        if (b->filler) continue;
        if (b->allocated) {
          note_evicted(b);
        } else {
          b->state = residency::evicted;  // freed, waiting for other streams: not counted
        }
      }
      unmapped += seg->size;
    }
    return unmapped;
  }

  void poll() {
    if (!pending_frees.empty()) process_pending_frees(false);
    if (!pending_evictions.empty()) process_pending_evictions(false);
    chunks.poll();
  }

  bool fits(std::size_t bytes) const { return ctx.fits(bytes); }
  bool ready(std::size_t bytes) const { return chunks.ready(bytes); }

  // The ladder of Note [Strict budget]. Returns false if `bytes` cannot be made to fit.
  // `stream`: the mapping's pages are used on it (none: unknown), which allows a
  // handoff (Note [Stream-ordered handoff]).
  bool make_room(std::size_t bytes, std::optional<stream_handle> stream = std::nullopt) {
    // One left by a request that failed before mapping it serves only its own size and stream.
    chunks.keep_handoff_for(bytes, stream);
    if (ready(bytes)) return true;
    poll();
    if (ready(bytes) || hand_off(bytes, stream)) return true;
    // Pooled chunks first, then cached segments, then the chunks their release pooled.
    const auto give_back = [&] {
      if (ready(bytes)) return true;
      chunks.trim(bytes, bytes);
      if (fits(bytes)) return true;
      segments.release_cached(bytes, false, bytes);
      if (ready(bytes)) return true;
      chunks.trim(bytes, bytes);
      return fits(bytes);
    };
    if (give_back()) return true;
    if (!pending_evictions.empty() || !pending_frees.empty() || chunks.has_orphans()) {
      ++st.budget_waits;
      process_pending_evictions(true);
      process_pending_frees(true);
      if (chunks.has_orphans()) chunks.settle_all();
      if (give_back()) return true;
    }
    if (opts.trim_segments && trim.cut_holes(bytes)) return true;
    last_shortfall = st.mapped + bytes - st.budget;
    return false;
  }

  [[noreturn]] void throw_oom(std::size_t requested, out_of_memory::cause ran_out, const std::string& why) {
    ++st.oom_errors;
    out_of_memory::figures f{requested, st.mapped, st.reserved, st.budget, pool.largest_free(), ran_out};
    throw out_of_memory("sublinear: out of memory: " + why + ". Requested " + format_bytes(requested) +
                            "; mapped " + format_bytes(f.mapped) + ", reserved " + format_bytes(f.reserved) +
                            ", budget " + format_bytes(f.budget) + ", largest free block " +
                            format_bytes(f.largest_free_block) +
                            ". Raise the budget, or free or evict memory before this allocation.",
                        f);
  }

  // Maps `seg` under the budget, retrying after reclaiming when the device itself is out
  // of physical memory. Throws out_of_memory.
  void map_under_budget(segment& seg, std::size_t requested, std::optional<stream_handle> stream = std::nullopt) {
    if (!make_room(seg.size, stream))
      throw_oom(requested, out_of_memory::cause::budget, "mapping " + format_bytes(seg.size) + " would exceed the budget");
    vmm_status s = map_segment(seg);
    if (s == vmm_status::out_of_memory) {
      segments.release_cached(0, true);
      process_pending_evictions(true);
      chunks.empty_pool();
      s = map_segment(seg);
    }
    if (s == vmm_status::out_of_memory)
      throw_oom(requested, out_of_memory::cause::device_memory, "the " + device.name() + " device has no physical memory left");
    if (s != vmm_status::ok) {
      throw device_error("sublinear: mapping " + format_bytes(seg.size) + " on the " + device.name() +
                         " device failed (" + to_string(s) + ": " + device.last_error() + ")");
    }
  }

  block* new_segment(std::size_t size, pool_kind kind, stream_handle stream, std::size_t requested) {
    char* base = space.take(size);
    if (base == nullptr) {
      chunks.orphan_handoff();  // make_room may have set one aside for this segment
      throw_oom(requested, out_of_memory::cause::address_space, "the reserved address space (" + format_bytes(space.size()) +
                               ") has no free range of " + format_bytes(size) + "; set a larger options.reserve");
    }
    auto seg = std::make_unique<segment>();
    seg->base = base;
    seg->size = size;
    seg->kind = kind;
    seg->stream = stream;
    try {
      map_under_budget(*seg, requested, stream);
    } catch (...) {
      space.give(base, size);
      throw;
    }
    return segments.add(std::move(seg));
  }

  // ---- allocate / free ----------------------------------------------------------------
  // A whole dedicated segment of exactly `bytes` for `stream`: a free one of that size from
  // its pool, else a new one (`requested`: what the caller asked for, for the error).
  block* dedicated_segment(std::size_t bytes, stream_handle stream, std::size_t requested) {
    if (block* b = pool.take_exact(stream, pool_kind::dedicated, bytes); b != nullptr) return b;
    return new_segment(bytes, pool_kind::dedicated, stream, requested);
  }

  void* allocate(std::size_t size, stream_handle stream, bool evictable) {
    if (size == 0) return nullptr;
    poll();
    block* b = nullptr;
    if (evictable) {
      b = dedicated_segment(round_up(size, granularity), stream, size);
    } else {
      std::size_t rounded = pool.round_size(size);
      pool_kind kind = rounded <= opts.small_size ? pool_kind::small : pool_kind::large;
      b = pool.take_fit(stream, kind, rounded);
      bool borrowed = false;
      if (b == nullptr) {
        std::size_t seg_size = pool.segment_size(rounded);
        std::size_t minimal = round_up(rounded, granularity);
        if (kind == pool_kind::large && opts.exact_large_segments) {
          seg_size = minimal;
          segments.release_idle_smaller(stream, minimal);
        }
        // Under pressure a smaller segment beats an out-of-memory error.
        if (!ready(seg_size) && minimal < seg_size) seg_size = minimal;
        if (!make_room(seg_size, stream)) {
          // Still no room: a free block of the stream's other size class will do, split
          // as finely as a small block (Note [Strict budget]).
          b = pool.take_at_least(stream, kind == pool_kind::small ? pool_kind::large : pool_kind::small, rounded);
          if (b != nullptr) {
            borrowed = true;
            ++st.borrowed_blocks;
          }
        }
        if (b == nullptr) b = new_segment(seg_size, kind, stream, size);
      }
      if (borrowed ? b->size - rounded >= opts.min_block : pool.should_split(*b, rounded)) pool.split(b, rounded);
    }
    return hand_out(b, size, stream);
  }

  // Marks `b` allocated for `size` bytes on `stream` and counts it: the last step of every
  // allocation, packed or not.
  void* hand_out(block* b, std::size_t size, stream_handle stream) {
    b->allocated = true;
    b->requested = size;
    b->stream = stream;
    pool.add_live(b);
    st.allocated += b->size;
    st.allocated_peak = std::max(st.allocated_peak, st.allocated);
    st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
    st.requested += size;
    ++st.allocs;
    return b->ptr;
  }

  // Puts a block no longer in use back in its pool, merging free neighbours.
  void return_to_pool(block* b) {
    segment* seg = b->seg;
    if (seg->pack) {
      leave_pack(b);
      return;
    }
    if (seg->kind == pool_kind::dedicated) {
      if (b->state == residency::evicting) cancel_eviction(b);
      if (b->state == residency::evicted) {
        // Its pages are already gone: give the address range back too.
        st.evicted -= b->size;
        b->state = residency::resident;
        segments.release(b);
        return;
      }
      pool.insert_free(b);
      segments.note_whole_free(b);
      return;
    }
    b = pool.merge(b);
    pool.insert_free(b);
    segments.note_whole_free(b);
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
    st.allocated -= b->size;
    st.requested -= b->requested;
    ++st.frees;
    // A pack member's evicted bytes stop counting here: a member waiting in pending_frees
    // is no longer allocated, and its pack's unmap may complete meanwhile (Note [Packs]).
    if (b->seg->pack && b->state == residency::evicted) st.evicted -= b->size;
    if (!b->stream_uses.empty() && b->state != residency::evicted) {
      // Used on other streams: reuse must wait for their work (PyTorch's insert_events).
      pending p{b, 0, {}};
      for (stream_handle s : b->stream_uses) p.events.push_back(events.record(s));
      pending_frees.push_back(std::move(p));
      return;
    }
    return_to_pool(b);
  }

  // ---- eviction -----------------------------------------------------------------------
  void cancel_eviction(block* b) {
    ++b->eviction_generation;  // the queued entry is dropped when next polled
    b->state = residency::resident;
    ++st.cancelled_evictions;
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

  void evict(void* ptr) {
    block* b = evictable_block(ptr, "evict");
    if (b->state != residency::resident) return;
    if (b->seg->pack) {
      add_pack_event(*b->seg->pack, b->stream);
      for (stream_handle s : b->stream_uses) add_pack_event(*b->seg->pack, s);
      b->state = residency::evicting;
      settle_pack(b->seg);
      process_pending_evictions(false);
      return;
    }
    pending p{b, ++b->eviction_generation, {}};
    p.events.push_back(events.record(b->stream));
    for (stream_handle s : b->stream_uses) p.events.push_back(events.record(s));
    b->state = residency::evicting;
    pending_evictions.push_back(std::move(p));
    process_pending_evictions(false);
  }

  void restore(void* ptr, std::optional<stream_handle> stream) {
    block* b = evictable_block(ptr, "restore");
    if (b->state == residency::resident) return;
    if (b->seg->pack) {
      restore_member(b, stream);
      return;
    }
    if (b->state == residency::evicting) {
      cancel_eviction(b);
      return;
    }
    const std::uint64_t handoffs_before = st.handoffs;
    map_under_budget(*b->seg, b->requested, stream);
    if (st.handoffs != handoffs_before) ++st.restore_handoffs;
    b->state = residency::resident;
    st.evicted -= b->size;
    st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
    ++st.restores;
  }

  // ---- packs (Note [Packs]) -----------------------------------------------------------
  // The pack a queued unmap belongs to, or nullptr if that unmap was cancelled (the pack
  // ended, or a restore or a new member cancelled it).
  segment* queued_pack(const pending& p) const {
    auto it = packs.find(p.pack_key);
    if (it == packs.end() || it->second->pack->unmap_id != p.generation) return nullptr;
    return it->second;
  }

  bool pack_events_complete(const pack_info& pk, bool wait) {
    for (auto [s, e] : pk.events) {
      if (wait) {
        events.synchronize(e);
      } else if (!events.query(e)) {
        return false;
      }
    }
    return true;
  }

  void release_pack_events(pack_info& pk) {
    for (auto [s, e] : pk.events) events.release(e);
    pk.events.clear();
  }

  // Records the last use of a member on `s`: the latest event per stream covers the rest.
  void add_pack_event(pack_info& pk, stream_handle s) {
    event_handle e = events.record(s);
    for (auto& [stream, old] : pk.events) {
      if (stream == s) {
        events.release(old);
        old = e;
        return;
      }
    }
    pk.events.emplace_back(s, e);
  }

  // Cancels a queued unmap (the entry is dropped when next polled).
  void cancel_pack_unmap(pack_info& pk) {
    if (pk.unmap_id == 0) return;
    pk.unmap_id = 0;
    ++st.cancelled_evictions;
  }

  // After a member left or was evicted: ends the pack if no member is left, else queues
  // its unmap if no member is resident and its pages are still mapped.
  void settle_pack(segment* seg) {
    pack_info& pk = *seg->pack;
    if (pk.pinned) return;
    std::size_t members = 0, resident = 0;
    for (const block* b = seg->first; b != nullptr; b = b->next) {
      if (b->filler) continue;
      ++members;  // allocated, or freed and waiting in pending_frees
      if (b->state == residency::resident) ++resident;
    }
    if (members == 0) {
      end_pack(seg);
      return;
    }
    if (resident == 0 && seg->mapped && pk.unmap_id == 0) {
      pk.unmap_id = ++next_unmap_id;
      pending p{nullptr, pk.unmap_id, {}, pk.key};
      pending_evictions.push_back(std::move(p));
    }
  }

  // No member is left: the segment becomes one free dedicated block, or goes if its pages
  // were given back; the key may name a new pack.
  void end_pack(segment* seg) {
    pack_info& pk = *seg->pack;
    cancel_pack_unmap(pk);
    // Work on other streams completed before the members left (pending_frees), and reuse
    // on the segment's own stream is ordered after what is queued there.
    release_pack_events(pk);
    packs.erase(pk.key);
    seg->pack.reset();
    block* first = seg->first;
    for (block* b = first->next; b != nullptr;) {
      block* next = b->next;
      pool.recycle(b);
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
      pool.insert_free(first);
      segments.note_whole_free(first);
    } else {
      segments.release(first);
    }
  }

  // A member no longer in use (freed, its other streams' work done) becomes a filler.
  void leave_pack(block* b) {
    pack_info& pk = *b->seg->pack;
    if (b->state == residency::resident && b->seg->mapped) add_pack_event(pk, b->stream);
    b->filler = true;
    b->allocated = false;
    b->requested = 0;
    b->stream_uses.clear();
    settle_pack(b->seg);
  }

  // The pack's pages are mapped again: members other than `except` were evicted and are
  // now evicting (pages there, contents undefined).
  void pack_remapped(segment* seg, const block* except) {
    for (block* b = seg->first; b != nullptr; b = b->next) {
      if (b->filler || b == except || b->state != residency::evicted) continue;
      b->state = residency::evicting;
      if (b->allocated) st.evicted -= b->size;
    }
    st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
  }

  // Maps an unmapped pack under the budget, the pack pinned so that nothing the mapping
  // polls can end it. Throws out_of_memory (after ending the pack if it was left empty).
  void map_pack(segment* seg, std::size_t requested, std::optional<stream_handle> stream) {
    seg->pack->pinned = true;
    try {
      map_under_budget(*seg, requested, stream);
    } catch (...) {
      seg->pack->pinned = false;
      settle_pack(seg);
      throw;
    }
    seg->pack->pinned = false;
  }

  void restore_member(block* b, std::optional<stream_handle> stream) {
    segment* seg = b->seg;
    pack_info& pk = *seg->pack;
    if (seg->mapped) {
      const bool queued = pk.unmap_id != 0;
      cancel_pack_unmap(pk);
      if (!queued) ++st.cancelled_evictions;  // this member's eviction, pages never given back
      b->state = residency::resident;
      if (queued) ++st.restores;
      return;
    }
    const std::uint64_t handoffs_before = st.handoffs;
    map_pack(seg, b->requested, stream);
    if (st.handoffs != handoffs_before) ++st.restore_handoffs;
    pack_remapped(seg, b);
    b->state = residency::resident;
    st.evicted -= b->size;
    st.resident_peak = std::max(st.resident_peak, st.allocated - st.evicted);
    ++st.restores;
  }

  [[noreturn]] static void refuse_slot(const pack_slot& slot, std::size_t size, const char* why) {
    char text[256];
    std::snprintf(text, sizeof text, "sublinear: allocate_in_pack(%zu bytes, pack %llu of %zu bytes at offset %zu): %s", size,
                  static_cast<unsigned long long>(slot.key), slot.bytes, slot.offset, why);
    throw config_error(text);
  }

  void* allocate_in_pack(std::size_t size, stream_handle stream, const pack_slot& slot) {
    if (size == 0) return nullptr;
    poll();
    const std::size_t rounded = pool.round_size(size);
    const std::size_t seg_size = round_up(std::max<std::size_t>(slot.bytes, 1), granularity);
    if (slot.key == 0) refuse_slot(slot, size, "the pack key must be nonzero");
    if (slot.bytes == 0) refuse_slot(slot, size, "a pack must have a size");
    if (slot.offset % 512 != 0) refuse_slot(slot, size, "the offset is not a multiple of 512");
    if (slot.offset > seg_size || rounded > seg_size - slot.offset)
      refuse_slot(slot, size, "the member does not fit in the pack");
    const std::size_t lo = slot.offset, hi = slot.offset + rounded;
    segment* seg = nullptr;
    block* f = nullptr;  // the filler holding [lo, hi)
    if (auto it = packs.find(slot.key); it != packs.end()) {
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
        map_pack(seg, size, stream);
        pack_remapped(seg, nullptr);
      } else {
        cancel_pack_unmap(*seg->pack);
      }
    } else {
      block* whole = dedicated_segment(seg_size, stream, size);
      seg = whole->seg;
      f = whole;
      whole->filler = true;
      whole->state = residency::resident;
      whole->stream = stream;
      seg->pack = std::make_unique<pack_info>();
      seg->pack->key = slot.key;
      seg->pack->bytes = slot.bytes;
      packs.emplace(slot.key, seg);
      ++st.packs_created;
    }
    char* const at = seg->base + lo;
    const auto split_off = [&](block* b, char* cut) {  // b keeps [b->ptr, cut); a new filler the rest
      block* rest = pool.make();
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
    ++st.pack_members;
    return hand_out(b, size, stream);
  }

  void set_budget(std::size_t bytes) {
    std::size_t budget = bytes == 0 ? physical_capacity : bytes;
    std::size_t old = st.budget;
    st.budget = budget;
    chunks.empty_pool();  // a new plan, new sizes: the pool starts empty (Note [Chunk pool])
    if (!make_room(0)) {
      st.budget = old;
      throw_oom(0, out_of_memory::cause::budget,
                "the new budget of " + format_bytes(budget) + " is below what is mapped and cannot be freed");
    }
  }

  // ---- validation ---------------------------------------------------------------------
  bool fail(const char* what) const {
    std::fprintf(stderr, "sublinear: allocator invariant broken: %s\n", what);
    return false;
  }

  bool validate() const {
    std::size_t allocated = 0, mapped = 0, reserved = 0, evicted = 0, free_blocks = 0, live_blocks = 0;
    std::size_t pack_segments = 0;
    for (const auto& [base, seg] : segments.all()) {
      reserved += seg->size;
      if (seg->mapped) mapped += seg->size;
      if (!space.contains(seg->base, seg->size)) return fail("segment outside the reservation");
      if (reinterpret_cast<std::uintptr_t>(seg->base) % granularity != 0 || seg->size % granularity != 0)
        return fail("segment not granularity-aligned");
      std::size_t covered = 0;
      const block* prev = nullptr;
      for (const block* b = seg->first; b != nullptr; prev = b, b = b->next) {
        if (b->prev != prev) return fail("broken prev link");
        if (b->seg != seg.get()) return fail("block points at the wrong segment");
        if (b->ptr != seg->base + covered) return fail("blocks do not tile their segment");
        covered += b->size;
        if (b->allocated) {
          ++live_blocks;
          allocated += b->size;
          if (b->in_free_set) return fail("allocated block in a free set");
          if (b->state == residency::evicted) evicted += b->size;
        } else if (b->in_free_set) {
          ++free_blocks;
          if (prev != nullptr && prev->in_free_set) return fail("two adjacent free blocks were not merged");
        }
        if (seg->pack) {
          // Note [Packs]: members and fillers tile it; evicting members may be either way.
          if (b->filler) {
            if (b->allocated || b->in_free_set) return fail("a pack's filler is allocated or free");
            continue;
          }
          if (b->in_free_set) return fail("a block of a pack is in a free set");
          const auto from = static_cast<std::size_t>(b->ptr - seg->base);
          const auto& used = seg->pack->used;
          if (std::find(used.begin(), used.end(), std::pair{from, from + b->size}) == used.end())
            return fail("a pack member lies outside the ranges placed in the pack");
          if (b->state == residency::evicted && seg->mapped) return fail("evicted pack member is still mapped");
          if (b->state == residency::resident && !seg->mapped) return fail("resident pack member is not mapped");
          if (b->state == residency::resident && seg->pack->unmap_id != 0)
            return fail("a pack with a resident member has its unmap queued");
          continue;
        }
        if (b->filler) return fail("a filler outside a pack");
        if (seg->kind == pool_kind::dedicated && b != seg->first) return fail("dedicated segment was split");
        if (b->state == residency::evicted && seg->mapped) return fail("evicted block is still mapped");
        if (b->state != residency::evicted && !seg->mapped) return fail("resident block is not mapped");
      }
      if (covered != seg->size) return fail("blocks do not cover their segment");
      if (seg->pack) {
        if (seg->kind != pool_kind::dedicated) return fail("a pack is not a dedicated segment");
        auto it = packs.find(seg->pack->key);
        if (it == packs.end() || it->second != seg.get()) return fail("a pack is missing from the pack keys");
        if (seg->pack->unmap_id != 0 && !seg->mapped) return fail("an unmapped pack has its unmap queued");
        ++pack_segments;
      }
    }
    if (pack_segments != packs.size()) return fail("pack keys name segments that are not packs");
    const std::size_t pooled = chunks.pooled_bytes();
    if (pooled != st.pooled) return fail("pooled statistic disagrees with a recount");
    mapped += pooled;
    mapped += chunks.orphaned_bytes();
    if (chunks.holding_handoff()) return fail("a handed-off chunk was left unmapped");
    std::size_t in_sets = 0;
    pool.for_each_free_set([&](const free_set& set) { in_sets += set.size(); });
    if (in_sets != free_blocks) return fail("free sets disagree with block states");
    if (pool.live().size() != live_blocks) return fail("live set disagrees with block states");
    if (allocated != st.allocated) return fail("allocated statistic disagrees with a recount");
    if (mapped != st.mapped) return fail("mapped statistic disagrees with a recount");
    if (reserved != st.reserved) return fail("reserved statistic disagrees with a recount");
    if (evicted != st.evicted) return fail("evicted statistic disagrees with a recount");
    if (st.mapped > st.budget) return fail("mapped bytes exceed the budget");
    return true;
  }
};

// ---- public shell ----------------------------------------------------------------------

caching_allocator::caching_allocator(vmm& device, stream_events& events, options opts)
    : impl_(std::make_unique<impl>(device, events, opts)) {}

caching_allocator::~caching_allocator() = default;

// Runs `attempt` (which takes the allocator's lock itself); when it fails for want of room
// under the budget, asks the pressure handler to evict more, outside the lock, and tries
// again while the handler frees something (Note [Strict budget]).
void caching_allocator::with_pressure_valve(const std::function<void()>& attempt) {
  impl& m = *impl_;
  std::size_t asked = 0;
  for (int round = 0;; ++round) {
    std::size_t shortfall = 0;
    pressure_handler handler;
    {
      std::lock_guard lock(m.mutex);
      m.last_shortfall = 0;  // set again only by this attempt's budget failure
    }
    try {
      attempt();
      return;
    } catch (const out_of_memory& e) {
      {
        std::lock_guard lock(m.mutex);
        handler = m.pressure;
        shortfall = m.last_shortfall;
        m.last_shortfall = 0;
      }
      // Only a budget shortfall can be met by evicting (the device's own exhaustion is
      // handled inside), and a handler that keeps freeing without effect must not loop.
      if (!handler || shortfall == 0) throw;
      std::size_t freed = 0;
      if (round < 64) {
        {
          std::lock_guard lock(m.mutex);
          ++m.st.pressure_calls;
        }
        freed = handler(shortfall);
      }
      if (freed == 0) {
        throw out_of_memory(std::string(e.what()) + " The replay engine was asked to evict more: it " +
                                (asked == 0 ? std::string("found no evictable buffer it could regenerate later")
                                            : "evicted " + format_bytes(asked) +
                                                  " more and found nothing else it could regenerate later") +
                                " (" + format_bytes(shortfall) + " short).",
                            e.details());
      }
      asked += freed;
    }
  }
}

// Runs `attempt`; when it fails for want of room and the overrun handler lifts the budget,
// runs it once more (set_overrun_handler). The handler is asked outside the lock.
void caching_allocator::with_overrun(const std::function<void()>& attempt) {
  try {
    attempt();
  } catch (const out_of_memory& e) {
    overrun_handler handler;
    {
      std::lock_guard lock(impl_->mutex);
      handler = impl_->overrun;
    }
    if (!handler || !handler(e)) throw;
    {
      std::lock_guard lock(impl_->mutex);
      ++impl_->st.budget_overruns;
    }
    attempt();
  }
}

void caching_allocator::set_overrun_handler(overrun_handler handler) {
  std::lock_guard lock(impl_->mutex);
  impl_->overrun = std::move(handler);
}

void caching_allocator::set_pressure_handler(pressure_handler handler) {
  std::lock_guard lock(impl_->mutex);
  impl_->pressure = std::move(handler);
}

void* caching_allocator::allocate(std::size_t size, stream_handle stream, bool evictable) {
  allocation_observer* obs = impl_->observer.load(std::memory_order_acquire);
  const bool asked_evictable = evictable;
  if (obs != nullptr && !evictable && size != 0) evictable = obs->place_evictable(size, stream);
  // Note [Packs]: the observer may give the block a place in a pack.
  std::optional<pack_slot> slot;
  if (obs != nullptr && evictable && !asked_evictable) slot = obs->pack_slot_for(size, stream);
  void* ptr = nullptr;
  with_overrun([&] {
    try {
      with_pressure_valve([&] {
        std::lock_guard lock(impl_->mutex);
        if (slot) {
          try {
            ptr = impl_->allocate_in_pack(size, stream, *slot);
            return;
          } catch (const config_error&) {
            // An inconsistent slot changed nothing: pages of its own instead.
            slot.reset();
            ++impl_->st.pack_refusals;
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
      ++impl_->st.shared_placements;
    }
  });
  if (obs != nullptr && ptr != nullptr) obs->on_allocate(ptr, size, stream, evictable);
  return ptr;
}

void* caching_allocator::allocate_in_pack(std::size_t size, stream_handle stream, const pack_slot& slot) {
  allocation_observer* obs = impl_->observer.load(std::memory_order_acquire);
  void* ptr = nullptr;
  with_overrun([&] {
    with_pressure_valve([&] {
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
  impl_->evict(ptr);
}

void caching_allocator::restore(void* ptr) {
  with_overrun([&] {
    with_pressure_valve([&] {
      std::lock_guard lock(impl_->mutex);
      impl_->restore(ptr, std::nullopt);
    });
  });
}

void caching_allocator::restore(void* ptr, stream_handle stream) {
  with_overrun([&] {
    with_pressure_valve([&] {
      std::lock_guard lock(impl_->mutex);
      impl_->restore(ptr, stream);
    });
  });
}

std::optional<block_info> caching_allocator::find(const void* address) const {
  std::lock_guard lock(impl_->mutex);
  const detail::block_pool& pool = impl_->pool;
  const block* b = pool.live_containing(address);
  if (b == nullptr) return std::nullopt;
  return block_info{b->ptr, b->size, b->requested, b->stream, b->seg->kind == pool_kind::dedicated, b->state};
}

std::vector<block_info> caching_allocator::live_blocks() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<block_info> out;
  out.reserve(impl_->pool.live().size());
  for (const auto& b : impl_->pool.live())
    out.push_back(block_info{b.ptr, b.size, b.requested, b.stream, b.seg->kind == pool_kind::dedicated, b.state});
  return out;
}

std::size_t caching_allocator::reclaim() {
  std::lock_guard lock(impl_->mutex);
  // Bytes taken out of segments: a chunk that goes to the pool is unmapped too.
  std::size_t before = impl_->st.mapped - impl_->st.pooled;
  impl_->poll();
  impl_->chunks.settle_completed();  // every completed one, not only a batch
  return before - (impl_->st.mapped - impl_->st.pooled);
}

std::size_t caching_allocator::empty_cache() {
  std::lock_guard lock(impl_->mutex);
  std::size_t before = impl_->st.mapped;
  impl_->process_pending_frees(true);
  impl_->process_pending_evictions(true);
  impl_->chunks.settle_all();
  impl_->segments.release_cached(0, true);
  impl_->chunks.empty_pool();
  return before - impl_->st.mapped;
}

void caching_allocator::set_exact_large_segments(bool exact) {
  std::lock_guard lock(impl_->mutex);
  impl_->opts.exact_large_segments = exact;
}

void caching_allocator::set_exact_small_segments(bool exact) {
  std::lock_guard lock(impl_->mutex);
  impl_->opts.exact_small_segments = exact;
}

void caching_allocator::set_segment_trim(bool trim) {
  std::lock_guard lock(impl_->mutex);
  impl_->opts.trim_segments = trim;
}

void caching_allocator::set_stream_ordered_handoff(bool handoff) {
  std::lock_guard lock(impl_->mutex);
  impl_->opts.stream_ordered_handoff = handoff;
  if (!handoff) impl_->chunks.orphan_handoff();
}

void caching_allocator::set_budget(std::size_t bytes) {
  std::lock_guard lock(impl_->mutex);
  impl_->set_budget(bytes);
}

std::size_t caching_allocator::budget() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->st.budget;
}

stats caching_allocator::get_stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->st;
}

void caching_allocator::reset_peaks() {
  std::lock_guard lock(impl_->mutex);
  impl_->st.allocated_peak = impl_->st.allocated;
  impl_->st.resident_peak = impl_->st.allocated - impl_->st.evicted;
  impl_->st.mapped_peak = impl_->st.mapped;
  impl_->st.reserved_peak = impl_->st.reserved;
}

std::size_t caching_allocator::granularity() const noexcept { return impl_->granularity; }

bool caching_allocator::validate() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->validate();
}

}  // namespace sublinear::allocator
