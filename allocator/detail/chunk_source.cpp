#include "allocator/detail/chunk_source.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "common/text.hpp"

namespace sublinear::allocator::detail {

chunk_source::chunk_source(context& ctx, address_space& space) : ctx_(ctx), space_(space) {}

vmm_status chunk_source::map(char* base, std::size_t size, chunk_handle& handle) {
  settle(true, base, size);  // an old mapping of a handed-off chunk here
  vmm& device = ctx_.device;
  stats& st = ctx_.st;
  chunk_handle chunk = 0;
  bool pooled = false;
  bool handed = false;
  vmm_status s = vmm_status::ok;
  if (handoff_ && handoff_->size == size) {
    chunk = handoff_->chunk;  // already counted in mapped, like a pooled chunk
    handoff_.reset();
    handed = true;
  } else if (auto it = pool_.find(size); it != pool_.end()) {
    chunk = it->second;
    pool_.erase(it);
    st.pooled -= size;
    pooled = true;
  } else {
    s = device.create_chunk(size, &chunk);
    ++st.create_calls;
    if (s != vmm_status::ok) return s;
  }
  // A chunk that cannot be mapped is given back; a pooled one stays counted until then.
  auto give_back = [&] {
    if (handed) {  // still mapped at its old address: released once that is unmapped
      mark_orphan(chunk);
      return;
    }
    device.release_chunk(chunk);
    ++st.release_calls;
    if (pooled) ctx_.note_mapped(-static_cast<std::ptrdiff_t>(size));
  };
  s = device.map(base, size, chunk);
  ++st.map_calls;
  if (s != vmm_status::ok) {
    give_back();
    return s;
  }
  s = device.set_access(base, size);
  ++st.set_access_calls;
  if (s != vmm_status::ok) {
    device.unmap(base, size);
    ++st.unmap_calls;
    give_back();
    return s;
  }
  handle = chunk;
  if (handed) {
    // counted in mapped since its first mapping, and in handoffs when it was handed over
  } else if (pooled) {
    ++st.pool_reuses;  // already counted in mapped
  } else {
    ctx_.note_mapped(static_cast<std::ptrdiff_t>(size));
  }
  return vmm_status::ok;
}

void chunk_source::unmap(std::span<const vmm_range> ranges) {
  std::size_t bytes = 0;
  for (const vmm_range& r : ranges) bytes += r.size;
  const vmm_status s = ctx_.device.unmap_ranges(ranges);
  ctx_.st.unmap_calls += ranges.size();
  if (s != vmm_status::ok)
    throw ctx_.device_failure("unmapping " + format_bytes(bytes) + " in " + std::to_string(ranges.size()) + " ranges", s);
}

vmm_status chunk_source::retire(chunk_handle chunk, std::size_t size, bool keep) {
  // Its old mapping's last use ran before this one's: no real wait, and the chunk must
  // have no other mapping before it is pooled or released.
  settle(true, nullptr, 0, chunk);
  stats& st = ctx_.st;
  if (keep) {
    pool_.emplace(size, chunk);
    st.pooled += size;
    st.pooled_peak = std::max(st.pooled_peak, st.pooled);
    return vmm_status::ok;
  }
  const vmm_status r = ctx_.device.release_chunk(chunk);
  ++st.release_calls;
  ctx_.note_mapped(-static_cast<std::ptrdiff_t>(size));
  return r;
}

bool chunk_source::pooled(std::size_t size) const { return size != 0 && pool_.find(size) != pool_.end(); }

bool chunk_source::ready(std::size_t bytes) const {
  return (handoff_ && handoff_->size == bytes) || pooled(bytes) || ctx_.fits(bytes);
}

void chunk_source::release_pooled(pool_map::iterator it) {
  const std::size_t size = it->first;
  vmm_status r = ctx_.device.release_chunk(it->second);
  ++ctx_.st.release_calls;
  pool_.erase(it);
  ctx_.st.pooled -= size;
  ctx_.note_mapped(-static_cast<std::ptrdiff_t>(size));
  if (r != vmm_status::ok) throw ctx_.device_failure("releasing a pooled chunk of " + format_bytes(size), r);
}

void chunk_source::trim(std::size_t bytes, std::size_t keep_size) { trim_pool(bytes, keep_size, false); }

void chunk_source::empty_pool() { trim_pool(0, 0, true); }

void chunk_source::trim_pool(std::size_t bytes, std::size_t keep_size, bool all) {
  for (auto it = pool_.end(); it != pool_.begin() && (all || !ctx_.fits(bytes));) {
    --it;
    if (it->first == keep_size && !all) continue;
    auto victim = it++;
    release_pooled(victim);
    ++ctx_.st.pool_trims;
  }
  while (!pool_.empty() && (all || !ctx_.fits(bytes))) {
    auto it = pool_.find(keep_size);
    if (it == pool_.end()) break;
    release_pooled(it);
    ++ctx_.st.pool_trims;
  }
}

void chunk_source::hand_over(char* base, std::size_t size, chunk_handle chunk, std::vector<event_handle> events,
                             bool give_range, stream_handle stream) {
  old_mappings_.push_back({base, size, chunk, std::move(events), give_range, false});
  handoff_ = handed_chunk{size, chunk, stream};
  ++ctx_.st.handoffs;
}

void chunk_source::keep_handoff_for(std::size_t bytes, std::optional<stream_handle> stream) {
  if (handoff_ && (handoff_->size != bytes || !stream || handoff_->stream != *stream)) orphan_handoff();
}

void chunk_source::mark_orphan(chunk_handle chunk) {
  for (old_mapping& m : old_mappings_) {
    if (m.chunk == chunk) m.orphan = true;
  }
}

void chunk_source::orphan_handoff() {
  if (!handoff_) return;
  mark_orphan(handoff_->chunk);
  handoff_.reset();
}

bool chunk_source::has_orphans() const {
  return std::any_of(old_mappings_.begin(), old_mappings_.end(), [](const old_mapping& m) { return m.orphan; });
}

void chunk_source::poll() {
  // Old mappings hold no memory of their own (their chunks are counted where they are
  // mapped now), only address space: settled in batches, oldest first, which keeps the
  // event queries off every allocation's path.
  if (old_mappings_.size() >= kSettleBatch) settle(false, nullptr, 0, std::nullopt, true);
}

void chunk_source::settle_completed() { settle(false); }

void chunk_source::settle_all() { settle(true); }

void chunk_source::settle(bool wait, const char* lo, std::size_t bytes, std::optional<chunk_handle> chunk,
                          bool in_order) {
  if (old_mappings_.empty()) return;
  stream_events& events = ctx_.events;
  std::vector<old_mapping> done;
  for (auto it = old_mappings_.begin(); it != old_mappings_.end();) {
    const bool in_range = (lo == nullptr || (it->base < lo + bytes && lo < it->base + it->size)) &&
                          (!chunk || it->chunk == *chunk);
    bool complete = in_range;
    for (event_handle e : it->events) {
      if (!complete) break;
      if (wait) {
        events.synchronize(e);
      } else {
        complete = events.query(e);
      }
    }
    if (!complete) {
      if (in_order) break;
      ++it;
      continue;
    }
    for (event_handle e : it->events) events.release(e);
    it->events.clear();
    done.push_back(std::move(*it));
    it = old_mappings_.erase(it);
  }
  if (done.empty()) return;
  std::vector<vmm_range> ranges;
  ranges.reserve(done.size());
  for (const old_mapping& m : done) ranges.push_back({m.base, m.size});
  const vmm_status s = ctx_.device.unmap_ranges(ranges);
  ctx_.st.unmap_calls += done.size();
  if (s != vmm_status::ok)
    throw ctx_.device_failure("unmapping the old addresses of " + std::to_string(done.size()) + " handed-off chunks", s);
  for (const old_mapping& m : done) {
    if (m.give_range) space_.give(m.base, m.size);
    if (m.orphan) {
      const vmm_status r = ctx_.device.release_chunk(m.chunk);
      ++ctx_.st.release_calls;
      ctx_.note_mapped(-static_cast<std::ptrdiff_t>(m.size));
      if (r != vmm_status::ok) throw ctx_.device_failure("releasing a chunk of " + format_bytes(m.size), r);
    }
  }
}

void chunk_source::shutdown_old_mappings() noexcept {
  orphan_handoff();
  for (old_mapping& m : old_mappings_) {
    for (event_handle e : m.events) {
      ctx_.events.synchronize(e);
      ctx_.events.release(e);
    }
    ctx_.device.unmap(m.base, m.size);
    if (m.orphan) ctx_.device.release_chunk(m.chunk);
  }
  old_mappings_.clear();
}

void chunk_source::shutdown_pool() noexcept {
  for (auto& [size, chunk] : pool_) ctx_.device.release_chunk(chunk);
}

std::size_t chunk_source::pooled_bytes() const {
  std::size_t pooled = 0;
  for (const auto& [size, chunk] : pool_) pooled += size;
  return pooled;
}

std::size_t chunk_source::orphaned_bytes() const {
  std::size_t bytes = 0;
  for (const old_mapping& m : old_mappings_) {
    if (m.orphan) bytes += m.size;
  }
  return bytes;
}

}  // namespace sublinear::allocator::detail
