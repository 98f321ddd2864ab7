// Cutting the free pages out of shared segments whose live blocks pin them: the last rung
// of the budget ladder (Note [Strict budget]).
//
// Note [Segment trim]
// Rationale: a mapping is unmapped whole, so one live block in a shared segment keeps all
//   its pages mapped, free ones included. Blocks kept for good from an unbudgeted traced
//   iteration pin whatever segment they split: without a trim, `sublinear demo --depth 56
//   --budget 0.5x` runs out of memory 32 KiB short, with 512 KiB free behind a 64 KiB
//   block in a 576 KiB segment (docs/allocator.md).
// Approach: the last rung of the ladder before failing. A segment of the shared pools
//   gives back the whole pages of its largest free block (a hole, or a free head or
//   tail): wait for every stream that may touch the segment, copy the live parts before
//   and after the hole to host memory, unmap the chunk, map a chunk for each live part
//   at its old address, and copy them back. The part after a hole becomes a segment of
//   its own; the hole's range goes back to the address space; no address changes.
//   Largest gain first, and only if the holes together cover the shortfall. Where the
//   budget has room for the new chunks beside the old one they are created first, so a
//   device that refuses them changes nothing; otherwise the old chunk goes first and the
//   budget holds at every step.
// Limitations: the host stalls once for the segments' streams. The live parts move under
//   the allocator's lock, but other threads use their blocks without it: a host write or
//   launch from another thread during the move is lost. So it is an option
//   (options::trim_segments) that the replay engine, which launches from the allocating
//   thread, turns on. Backends must copy (vmm::copy_to_host/copy_to_device). One hole per
//   segment per failing request. When the old chunk went first, a device that then
//   refuses the smaller chunks loses the live parts: a device error.
#pragma once

#include <cstddef>
#include <vector>

#include "allocator/detail/address_space.hpp"
#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/blocks.hpp"
#include "allocator/detail/context.hpp"
#include "allocator/detail/segment_table.hpp"

namespace sublinear::allocator::detail {

class segment_trim {
 public:
  segment_trim(context& ctx, address_space& space, block_pool& pool, segment_table& segments);

  // Cuts holes, largest first, until `bytes` more fit under the budget. False (and
  // nothing cut) if the holes together cannot cover the shortfall. Throws device_error.
  bool cut_holes(std::size_t bytes);

 private:
  struct hole {
    segment* seg;
    block* free;     // the free block whose whole pages go
    std::size_t lo;  // the pages kept before it: [0, lo) of the segment
    std::size_t hi;  // ... and after it: [hi, size)
    [[nodiscard]] std::size_t gain() const { return hi - lo; }
  };
  void cut(const hole& h, std::vector<std::byte>& stash);
  void split_at(const hole& h, chunk_handle head_chunk, chunk_handle tail_chunk);

  context& ctx_;
  address_space& space_;
  block_pool& pool_;
  segment_table& segments_;
};

}  // namespace sublinear::allocator::detail
