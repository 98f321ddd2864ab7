// Where a plan's offloads sit on the link: each offload's four points (placement), the
// fetches recipes need early, and the copies to host in deadline order.
//
// Note [Offload placement]
// Rationale: an offload frees memory only between release_before and fetch_after; the
//   earlier it releases and the later it fetches, the more it frees, but a release before
//   the device->host copy is done, or a fetch too late to hide the host->device copy,
//   stalls the compute stream. The placement takes the windows the link can hide, widened
//   where the planner needs the bytes out.
// Approach: launch times come from the plan's launches and recipes without stalls. The
//   device->host copies are queued in evict_after order (FIFO); release_before is the
//   first launch that starts after the modelled copy is done. The host->device copies are
//   laid out backwards from the latest restore point: each must be done when its consumer
//   starts (after its recipes) and before the next copy in the queue starts, and
//   fetch_after is the last launch that ends by then. Both are then widened to cover
//   need_lo..need_hi; the simulator measures what the widening costs in stalls.
// Limitations: the times ignore the stalls the plan itself causes; the simulator's stalls
//   are the figure that counts.
//
// Note [Offloaded recipe inputs]
// Rationale: the deepest cuts mix the actions: a segment's checkpoint is sent to host
//   memory and the segment is recomputed from it. A recipe reads its inputs in place, and
//   a live temporary's scratch starts from its bytes (Note [Recipe scratch]), so either
//   must be back before the recipe runs, not only before its own next use.
// Approach: once the drop plan is built, an offload whose target a recipe reads inside
//   its gap restores before the launch before that recipe's restore point (recipes run
//   ahead of the fetch waits at their launch, Note [Link timeline]); fetch_after and the
//   link timeline follow from that point.
// Limitations: the buffer is then resident from the recipe to its own next use; a recipe
//   right after the last use leaves no gap, and the simulator refuses the offload.
//
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
//
// Note [Fetch margin]
// Rationale: placement fetches each offload as late as the modelled link allows, so a copy
//   back, or the last of a chain of copies queued back to back for one consumer, is
//   planned to end just as its consumer starts. A link a little slower, or compute a
//   little faster, than the model then stalls the stream, which the plan did not predict
//   (docs/offload.md, "Fetch margin").
// Approach: on the chosen plan, the copies back are laid out again as placement lays them
//   out (backwards from the latest restore point, each done before the next in the queue
//   starts), each taking (1 + margin) times its modelled time; a fetch moves earlier to
//   that point, never later and never before its release. The moved plan is kept where it
//   fits the budget for no more added time; where it does not, each copy's move is tried
//   alone, in restore order, then halfway back, and kept on the same terms.
// Limitations: a fetch moved earlier holds its pages longer, so where the budget has no
//   room before a fetch it stays where it was; copies are tried alone for the first 64
//   in restore order only; the margin is a fraction of each copy's time, not a measure of
//   the link's or the compute's spread.
#include <algorithm>
#include <limits>
#include <queue>
#include <tuple>

#include "policy/offload_packs.hpp"
#include "policy/recipe_reads.hpp"
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

void place_offloads(const iteration& it, const link_model& link, plan& p, std::span<const offload_request> requests) {
  if (requests.empty()) return;
  std::vector<double> ready, end;  // launch i may start (after recipes); it ends
  launch_clock(it, p, ready, end);
  const std::size_t m = requests.size();
  std::vector<std::size_t> order(m);
  for (std::size_t j = 0; j < m; ++j) order[j] = j;
  std::vector<launch_id> release(m), fetch(m);
  std::vector<double> to_host_done(m, 0.0);
  // Device->host, forwards in evict_after order.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const offload_request& x = requests[a];
    const offload_request& y = requests[b];
    return x.evict_after != y.evict_after ? x.evict_after < y.evict_after : x.restore_before < y.restore_before;
  });
  double host_free = 0.0;
  for (std::size_t j : order) {
    const offload_request& r = requests[j];
    const double start = std::max(end[r.evict_after], host_free);
    to_host_done[j] = host_free = start + link.to_host.copy_s(r.bytes != 0 ? r.bytes : it.buffers[r.target].size);
    // The first launch i > evict_after whose predecessor ends once the copy is done.
    const auto at = std::lower_bound(end.begin() + r.evict_after, end.end(), to_host_done[j]);
    std::size_t rel = static_cast<std::size_t>(at - end.begin()) + 1;
    rel = std::min<std::size_t>(rel, r.restore_before);
    if (r.need_lo != none) rel = std::min<std::size_t>(rel, r.need_lo);
    release[j] = static_cast<launch_id>(std::max<std::size_t>(rel, static_cast<std::size_t>(r.evict_after) + 1));
  }
  // Host->device, backwards from the latest restore point.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const offload_request& x = requests[a];
    const offload_request& y = requests[b];
    return x.restore_before != y.restore_before ? x.restore_before > y.restore_before : x.evict_after > y.evict_after;
  });
  double next_start = std::numeric_limits<double>::infinity();
  for (std::size_t j : order) {
    const offload_request& r = requests[j];
    const double copy = link.to_device.copy_s(r.bytes != 0 ? r.bytes : it.buffers[r.target].size);
    const double latest = std::min(ready[r.restore_before], next_start) - copy;
    // The last launch in [evict_after, restore_before) that ends by `latest`.
    const auto at = std::upper_bound(end.begin(), end.begin() + r.restore_before, latest);
    std::size_t f = at == end.begin() ? 0 : static_cast<std::size_t>(at - end.begin()) - 1;
    f = std::max<std::size_t>(f, r.evict_after);
    f = std::max<std::size_t>(f, static_cast<std::size_t>(release[j]) - 1);
    if (r.need_hi != none) f = std::max<std::size_t>(f, r.need_hi);
    f = std::min<std::size_t>(f, static_cast<std::size_t>(r.restore_before) - 1);
    fetch[j] = static_cast<launch_id>(f);
    next_start = std::min(next_start, std::max(end[f], to_host_done[j]));
  }
  for (std::size_t j = 0; j < m; ++j) {
    const offload_request& r = requests[j];
    offload o;
    o.target = r.target;
    o.evict_after = r.evict_after;
    o.release_before = std::min<launch_id>(release[j], fetch[j] + 1);
    o.fetch_after = fetch[j];
    o.restore_before = r.restore_before;
    p.offloads.push_back(o);
  }
}

