// The host pool's layout (Note [Host pool layout] in host_layout.hpp).
#include "policy/host_layout.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "common/round_up.hpp"
#include "policy/offload_packs.hpp"

namespace sublinear::policy {

namespace {

// Whether two offloads' slots are held at some common position (evict_after + 1 ..= restore_before).
bool meet(const offload& a, const offload& b) {
  return a.evict_after < b.restore_before && b.evict_after < a.restore_before;
}

std::size_t slot_bytes(std::size_t size) { return round_up(size, host_slot_alignment); }

// The most slot bytes held at once, and the first position holding it.
std::pair<std::size_t, launch_id> most_held(const std::vector<offload>& offloads,
                                            const std::vector<std::size_t>& sizes) {
  std::vector<std::pair<std::uint64_t, std::int64_t>> delta;  // (position, bytes)
  delta.reserve(2 * offloads.size());
  for (std::size_t j = 0; j < offloads.size(); ++j) {
    const auto bytes = static_cast<std::int64_t>(slot_bytes(sizes[j]));
    delta.emplace_back(std::uint64_t{offloads[j].evict_after} + 1, bytes);
    delta.emplace_back(std::uint64_t{offloads[j].restore_before} + 1, -bytes);
  }
  std::sort(delta.begin(), delta.end());
  std::int64_t level = 0, most = 0;
  launch_id at = 0;
  for (std::size_t k = 0; k < delta.size();) {
    const std::uint64_t position = delta[k].first;
    for (; k < delta.size() && delta[k].first == position; ++k) level += delta[k].second;
    if (level > most) {
      most = level;
      at = static_cast<launch_id>(position);
    }
  }
  return {static_cast<std::size_t>(most), at};
}

}  // namespace

host_layout place_first_fit(const std::vector<offload>& offloads, const std::vector<std::size_t>& sizes,
                            const std::vector<std::uint32_t>& order) {
  host_layout out;
  out.offsets.assign(offloads.size(), 0);
  std::vector<std::uint32_t> by_offset;  // the placed slots, lowest offset first
  by_offset.reserve(order.size());
  for (std::uint32_t j : order) {
    const std::size_t bytes = slot_bytes(sizes[j]);
    std::size_t offset = 0;
    for (std::uint32_t k : by_offset) {
      if (!meet(offloads[j], offloads[k])) continue;
      if (out.offsets[k] >= offset + bytes) break;  // the hole below slot k fits
      offset = std::max(offset, out.offsets[k] + slot_bytes(sizes[k]));
    }
    out.offsets[j] = offset;
    out.pool_bytes = std::max(out.pool_bytes, offset + bytes);
    const auto at = std::upper_bound(by_offset.begin(), by_offset.end(), offset,
                                     [&](std::size_t o, std::uint32_t k) { return o < out.offsets[k]; });
    by_offset.insert(at, j);
  }
  return out;
}

host_layout lay_out_host_pool(const std::vector<offload>& offloads, const std::vector<std::size_t>& sizes) {
  const std::size_t m = offloads.size();
  const auto [most, most_at] = most_held(offloads, sizes);
  std::vector<std::uint32_t> arrival(m);
  std::iota(arrival.begin(), arrival.end(), 0U);
  // Ties keep plan order (stable sorts), so the layout depends on the plan alone.
  std::stable_sort(arrival.begin(), arrival.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return offloads[a].evict_after < offloads[b].evict_after; });
  std::size_t sum = 0;
  for (std::size_t j = 0; j < m; ++j) sum += slot_bytes(sizes[j]);
  host_layout best;
  if (sum == most) {
    // Every slot is held at one position, so they all meet: first fit in any order
    // stacks them; arrival order, without the quadratic search.
    best.offsets.assign(m, 0);
    for (std::uint32_t j : arrival) {
      best.offsets[j] = best.pool_bytes;
      best.pool_bytes += slot_bytes(sizes[j]);
    }
    best.most_held = most;
    best.most_held_at = most_at;
    return best;
  }
  const auto life = [&](std::uint32_t j) { return offloads[j].restore_before - offloads[j].evict_after; };
  std::vector<std::uint32_t> larger = arrival;
  std::stable_sort(larger.begin(), larger.end(), [&](std::uint32_t a, std::uint32_t b) {
    const std::size_t x = slot_bytes(sizes[a]), y = slot_bytes(sizes[b]);
    return x != y ? x > y : life(a) > life(b);
  });
  std::vector<std::uint32_t> longer = arrival;
  std::stable_sort(longer.begin(), longer.end(), [&](std::uint32_t a, std::uint32_t b) {
    const std::size_t x = slot_bytes(sizes[a]), y = slot_bytes(sizes[b]);
    return life(a) != life(b) ? life(a) > life(b) : x > y;
  });
  bool first = true;
  for (const std::vector<std::uint32_t>* order : {&arrival, &larger, &longer}) {
    host_layout l = place_first_fit(offloads, sizes, *order);
    if (first || l.pool_bytes < best.pool_bytes) best = std::move(l);
    first = false;
    if (best.pool_bytes <= most) break;  // no layout does better
  }
  best.most_held = most;
  best.most_held_at = most_at;
  return best;
}

host_layout lay_out_host_pool(const iteration& it, const std::vector<offload>& offloads) {
  std::vector<std::size_t> sizes(offloads.size());
  for (std::size_t j = 0; j < offloads.size(); ++j) sizes[j] = it.buffers[offloads[j].target].size;
  return lay_out_host_pool(offloads, sizes);
}

host_layout lay_out_host_pool(const iteration& it, const plan& p) {
  const link_copies moved = copies_of(it, p);
  std::vector<offload> carriers;
  std::vector<std::size_t> sizes;
  std::vector<std::uint32_t> slot_of(p.offloads.size(), none);
  for (std::size_t j = 0; j < p.offloads.size(); ++j) {
    if (moved.carrier[j] != j) continue;
    slot_of[j] = static_cast<std::uint32_t>(carriers.size());
    carriers.push_back(p.offloads[j]);
    sizes.push_back(moved.bytes[j]);
  }
  host_layout carried = lay_out_host_pool(carriers, sizes);
  host_layout out = carried;
  out.offsets.assign(p.offloads.size(), 0);
  for (std::size_t j = 0; j < p.offloads.size(); ++j)
    out.offsets[j] = carried.offsets[slot_of[moved.carrier[j]]] + moved.offset[j];
  return out;
}

}  // namespace sublinear::policy
