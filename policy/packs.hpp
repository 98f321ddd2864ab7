// Packs: evicted buffers smaller than a page share the pages of one run.
//
// Note [Packs]
// Rationale: a buffer the plan evicts gets pages of its own, because pages are what the
//   allocator unmaps (Note [Evictable blocks] in allocator/detail/eviction_queue.hpp). On the
//   host device's 64 KiB pages most activations of a deep ResNet at batch 16 are 16 KiB:
//   evicted, each holds a whole page while resident, and a regenerated segment holds four
//   times its bytes: room the plan then pays for by recomputing more.
// Approach: evicted buffers of at most half a page that the same recipe regenerates,
//   allocated on one stream, share one page: taken in allocation order, as many as fit.
//   One stream, because the allocator maps a pack for one stream; a member asked for on
//   another would get a page of its own that the plan did not count (buffer::stream
//   records each buffer's allocating stream). The allocator maps a pack's page while
//   any member is resident and gives it back once every member is evicted or freed. A
//   pack never holds more than its members would alone (one page, where each resident
//   member would hold one), so packing never raises a plan's peak;
//   planner::context::evaluate packs every plan it simulates, so the searches can spend
//   the room it makes on recomputing less.
// Limitations: a program that allocates a buffer on another stream than the traced one
//   diverges from the plan's packs: the allocator gives that member its own page and
//   the pressure valve covers what the plan did not count. Regenerating one member maps
//   the whole page. The grouping is by recipe and allocation order, not
//   chosen to minimise the peak.
#pragma once

#include <vector>

#include "policy/iteration.hpp"
#include "policy/plan.hpp"

namespace sublinear::policy {

// Replaces p.packs' recompute packs with packs of its evicted buffers of at most half a
// page (above); offloaded packs (Note [Offload packs]) stay. Adds none where packing
// does not apply: one page is under 1 KiB.
void add_packs(const iteration& it, plan& p);

// Whether add_packs packs anything on this iteration (pages of 1 KiB or more).
[[nodiscard]] bool packs_apply(const iteration& it);

// Pages held by these buffers when all are resident, evicted and packed as add_packs
// would pack them if one recipe regenerated them all: the ones over half a page on their
// own pages, the others packed in allocation order. For planners' memory models.
[[nodiscard]] std::size_t packed_footprint(const iteration& it, std::vector<buffer_id> buffers);

}  // namespace sublinear::policy
