// The host pool's layout: where each offload's copy lives in the one pool of host memory
// the runtime makes per plan. The simulator bounds the pool by the host budget and the
// runtime places its slots here, so the two agree byte for byte.
//
// Note [Host pool layout]
// Rationale: the pool is made once per plan (pinned memory on CUDA) and every offload's
//   bytes have a fixed slot in it, so its size is what the host must give, and what the
//   host budget bounds. Slots whose offloads are on the host at different times may share
//   bytes; how well they do depends on where each goes, and the most bytes held at once
//   is only a lower bound of the pool (contiguous slots can leave holes no later slot
//   fits).
// Approach: an offload's slot is round_up(size, 512) bytes, held over positions
//   evict_after + 1 ..= restore_before: from the end of launch evict_after, when the copy
//   out is queued, to launch restore_before, whose stream waits for the copy back. Two
//   slots may share bytes when one's restore_before <= the other's evict_after: the copy
//   out after launch r is queued behind r's stream, which has already waited for the copy
//   back before r. Slots are placed first fit (lowest offset clear of every placed slot
//   it meets) in three orders: arrival (evict_after), larger first, longer-lived first;
//   the smallest pool wins, the earlier order on a tie, stopping early at the lower bound.
//   The pool never exceeds the slots' sum (the planner's bound, Note [Offload search]).
// Limitations: first fit is a heuristic (the exact layout is NP-hard): the pool may
//   exceed the most held at once. Placement is O(m^2) in the offloads per order, except
//   where all are held at one position (a forward's offloads fetched in the backward):
//   then every order stacks them, and arrival order is taken in O(m log m).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "policy/iteration.hpp"
#include "policy/plan.hpp"

namespace sublinear::policy {

inline constexpr std::size_t host_slot_alignment = 512;

struct host_layout {
  std::vector<std::size_t> offsets;  // per offload, in plan order; multiples of host_slot_alignment
  std::size_t pool_bytes = 0;        // the pool: the end of the highest slot
  std::size_t most_held = 0;         // the most slot bytes held at once (a lower bound of pool_bytes)
  launch_id most_held_at = 0;        // the first position (before that launch) where most_held is held
};

// Lays out the slots of `offloads`, sizes[j] being offload j's target size (above).
// Needs evict_after < restore_before for each; deterministic.
[[nodiscard]] host_layout lay_out_host_pool(const std::vector<offload>& offloads, const std::vector<std::size_t>& sizes);

// The same, with the sizes of the iteration's buffers (every target must be one).
[[nodiscard]] host_layout lay_out_host_pool(const iteration& it, const std::vector<offload>& offloads);

// The pool of a plan's offloads: one slot per copy (Note [Offload packs]: an offloaded
// pack's members at their offsets in their pack's slot), offsets per offload.
[[nodiscard]] host_layout lay_out_host_pool(const iteration& it, const plan& p);

// First fit in the given order (a permutation of the offloads' indices): the building
// block of lay_out_host_pool, for comparing orders.
[[nodiscard]] host_layout place_first_fit(const std::vector<offload>& offloads, const std::vector<std::size_t>& sizes,
                                          const std::vector<std::uint32_t>& order);

}  // namespace sublinear::policy
