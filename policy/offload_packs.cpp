#include "policy/offload_packs.hpp"

#include <algorithm>

namespace sublinear::policy {

link_copies copies_of(const iteration& it, const plan& p) {
  const std::size_t m = p.offloads.size();
  link_copies out;
  out.carrier.resize(m);
  out.bytes.assign(m, 0);
  out.offset.assign(m, 0);
  for (std::size_t j = 0; j < m; ++j) {
    out.carrier[j] = static_cast<std::uint32_t>(j);
    const buffer_id b = p.offloads[j].target;
    if (b < it.buffers.size()) out.bytes[j] = it.buffers[b].size;
  }
  // The simulator calls this for every plan a search tries: no per-buffer table unless
  // some pack is offloaded.
  if (std::none_of(p.packs.begin(), p.packs.end(), [](const pack& pk) { return pk.offloaded; })) return out;
  std::vector<std::uint32_t> entry_of(it.buffers.size(), none);
  for (std::size_t j = 0; j < m; ++j)
    if (p.offloads[j].target < it.buffers.size()) entry_of[p.offloads[j].target] = static_cast<std::uint32_t>(j);
  for (const pack& pk : p.packs) {
    if (!pk.offloaded || pk.members.empty() || pk.offsets.size() != pk.members.size()) continue;
    bool all = true;
    for (buffer_id x : pk.members) all = all && x < entry_of.size() && entry_of[x] != none;
    if (!all) continue;
    const std::uint32_t first = entry_of[pk.members.front()];
    for (std::size_t i = 0; i < pk.members.size(); ++i) {
      const std::uint32_t j = entry_of[pk.members[i]];
      out.carrier[j] = first;
      out.bytes[j] = 0;
      out.offset[j] = pk.offsets[i] - pk.offsets.front();
    }
    out.bytes[first] = pk.bytes - pk.offsets.front();
  }
  return out;
}

}  // namespace sublinear::policy
