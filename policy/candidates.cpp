#include "policy/candidates.hpp"

#include <algorithm>
#include <numeric>

#include "policy/simulator.hpp"

namespace sublinear::policy {

namespace {

launch_id find_turning_point(const iteration& it) {
  const std::size_t n = it.launches.size();
  if (n == 0) return 0;
  if (it.turning_point != 0) return std::min<launch_id>(it.turning_point, static_cast<launch_id>(n - 1));
  std::vector<std::int64_t> delta(n + 1, 0);
  for (const buffer& b : it.buffers) {
    const std::size_t lo = std::min<std::size_t>(b.alloc_at, n);
    const std::size_t hi = b.free_at == none ? n : std::min<std::size_t>(b.free_at, n);
    if (lo >= hi) continue;
    delta[lo] += static_cast<std::int64_t>(b.size);
    delta[hi] -= static_cast<std::int64_t>(b.size);
  }
  std::int64_t level = 0;
  std::int64_t best = -1;
  launch_id at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    level += delta[i];
    if (level > best) {
      best = level;
      at = static_cast<launch_id>(i);
    }
  }
  return at;
}

// See candidate_set::lower_bound_bytes(). An evictable buffer must be mapped at its
// allocation, at each use and just before it is freed; anything else while it is alive.
std::size_t lower_bound_of(const iteration& it) {
  const std::size_t n = it.launches.size();
  // (The upper limit only tells GCC's allocation-size analysis that n is sane.)
  if (n == 0 || n > (std::size_t{1} << 40)) return 0;
  const std::size_t g = it.granularity == 0 ? 1 : it.granularity;
  std::vector<std::int64_t> delta(n + 1, 0);
  std::vector<std::int64_t> point(n, 0);
  for (const buffer& buf : it.buffers) {
    const std::size_t lo = std::min<std::size_t>(buf.alloc_at, n);
    const std::size_t hi = buf.free_at == none ? n : std::min<std::size_t>(buf.free_at, n);
    if (lo >= hi) continue;
    const auto sz = static_cast<std::int64_t>(std::min(round_up(buf.size, g), round_up(buf.size, unplanned_rounding)));
    if (buf.persistent() || buf.never_evict) {
      delta[lo] += sz;
      delta[hi] -= sz;
      continue;
    }
    std::size_t last = n;
    auto mark = [&](std::size_t at) {
      if (at < n && at != last) point[at] += sz;
      last = at;
    };
    mark(lo);
    for (launch_id u : buf.users) mark(u);
    mark(hi - 1);
  }
  std::int64_t level = 0;
  std::int64_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    level += delta[i];
    best = std::max(best, level + point[i]);
  }
  return static_cast<std::size_t>(best);
}

}  // namespace

candidate_set::candidate_set(const dataflow& df) : df_(&df) {
  const iteration& it = df.graph();
  const std::size_t n = it.launches.size();
  const std::size_t nb = it.buffers.size();
  const std::size_t g = it.granularity == 0 ? 1 : it.granularity;
  index_.assign(nb, none);
  turning_point_ = find_turning_point(it);
  const launch_id tp = turning_point_;

  std::vector<std::uint8_t> listed;
  if (!it.candidates.empty()) {
    listed.assign(nb, 0);
    for (buffer_id b : it.candidates) {
      if (b < nb) listed[b] = 1;
    }
  }
  recipe_builder builder(df);
  for (buffer_id b = 0; b < nb && n > 0; ++b) {
    const buffer& buf = it.buffers[b];
    if (buf.persistent() || buf.never_evict || buf.users.empty()) continue;
    if (!listed.empty() && listed[b] == 0) continue;
    if (!(buf.alloc_at <= tp && tp < buf.free_at)) continue;
    const auto after = std::upper_bound(buf.users.begin(), buf.users.end(), tp);
    if (after == buf.users.begin() || after == buf.users.end()) continue;
    const launch_id e = *std::prev(after);
    const launch_id r = *after;
    if (r - e < 2) continue;
    const buffer_id target[] = {b};
    recipe_result rr = builder.build(target, r, {}, evicted_inputs::temporary);
    if (!rr.ok) continue;
    candidate c;
    c.buffer = b;
    c.evict_after = e;
    c.restore_before = r;
    const auto ws = df.writers_in(b, buf.alloc_at, r);
    c.produced_at = ws.empty() ? buf.alloc_at : ws.front();
    c.bytes = round_up(buf.size, g);
    c.unplanned_bytes = round_up(buf.size, unplanned_rounding);
    c.cost_s = rr.cost_s;
    c.recipe = std::move(rr.launches);
    c.temporaries = std::move(rr.temporaries);
    // deps are filled below, once every candidate has an index; keep the inputs for now.
    c.deps.assign(rr.inputs.begin(), rr.inputs.end());
    items_.push_back(std::move(c));
  }
  std::sort(items_.begin(), items_.end(), [](const candidate& a, const candidate& b) {
    return a.produced_at != b.produced_at ? a.produced_at < b.produced_at : a.buffer < b.buffer;
  });
  for (std::size_t i = 0; i < items_.size(); ++i) index_[items_[i].buffer] = static_cast<std::uint32_t>(i);
  for (candidate& c : items_) {
    std::vector<std::uint32_t> deps;
    for (std::uint32_t input : c.deps) {
      if (index_[input] != none) deps.push_back(index_[input]);
    }
    std::sort(deps.begin(), deps.end());
    c.deps = std::move(deps);
  }

  lower_bound_ = lower_bound_of(it);
}

