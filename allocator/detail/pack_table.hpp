// Packs: several small evictable blocks sharing one dedicated segment, each at an offset
// the caller plans, the pages given back once no member is resident.
//
// Note [Pack segments]
// Rationale: an evictable block owns whole pages (Note [Evictable blocks]), and many
//   activations the replay engine evicts are far smaller than a page: a 16 KiB block on
//   the host device's 64 KiB pages holds four times its size mapped while resident.
// Approach: a *pack* is a dedicated segment of round_up(bytes, granularity) (a free one of
//   that size on the stream, else a new one) shared by several evictable blocks, its
//   members, each at the offset the caller plans (allocate_in_pack, or the observer's
//   pack_slot_for). It is named by a nonzero key. Members and filler blocks tile it; a
//   filler is never free, and a member's range is not used again while the pack lives.
//   The pages stay mapped while any member is resident. evict() of a member records its
//   last-use events (the latest per stream) and marks it evicting; once none is resident
//   the unmap is queued here and waits for every member's events (Note [Deferred unmap]),
//   after which every member is evicted. A freed member leaves the pack once the work of
//   its other streams has completed, as for any free. restore() of a member cancels a
//   queued unmap, or maps the segment again under the budget (handoff and pool included),
//   the other members then evicting (pages there, contents undefined); a new member in a
//   pack whose pages are gone maps them the same way. When the last member is freed the
//   pack ends: a mapped segment becomes one free dedicated block, an unmapped one is
//   released, and the key may name a new pack. Through the observer, an inconsistent
//   slot gets pages of its own instead (stats::pack_refusals).
// Limitations: the caller plans offsets; nothing compacts a pack or reuses a freed
//   member's range. A pending pack unmap is never handed off (Note [Stream-ordered
//   handoff]): a mapping waits for it. One long-lived member keeps all the pages mapped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "allocator/allocation_observer.hpp"
#include "allocator/detail/block_pool.hpp"
#include "allocator/detail/blocks.hpp"
#include "allocator/detail/budget_ladder.hpp"
#include "allocator/detail/context.hpp"
#include "allocator/detail/segment_table.hpp"

namespace sublinear::allocator::detail {

class pack_table {
 public:
  pack_table(context& ctx, block_pool& pool, segment_table& segments, budget_ladder& ladder);
  pack_table(const pack_table&) = delete;
  pack_table& operator=(const pack_table&) = delete;

  // Places a member of `size` bytes at `slot` (opening the pack, or mapping its pages
  // again) and returns its block, to be handed out. Throws config_error for an
  // inconsistent slot (nothing changed), out_of_memory if the budget cannot be met.
  block* place(std::size_t size, stream_handle stream, const pack_slot& slot);
  // A resident member's eviction: its last-use events recorded, the unmap queued once
  // no member is resident.
  void evict(block* member);
  // A member no longer resident: the queued unmap cancelled, or the pages mapped again.
  void restore(block* member, std::optional<stream_handle> stream);
  // A member no longer in use (freed, its other streams' work done) becomes a filler;
  // the pack ends with its last member.
  void leave(block* member);

  // ---- the queue of pack unmaps (Note [Deferred unmap]) --------------------------------
  [[nodiscard]] bool unmaps_queued() const noexcept { return !unmaps_.empty(); }
  // Takes, in queue order, the packs whose unmap is due: every member's events complete
  // (waited for with `wait`). Drops cancelled entries. The caller unmaps the segments,
  // then calls unmapped() for each.
  void take_due_unmaps(bool wait, std::vector<segment*>& out);
  // The pack's pages are gone: its members are evicted.
  void unmapped(segment* seg);

  // Live packs by key, for the validator.
  [[nodiscard]] const std::map<std::uint64_t, segment*>& all() const noexcept { return packs_; }

 private:
  struct queued_unmap {
    std::uint64_t key = 0;
    std::uint64_t id = 0;  // the pack's unmap_id when queued
  };
  segment* queued(const queued_unmap& q) const;
  bool events_complete(const pack_info& pk, bool wait);
  void release_events(pack_info& pk);
  void add_event(pack_info& pk, stream_handle stream);
  void cancel_unmap(pack_info& pk);
  void settle(segment* seg);
  void end(segment* seg);
  void remapped(segment* seg, const block* except);
  void map(segment* seg, std::size_t requested, std::optional<stream_handle> stream);

  context& ctx_;
  block_pool& pool_;
  segment_table& segments_;
  budget_ladder& ladder_;
  std::map<std::uint64_t, segment*> packs_;  // live packs by key
  std::deque<queued_unmap> unmaps_;
  std::uint64_t next_unmap_id_ = 0;
};

}  // namespace sublinear::allocator::detail
