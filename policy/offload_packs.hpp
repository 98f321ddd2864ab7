// Offload packs: small offloaded buffers that share pages and travel in one copy.
//
// Note [Offload packs]
// Rationale: an offloaded buffer has pages of its own while resident, so one of a few KiB
//   holds a whole page (64 KiB on the host device, a 2 MiB granule on CUDA), and each copy
//   pays the link's fixed cost: on the host device's link (4.5 ms a copy) an LSTM's 3 KiB
//   gates cost their latency and nothing else, and the offload search left them to
//   recompute (docs/offload.md).
// Approach: an offloaded pack (plan.hpp `pack::offloaded`) places its members in one
//   dedicated run of pages, as a recompute pack does (Note [Packs]); every member is an
//   offload with the same four points, and the pack moves as one copy each way of its
//   first `bytes`, carried by the offload of its first member: the others ride on it
//   (copies_of). The pages are released when that copy is done and mapped again for the
//   copy back, so the pack is out over the members' common gap. The simulator, the host
//   pool's layout and the runtime all take the copies from copies_of, so they agree.
// Limitations: a member is out only over the gap all members share: the later the first
//   member's last forward use, the less it frees. Members share one stream (as for any
//   pack), and the search forms packs from buffers in allocation order only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "policy/iteration.hpp"
#include "policy/plan.hpp"

namespace sublinear::policy {

// What moves over the link, per plan.offloads entry j.
struct link_copies {
  std::vector<std::uint32_t> carrier;  // the entry whose copies move j's bytes: j itself, or its pack's first member's
  std::vector<std::size_t> bytes;      // bytes j's own copies move (0 when another entry carries j)
  std::vector<std::size_t> offset;     // where j's bytes are in its carrier's copy (0 unless packed)
};

// The copies of p's offloads (above). Entries whose target is no buffer of `it`, or an
// offloaded pack whose members are not all offloaded, are left to carry themselves: the
// simulator refuses such plans on its own.
[[nodiscard]] link_copies copies_of(const iteration& it, const plan& p);

}  // namespace sublinear::policy