// ---- drop_plan_builder -------------------------------------------------------------------

drop_plan_builder::drop_plan_builder(const candidate_set& cs)
    : cs_(&cs), recipes_(cs.flow()), evicted_(cs.flow().buffer_count(), 0),
      regenerate_from_(cs.flow().buffer_count(), none) {}

drop_plan_builder::outcome drop_plan_builder::build(std::span<const std::uint8_t> dropped,
                                                    std::span<const launch_id> horizons) {
  outcome out;
  const candidate_set& cs = *cs_;
  if (!horizons.empty() && horizons.size() != cs.size()) {
    out.error = "the drop set's horizons have " + std::to_string(horizons.size()) + " entries for " +
                std::to_string(cs.size()) + " candidates";
    return out;
  }
  std::vector<std::uint32_t> set;
  for (std::uint32_t i = 0; i < cs.size() && i < dropped.size(); ++i) {
    if (dropped[i] != 0) set.push_back(i);
  }
  out.result.evictions.reserve(set.size());
  if (set.empty()) {
    out.ok = true;
    return out;
  }
  std::vector<std::uint32_t> by_r = set;
  std::sort(by_r.begin(), by_r.end(), [&](std::uint32_t a, std::uint32_t b) {
    return cs[a].restore_before != cs[b].restore_before ? cs[a].restore_before < cs[b].restore_before : a < b;
  });
  std::vector<std::uint32_t> by_e = set;
  std::sort(by_e.begin(), by_e.end(), [&](std::uint32_t a, std::uint32_t b) {
    return cs[a].evict_after != cs[b].evict_after ? cs[a].evict_after < cs[b].evict_after : a < b;
  });
  std::vector<std::uint8_t> regenerated(cs.size(), 0);
  const bool held = !horizons.empty();
  if (held) {
    for (std::uint32_t c : set) regenerate_from_[cs[c].buffer] = horizons[c];
  }
  std::vector<buffer_id> targets;
  std::size_t next_e = 0;
  for (std::size_t pos = 0; pos < by_r.size();) {
    const launch_id t = cs[by_r[pos]].restore_before;
    while (next_e < by_e.size() && cs[by_e[next_e]].evict_after < t) {
      const std::uint32_t c = by_e[next_e++];
      if (regenerated[c] == 0) evicted_[cs[c].buffer] = 1;
    }
    targets.clear();
    for (; pos < by_r.size() && cs[by_r[pos]].restore_before == t; ++pos) {
      if (regenerated[by_r[pos]] == 0) targets.push_back(cs[by_r[pos]].buffer);
    }
    if (targets.empty()) continue;
    recipe_result rr = recipes_.build(targets, t, evicted_, evicted_inputs::regenerate,
                                      held ? std::span<const launch_id>(regenerate_from_) : std::span<const launch_id>());
    if (!rr.ok) {
      out.error = "dropping buffer " + std::to_string(targets.front()) + ": " + rr.error;
      for (buffer_id x : targets) out.refused.push_back(cs.index_of(x));
      break;
    }
    for (buffer_id x : rr.regenerated) {
      regenerated[cs.index_of(x)] = 1;
      evicted_[x] = 0;
    }
    const candidate& lead = cs[cs.index_of(targets.front())];
    eviction carrier;
    carrier.target = lead.buffer;
    carrier.evict_after = lead.evict_after;
    carrier.restore_before = t;
    carrier.recipe = std::move(rr.launches);
    carrier.temporaries = std::move(rr.temporaries);
    carrier.also_regenerates.assign(rr.regenerated.begin() + 1, rr.regenerated.end());
    out.result.evictions.push_back(std::move(carrier));
    for (std::size_t k = 1; k < rr.regenerated.size(); ++k) {
      const candidate& c = cs[cs.index_of(rr.regenerated[k])];
      eviction own;
      own.target = c.buffer;
      own.evict_after = c.evict_after;
      own.restore_before = c.restore_before;
      out.result.evictions.push_back(std::move(own));
    }
  }
  for (std::uint32_t c : set) {
    evicted_[cs[c].buffer] = 0;
    regenerate_from_[cs[c].buffer] = none;
  }
  if (out.error.empty()) out.ok = true;
  return out;
}

}  // namespace sublinear::policy