void fetch_before_recipes(const iteration& it, const plan& p, std::span<offload_request> requests) {
  if (requests.empty() || p.evictions.empty()) return;
  std::vector<std::uint32_t> request_of(it.buffers.size(), none);
  for (std::size_t j = 0; j < requests.size(); ++j) request_of[requests[j].target] = static_cast<std::uint32_t>(j);
  for_each_recipe_read(it, p, [&](buffer_id x, launch_id t) {
    if (request_of[x] == none) return;
    offload_request& r = requests[request_of[x]];
    if (r.evict_after < t && t <= r.restore_before && t - 1 > r.evict_after) r.restore_before = t - 1;
  });
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

namespace {

// Per offload, the fetch_after that gives its copy back the margin (Note [Fetch margin]):
// placement's own, over a link whose copies to the device take (1 + margin) times as
// long, never later than the plan's and never before its release; riders take their
// carrier's, whose copy moves the pack.
std::vector<launch_id> fetches_with_margin(const iteration& it, const link_model& link, const plan& p, double margin) {
  link_model slower = link;
  slower.to_device.bytes_per_s /= 1.0 + margin;
  slower.to_device.latency_s *= 1.0 + margin;
  const link_copies copies = copies_of(it, p);
  std::vector<offload_request> requests;
  std::vector<std::uint32_t> carriers;
  for (std::uint32_t j = 0; j < p.offloads.size(); ++j) {
    if (copies.carrier[j] != j) continue;
    const offload& o = p.offloads[j];
    requests.push_back({o.target, o.evict_after, o.restore_before, none, none, copies.bytes[j]});
    carriers.push_back(j);
  }
  plan placed = p;
  placed.offloads.clear();
  place_offloads(it, slower, placed, requests);
  std::vector<launch_id> out(p.offloads.size());
  for (std::size_t k = 0; k < carriers.size(); ++k) {
    const offload& o = p.offloads[carriers[k]];
    out[carriers[k]] = std::clamp(placed.offloads[k].fetch_after, static_cast<launch_id>(o.release_before - 1),
                                  o.fetch_after);
  }
  for (std::size_t j = 0; j < out.size(); ++j) out[j] = out[copies.carrier[j]];
  return out;
}

}  // namespace

void add_fetch_margin(planner::context& ctx, std::size_t budget, planner::context::evaluation& e, double margin) {
  if (!(margin > 0.0) || !e.fits(budget) || e.result.offloads.empty()) return;
  const iteration& it = ctx.graph();
  const std::vector<launch_id> want = fetches_with_margin(it, ctx.offload().link, e.result, margin);
  const auto keep_if_better = [&](plan p) {
    simulation s = ctx.sim().run(p);
    if (!s.valid || s.peak > budget || s.added_time_s() > e.sim.added_time_s() * (1.0 + 1e-12) + 1e-15) return false;
    record(s, p);
    e.result = std::move(p);
    e.sim = std::move(s);
    return true;
  };
  plan all = e.result;
  bool moved = false;
  for (std::size_t j = 0; j < want.size(); ++j) {
    moved = moved || want[j] < all.offloads[j].fetch_after;
    all.offloads[j].fetch_after = std::min(all.offloads[j].fetch_after, want[j]);
  }
  if (!moved || keep_if_better(std::move(all))) return;
  // Each copy alone, in restore order, to its point, else halfway back to the plan's; at
  // most 64 copies, two simulations each, so that large plans do not pay for it in time.
  const link_copies copies = copies_of(it, e.result);
  std::vector<std::uint32_t> carriers;
  for (std::uint32_t j = 0; j < want.size(); ++j)
    if (copies.carrier[j] == j && want[j] < e.result.offloads[j].fetch_after) carriers.push_back(j);
  std::stable_sort(carriers.begin(), carriers.end(), [&](std::uint32_t a, std::uint32_t b) {
    return e.result.offloads[a].restore_before < e.result.offloads[b].restore_before;
  });
  if (carriers.size() > 64) carriers.resize(64);
  for (std::uint32_t c : carriers) {
    const launch_id planned = e.result.offloads[c].fetch_after;
    const launch_id halfway = static_cast<launch_id>(want[c] + (planned - want[c]) / 2);
    for (int k = 0; k < 2; ++k) {
      const launch_id f = k == 0 ? want[c] : halfway;
      if (f >= planned || (k == 1 && halfway == want[c])) break;
      plan p = e.result;
      for (std::size_t j = 0; j < want.size(); ++j)
        if (copies.carrier[j] == c) p.offloads[j].fetch_after = f;
      if (keep_if_better(std::move(p))) break;
    }
  }
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
