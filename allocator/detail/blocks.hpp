// The caching allocator's data, shared by its components (a type map; the Notes are with
// the components that keep each piece):
//
//   segment   : a granularity-aligned piece of the reserved range backed by one chunk
//               (Note [Segments and blocks], segment_table)
//   block     : a piece of a segment: allocated, free (in a free set), pending-free, or a
//               pack's filler (block_pool)
//   pack_info : what makes a dedicated segment a pack (Note [Pack segments], pack_table)
//   free_set  : free blocks of one stream and size class by (size, address) (block_pool)
//   live_set  : allocated blocks by address (block_pool)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <boost/intrusive/set.hpp>

#include "allocator/allocation_observer.hpp"
#include "allocator/caching_allocator.hpp"
#include "allocator/device_types.hpp"

namespace sublinear::allocator::detail {

namespace bi = boost::intrusive;

enum class pool_kind : std::uint8_t { small, large, dedicated };

struct block;

// What makes a dedicated segment a pack (Note [Pack segments]).
struct pack_info {
  std::uint64_t key = 0;
  std::size_t bytes = 0;  // as the pack was made (before rounding)
  // Member ranges ever used, [offset, offset + size): never used again in this pack.
  std::vector<std::pair<std::size_t, std::size_t>> used;
  // The last uses of members no longer resident (evicting or freed): the latest event per
  // stream, since a later event on a stream completes after every earlier one there.
  std::vector<std::pair<stream_handle, event_handle>> events;
  std::uint64_t unmap_id = 0;  // nonzero: the unmap is queued in pack_table under this id
  bool pinned = false;         // being mapped: the pack must not end under the caller
};

struct segment {
  char* base = nullptr;
  std::size_t size = 0;
  chunk_handle handle = 0;
  bool mapped = false;
  pool_kind kind = pool_kind::small;
  stream_handle stream = nullptr;
  block* first = nullptr;
  // Recorded on `stream` when the segment last became wholly free under a budget: once it
  // has completed the pages can be given back without waiting for the whole stream.
  event_handle free_event = nullptr;
  bool has_free_event = false;
  std::unique_ptr<pack_info> pack;  // set while the segment is a pack (kind dedicated)
};

using set_hook = bi::set_member_hook<bi::link_mode<bi::safe_link>>;

struct block {
  set_hook hook;  // in a free set when free, in the live set when allocated; never both
  char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t requested = 0;
  segment* seg = nullptr;
  block* prev = nullptr;  // address neighbours inside the segment
  block* next = nullptr;
  stream_handle stream = nullptr;
  bool allocated = false;
  bool in_free_set = false;
  bool filler = false;  // an unused piece of a pack (Note [Pack segments]): never allocated, never free
  residency state = residency::resident;
  std::uint64_t eviction_generation = 0;  // bumped to cancel a pending eviction
  std::vector<stream_handle> stream_uses;
};

struct by_size_key {
  using type = std::pair<std::size_t, const char*>;
  type operator()(const block& b) const { return {b.size, b.ptr}; }
};
struct by_address_key {
  using type = const char*;
  type operator()(const block& b) const { return b.ptr; }
};

using free_set = bi::set<block, bi::member_hook<block, set_hook, &block::hook>, bi::key_of_value<by_size_key>>;
using live_set = bi::set<block, bi::member_hook<block, set_hook, &block::hook>, bi::key_of_value<by_address_key>>;

// An evicting block's pages are gone from it (unmapped, or handed to another mapping).
// A block freed while its eviction was pending (waiting for another stream) is evicted
// but no longer allocated: its bytes are not counted as evicted memory.
inline void note_evicted(block& b, stats& st) {
  b.state = residency::evicted;
  if (!b.allocated) return;
  st.evicted += b.size;
  st.evicted_total += b.size;
  ++st.evictions;
}

}  // namespace sublinear::allocator::detail
