#include "allocator/detail/block_pool.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "common/round_up.hpp"

namespace sublinear::allocator::detail {

block_pool::block_pool(context& ctx) : ctx_(ctx) {}

block_pool::~block_pool() {
  for (block* b : spare_) delete b;
}

// ---- size classes ---------------------------------------------------------------------

std::size_t block_pool::round_size(std::size_t size) const {
  return round_up(std::max(size, ctx_.opts.min_block), ctx_.opts.min_block);
}

std::size_t block_pool::segment_size(std::size_t rounded) const {
  const options& opts = ctx_.opts;
  if (rounded <= opts.small_size)
    return opts.exact_small_segments ? round_up(rounded, ctx_.granularity) : opts.small_segment;
  if (rounded < opts.min_large_alloc) return opts.large_segment;
  return round_up(rounded, opts.round_large);
}

bool block_pool::should_split(const block& b, std::size_t size) const {
  std::size_t remaining = b.size - size;
  if (b.seg->kind == pool_kind::small) return remaining >= ctx_.opts.min_block;
  if (b.seg->kind == pool_kind::large) return remaining > ctx_.opts.small_size;
  return false;  // dedicated segments are never split (Note [Evictable blocks])
}

// ---- block objects --------------------------------------------------------------------

block* block_pool::make() {
  if (spare_.empty()) return new block;
  block* b = spare_.back();
  spare_.pop_back();
  return b;
}

void block_pool::recycle(block* b) {
  b->stream_uses.clear();
  b->prev = b->next = nullptr;
  b->allocated = b->in_free_set = b->filler = false;
  b->state = residency::resident;
  spare_.push_back(b);
}

// ---- free sets ------------------------------------------------------------------------

block_pool::stream_pool& block_pool::pool_for(stream_handle stream) {
  if (last_pool_ != nullptr && last_pool_->stream == stream) return *last_pool_;
  for (auto& p : pools_) {
    if (p->stream == stream) return *(last_pool_ = p.get());
  }
  pools_.push_back(std::make_unique<stream_pool>());
  pools_.back()->stream = stream;
  return *(last_pool_ = pools_.back().get());
}

free_set& block_pool::free_blocks(stream_handle stream, pool_kind kind) { return pool_for(stream).of(kind); }

void block_pool::insert_free(block* b) {
  b->allocated = false;
  b->in_free_set = true;
  pool_for(b->seg->stream).of(b->seg->kind).insert(*b);
}

void block_pool::erase_free(block* b) {
  pool_for(b->seg->stream).of(b->seg->kind).erase(free_set::s_iterator_to(*b));
  b->in_free_set = false;
}

// Best fit, except that with exact_small_segments a wholly free segment larger than the
// request's own pages is split only when no partly used segment has room (among the next
// 32 candidates in size order). set.end(): make a new segment.
free_set::iterator block_pool::small_fit(free_set& set, std::size_t rounded) {
  auto best = set.lower_bound(by_size_key::type{rounded, nullptr});
  if (!ctx_.opts.exact_small_segments || best == set.end()) return best;
  const std::size_t own = round_up(rounded, ctx_.granularity);
  const auto whole_and_larger = [&](const block& b) { return b.prev == nullptr && b.next == nullptr && b.size > own; };
  if (!whole_and_larger(*best)) return best;
  auto it = best;
  for (int looked = 0; it != set.end() && looked < 32; ++it, ++looked) {
    if (!whole_and_larger(*it)) return it;
  }
  return best;
}

block* block_pool::take_fit(stream_handle stream, pool_kind kind, std::size_t rounded) {
  free_set& set = free_blocks(stream, kind);
  auto it = kind == pool_kind::small ? small_fit(set, rounded) : set.lower_bound(by_size_key::type{rounded, nullptr});
  if (it == set.end()) return nullptr;
  block* b = &*it;
  erase_free(b);
  return b;
}

block* block_pool::take_at_least(stream_handle stream, pool_kind kind, std::size_t rounded) {
  free_set& set = free_blocks(stream, kind);
  auto it = set.lower_bound(by_size_key::type{rounded, nullptr});
  if (it == set.end()) return nullptr;
  block* b = &*it;
  erase_free(b);
  return b;
}

block* block_pool::take_exact(stream_handle stream, pool_kind kind, std::size_t bytes) {
  free_set& set = free_blocks(stream, kind);
  auto it = set.lower_bound(by_size_key::type{bytes, nullptr});
  if (it == set.end() || it->size != bytes) return nullptr;
  block* b = &*it;
  erase_free(b);
  return b;
}

void block_pool::split(block* b, std::size_t size) {
  block* rest = make();
  rest->ptr = b->ptr + size;
  rest->size = b->size - size;
  rest->seg = b->seg;
  rest->stream = b->stream;
  rest->prev = b;
  rest->next = b->next;
  if (b->next != nullptr) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  insert_free(rest);
}

block* block_pool::merge(block* b) {
  if (block* n = b->next; n != nullptr && n->in_free_set) {
    erase_free(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    recycle(n);
  }
  if (block* p = b->prev; p != nullptr && p->in_free_set) {
    erase_free(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    recycle(b);
    b = p;
  }
  return b;
}

std::size_t block_pool::largest_free() const {
  std::size_t largest = 0;
  for_each_free_set([&](const free_set& s) {
    if (!s.empty()) largest = std::max(largest, s.rbegin()->size);
  });
  return largest;
}

// ---- live blocks ----------------------------------------------------------------------

block* block_pool::live_at(const void* ptr) {
  auto it = live_.find(static_cast<const char*>(ptr));
  return it == live_.end() ? nullptr : &*it;
}

const block* block_pool::live_containing(const void* address) const {
  auto it = live_.upper_bound(static_cast<const char*>(address));
  if (it == live_.begin()) return nullptr;
  const block& b = *std::prev(it);
  if (static_cast<const char*>(address) >= b.ptr + b.size) return nullptr;
  return &b;
}

block* block_pool::live_containing(const void* address) {
  return const_cast<block*>(std::as_const(*this).live_containing(address));
}

void block_pool::clear() noexcept {
  live_.clear();
  for (auto& pool : pools_) {
    pool->small.clear();
    pool->large.clear();
    pool->dedicated.clear();
  }
}

}  // namespace sublinear::allocator::detail
