#include "policy/packs.hpp"

#include <algorithm>
#include <tuple>

#include "policy/simulator.hpp"

namespace sublinear::policy {

bool packs_apply(const iteration& it) { return it.granularity >= 2 * unplanned_rounding; }

std::size_t packed_footprint(const iteration& it, std::vector<buffer_id> buffers) {
  const std::size_t page = std::max<std::size_t>(it.granularity, 1);
  std::sort(buffers.begin(), buffers.end(), [&](buffer_id a, buffer_id b) {
    return std::tie(it.buffers[a].stream, it.buffers[a].alloc_index) <
           std::tie(it.buffers[b].stream, it.buffers[b].alloc_index);
  });
  std::size_t total = 0, open = 0;  // `open`: bytes in the pack being filled
  std::uint32_t open_stream = none;
  for (buffer_id x : buffers) {
    const std::size_t bytes = round_up(it.buffers[x].size, unplanned_rounding);
    if (bytes * 2 > page || it.buffers[x].alloc_index == none) {
      total += round_up(it.buffers[x].size, page);
      continue;
    }
    if (open > 0 && (open + bytes > page || it.buffers[x].stream != open_stream)) {
      total += page;
      open = 0;
    }
    open += bytes;
    open_stream = it.buffers[x].stream;
  }
  return total + (open > 0 ? page : 0);
}

void add_packs(const iteration& it, plan& p) {
  std::erase_if(p.packs, [](const pack& pk) { return !pk.offloaded; });  // offloaded packs are the search's
  const std::size_t page = it.granularity;
  if (p.evictions.empty() || !packs_apply(it)) return;
  // Each evicted buffer's group: the entry whose recipe first regenerates it.
  std::vector<std::size_t> order(p.evictions.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return p.evictions[a].restore_before != p.evictions[b].restore_before
               ? p.evictions[a].restore_before < p.evictions[b].restore_before
               : a < b;
  });
  std::vector<std::uint32_t> group(it.buffers.size(), none);
  for (std::size_t k : order) {
    const eviction& ev = p.evictions[k];
    if (ev.recipe.empty() && ev.also_regenerates.empty()) continue;  // claimed by a carrier
    const auto claim = [&](buffer_id x) {
      if (x < group.size() && group[x] == none) group[x] = static_cast<std::uint32_t>(k);
    };
    claim(ev.target);
    for (buffer_id x : ev.also_regenerates) claim(x);
  }
  // (group, stream, alloc_index, buffer): a pack's members share the stream that allocates
  // them, since the allocator maps a pack for one stream.
  std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, buffer_id>> small;
  for (buffer_id x = 0; x < group.size(); ++x) {
    if (group[x] == none) continue;
    const buffer& b = it.buffers[x];
    if (b.alloc_index == none || round_up(b.size, unplanned_rounding) * 2 > page) continue;
    small.emplace_back(group[x], b.stream, b.alloc_index, x);
  }
  std::sort(small.begin(), small.end());
  pack current;
  std::uint32_t current_group = none, current_stream = none;
  const auto close = [&] {
    if (current.members.size() > 1) p.packs.push_back(std::move(current));
    current = pack{};
  };
  for (const auto& [g, stream, index, x] : small) {
    const std::size_t bytes = round_up(it.buffers[x].size, unplanned_rounding);
    if (g != current_group || stream != current_stream || current.bytes + bytes > page) {
      close();
      current_group = g;
      current_stream = stream;
    }
    current.members.push_back(x);
    current.offsets.push_back(current.bytes);
    current.bytes += bytes;
  }
  close();
}

}  // namespace sublinear::policy
