// The whole-structure validator behind caching_allocator::validate().
//
// Note [Allocator invariants]
// Rationale: the allocator keeps the same facts several times over (block lists, free
//   sets, the live set, pack keys, the chunk pool, the statistics), so a bug in one path
//   shows up far from its cause: as a wrong figure, a block handed out twice, pages
//   unmapped under a resident block. A walk that recounts everything names the first
//   fact that broke.
// Approach: every segment is walked: it lies in the reservation, aligned; its blocks tile
//   it with consistent links; no two free blocks are adjacent; a dedicated segment is one
//   block; a pack's members lie in ranges placed in it and agree with its mapping and its
//   queued unmap. Then the free sets, the live set, the pack keys and the statistics
//   (allocated, mapped with the pooled and orphaned chunks, reserved, evicted, pooled) are
//   compared with the recount, and mapped with the budget. The first broken invariant is
//   printed on stderr.
// Limitations: linear in the blocks and run under the allocator's lock: for tests and
//   debugging (the stress tests run it every 4,096 steps), not for a production path.
#pragma once

#include "allocator/detail/address_space.hpp"
#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/chunk_source.hpp"
#include "allocator/detail/context.hpp"
#include "allocator/detail/pack_table.hpp"
#include "allocator/detail/segment_table.hpp"

namespace sublinear::allocator::detail {

// True if every invariant holds; false, with the first broken one on stderr, otherwise.
[[nodiscard]] bool validate(const context& ctx, const address_space& space, const chunk_source& chunks,
                            const block_pool& pool, const segment_table& segments, const pack_table& packs);

}  // namespace sublinear::allocator::detail
