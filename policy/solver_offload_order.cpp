// Note [Copies out by deadline]
// Rationale: a copy to host is queued right after its buffer's last use and each
//   direction of the link is first in, first out, so a buffer produced early but needed
//   out late goes ahead of later ones needed out sooner, and the release that waits for
//   those stalls the stream (ResNet-152 at 0.205x over 50 GB/s stalled several ms so:
//   docs/offload.md, "Copies out by deadline").
// Approach: on the traced launch times (recipes included, no stalls, as placement uses),
//   the copies to host are scheduled earliest deadline first: each is ready when its
//   buffer's last use before the gap ends and due when its release_before starts; the
//   link takes, whenever it is free, the ready copy due first. Each copy is then queued
//   after the later of its last use and the queue point of the copy before it in that
//   order: evict_after moves later, nothing else changes, and the first-in, first-out
//   queue carries the copies in deadline order at the times the schedule gives (no copy
//   starts later than there). A later evict_after only shortens the host slot.
// Limitations: applied to each search's finished plan and kept where the simulated plan
//   adds less time (the search itself places copies in order of last use: ordering them
//   by deadline inside the search changed its choices and planned some budgets worse).
//   Non-preemptive earliest deadline first is not always the best order.
#include <algorithm>
#include <queue>
#include <tuple>

#include "policy/offload_packs.hpp"
#include "policy/solvers.hpp"

namespace sublinear::policy {

void launch_clock(const iteration& it, const plan& p, std::vector<double>& ready, std::vector<double>& end) {
  const std::size_t n = it.launches.size();
  std::vector<double> recipe_at(n + 1, 0.0);
  for (const eviction& ev : p.evictions) {
    for (launch_id l : ev.recipe) recipe_at[ev.restore_before] += it.launches[l].cost_s;
  }
  ready.assign(n, 0.0);
  end.assign(n, 0.0);
  double clock = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    clock += recipe_at[i];
    ready[i] = clock;
    clock += it.launches[i].cost_s;
    end[i] = clock;
  }
}

void order_copies_out(const iteration& it, const link_model& link, plan& p, std::span<const launch_id> earliest) {
  const std::size_t m = p.offloads.size();
  if (m < 2 || earliest.size() != m) return;
  std::vector<double> ready, end;
  launch_clock(it, p, ready, end);
  const std::size_t n = it.launches.size();
  const link_copies copies = copies_of(it, p);
  // Per carrier: the last use of any buffer its copy moves, then the deadline order.
  std::vector<launch_id> first(m, 0);
  for (std::size_t j = 0; j < m; ++j) {
    const std::uint32_t c = copies.carrier[j];
    first[c] = std::max(first[c], std::min(earliest[j], p.offloads[j].evict_after));
  }
  std::vector<std::uint32_t> carriers;
  for (std::uint32_t j = 0; j < m; ++j) {
    const offload& o = p.offloads[j];
    if (o.evict_after >= n || o.release_before >= n || o.release_before == 0) return;  // the simulator refuses it
    if (copies.carrier[j] == j) carriers.push_back(j);
  }
  const auto due = [&](std::uint32_t j) {  // the release waits before the recipes there
    const launch_id rel = p.offloads[j].release_before;
    return std::make_tuple(end[rel - 1], rel, j);
  };
  std::sort(carriers.begin(), carriers.end(),
            [&](std::uint32_t a, std::uint32_t b) { return std::tie(first[a], a) < std::tie(first[b], b); });
  const auto later_due = [&](std::uint32_t a, std::uint32_t b) { return due(a) > due(b); };
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, decltype(later_due)> waiting(later_due);
  std::vector<std::uint32_t> order;
  double free_at = 0.0;
  for (std::size_t next = 0; order.size() < carriers.size();) {
    if (waiting.empty()) free_at = std::max(free_at, end[first[carriers[next]]]);
    for (; next < carriers.size() && end[first[carriers[next]]] <= free_at; ++next) waiting.push(carriers[next]);
    const std::uint32_t j = waiting.top();
    waiting.pop();
    order.push_back(j);
    free_at += link.to_host.copy_s(copies.bytes[j]);
  }
  launch_id queued = 0;
  for (std::uint32_t j : order) {
    const launch_id e = std::min<launch_id>(std::max(first[j], queued), p.offloads[j].release_before - 1);
    queued = std::max(queued, e);
    p.offloads[j].evict_after = e;
  }
  for (std::size_t j = 0; j < m; ++j) p.offloads[j].evict_after = p.offloads[copies.carrier[j]].evict_after;
}

void order_copies_out_if_better(planner::context& ctx, std::size_t budget, planner::context::evaluation& e) {
  if (!e.fits(budget) || e.result.offloads.size() < 2 || !(e.sim.predicted_stall_s > 0.0)) return;
  const candidate_set& cs = ctx.candidates();
  std::vector<launch_id> earliest;
  for (const offload& o : e.result.offloads) {
    const std::uint32_t c = cs.index_of(o.target);
    earliest.push_back(c != none ? cs[c].evict_after : o.evict_after);
  }
  plan p = e.result;
  order_copies_out(ctx.graph(), ctx.offload().link, p, earliest);
  simulation s = ctx.sim().run(p);
  if (!s.valid || s.peak > budget || !(s.added_time_s() < e.sim.added_time_s() * (1.0 - 1e-12))) return;
  record(s, p);
  e.result = std::move(p);
  e.sim = std::move(s);
}

}  // namespace sublinear::policy
