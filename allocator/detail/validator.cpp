#include "allocator/detail/validator.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

namespace sublinear::allocator::detail {
namespace {

bool fail(const char* what) {
  std::fprintf(stderr, "sublinear: allocator invariant broken: %s\n", what);
  return false;
}

}  // namespace

bool validate(const context& ctx, const address_space& space, const chunk_source& chunks, const block_pool& pool,
              const segment_table& segments, const pack_table& packs) {
  const stats& st = ctx.st;
  std::size_t allocated = 0, mapped = 0, reserved = 0, evicted = 0, free_blocks = 0, live_blocks = 0;
  std::size_t pack_segments = 0;
  for (const auto& [base, seg] : segments.all()) {
    reserved += seg->size;
    if (seg->mapped) mapped += seg->size;
    if (!space.contains(seg->base, seg->size)) return fail("segment outside the reservation");
    if (reinterpret_cast<std::uintptr_t>(seg->base) % ctx.granularity != 0 || seg->size % ctx.granularity != 0)
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
        // Note [Pack segments]: members and fillers tile it; evicting members may be either way.
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
      auto it = packs.all().find(seg->pack->key);
      if (it == packs.all().end() || it->second != seg.get()) return fail("a pack is missing from the pack keys");
      if (seg->pack->unmap_id != 0 && !seg->mapped) return fail("an unmapped pack has its unmap queued");
      ++pack_segments;
    }
  }
  if (pack_segments != packs.all().size()) return fail("pack keys name segments that are not packs");
  const std::size_t pooled = chunks.pooled_bytes();
  if (pooled != st.pooled) return fail("pooled statistic disagrees with a recount");
  mapped += pooled;
  mapped += chunks.orphaned_bytes();
  if (chunks.holding_handoff()) return fail("a handed-off chunk was left unmapped");
  std::size_t in_sets = 0;
  pool.for_each_free_set([&](const free_set& s) { in_sets += s.size(); });
  if (in_sets != free_blocks) return fail("free sets disagree with block states");
  if (pool.live().size() != live_blocks) return fail("live set disagrees with block states");
  if (allocated != st.allocated) return fail("allocated statistic disagrees with a recount");
  if (mapped != st.mapped) return fail("mapped statistic disagrees with a recount");
  if (reserved != st.reserved) return fail("reserved statistic disagrees with a recount");
  if (evicted != st.evicted) return fail("evicted statistic disagrees with a recount");
  if (st.mapped > st.budget) return fail("mapped bytes exceed the budget");
  return true;
}

}  // namespace sublinear::allocator::detail
