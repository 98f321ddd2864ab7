// Note [Retention] (retention.hpp).
#include "policy/retention.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace sublinear::policy {

std::vector<retention> retention_options(const candidate_set& cs) {
  const iteration& it = cs.graph();
  std::map<buffer_id, launch_id> until;
  for (const candidate& c : cs.all()) {
    for (launch_id w : it.buffers[c.buffer].users) {
      if (w > c.evict_after) break;
      const launch& l = it.launches[w];
      if (!std::binary_search(l.written.begin(), l.written.end(), c.buffer)) continue;
      for (buffer_id b : l.touched) {
        if (std::binary_search(l.written.begin(), l.written.end(), b)) continue;
        const buffer& in = it.buffers[b];
        if (in.persistent() || in.never_evict || in.free_at > cs.turning_point()) continue;
        if (2 * in.size > c.unplanned_bytes) continue;
        launch_id& u = until[b];
        u = std::max<launch_id>(u, c.restore_before + 1);
      }
    }
  }
  std::vector<retention> out;
  out.reserve(until.size());
  for (const auto& [b, u] : until) out.push_back({b, u});
  return out;
}

std::string check_retentions(const iteration& it, std::span<const retention> r) {
  std::vector<std::uint8_t> seen(it.buffers.size(), 0);
  for (const retention& x : r) {
    const std::string who = "retention of buffer " + std::to_string(x.buffer);
    if (x.buffer >= it.buffers.size()) return who + ": no such buffer";
    const buffer& b = it.buffers[x.buffer];
    if (b.persistent()) return who + ": the buffer is not freed within the iteration";
    if (seen[x.buffer]++ != 0) return who + ": retained twice";
    if (x.release_before <= b.free_at || x.release_before > it.launches.size())
      return who + ": release_before must be after its free and at most the number of launches";
  }
  return {};
}

iteration with_retentions(const iteration& it, std::span<const retention> r) {
  if (const std::string problem = check_retentions(it, r); !problem.empty()) throw std::invalid_argument(problem);
  iteration out = it;
  for (const retention& x : r) out.buffers[x.buffer].free_at = x.release_before;
  return out;
}

void trim_retentions(plan& p, const iteration& it) {
  if (p.retentions.empty()) return;
  // Per retained buffer: the release the plan was made with, and the last restore point
  // before it whose recipe touches the buffer. A recipe at or after that release found the
  // buffer freed and rebuilds it in scratch: it does not read the retained copy, and
  // counting it would keep the buffer longer than the plan was costed for (the likely
  // cause of a DenseNet plan 80 KiB over its budget, seen once under ASan's timings).
  struct span {
    launch_id release = none;
    launch_id last = none;
  };
  std::map<buffer_id, span> spans;
  for (const retention& x : p.retentions) spans[x.buffer].release = x.release_before;
  for (const eviction& e : p.evictions) {
    for (launch_id l : e.recipe) {
      for (buffer_id b : it.launches[l].touched) {
        auto found = spans.find(b);
        if (found == spans.end() || e.restore_before >= found->second.release) continue;
        launch_id& last = found->second.last;
        if (last == none || last < e.restore_before) last = e.restore_before;
      }
    }
  }
  std::vector<retention> kept;
  for (const auto& [b, s] : spans)
    if (s.last != none && s.last >= it.buffers[b].free_at) kept.push_back({b, s.last + 1});  // else alive at s.last anyway
  p.retentions = std::move(kept);
}

}  // namespace sublinear::policy
