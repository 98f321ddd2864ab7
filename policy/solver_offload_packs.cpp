// Offloaded packs in the offload search (Note [Offload packs] in offload_packs.hpp).
//
// Note [Offload pack search]
// Rationale: the offload search leaves buffers of less than half a page to recompute
//   (Note [Offload search]): alone, each would hold a page while resident and pay a
//   copy's fixed cost. Packed, a run of them holds their extent and pays one copy.
// Approach: after the search, on its best plan: the recomputed and offloaded candidates
//   of at most half a page, ordered by stream and allocation, are cut into runs of at
//   most `cap` bytes; each run in turn becomes one offloaded pack, and stays one where the plan then
//   fits for less added time (compute + stalls). Caps of 1, 4 and 16 pages each make a
//   pass from the search's plan (a larger pack pays the fixed cost once for more bytes,
//   but is out over a narrower shared gap); the cheapest plan wins. The passes are
//   bounded like the search's improvement pass, by the graph's size.
// Limitations: runs follow allocation order, not the members' gaps; a run that does not
//   pay as a whole is not split. Members a recipe reads in their gap (in place, or a
//   temporary it reads on entry: Note [Offloaded recipe inputs]) are left out: brought
//   back on their own, they would split the pack's copy.
#include <algorithm>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "common/round_up.hpp"
#include "policy/packs.hpp"
#include "policy/solvers.hpp"

namespace sublinear::policy {

bool pack_requests(const iteration& it, std::vector<offload_request>& requests,
                   const std::vector<std::uint32_t>& request_pack, std::vector<pack>& packs, std::string& error) {
  packs.clear();
  // Requests by pack value, each group in request order.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> keyed;  // (pack value, request)
  for (std::uint32_t j = 0; j < requests.size() && j < request_pack.size(); ++j)
    if (request_pack[j] != none) keyed.emplace_back(request_pack[j], j);
  if (keyed.empty()) return true;
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::uint32_t> merged_into(requests.size(), none);  // request -> its group's first request
  std::vector<std::pair<std::uint32_t, offload_request>> merged;   // (first request, merged request)
  std::vector<pack> made;
  for (std::size_t a = 0; a < keyed.size();) {
    std::size_t b = a;
    while (b < keyed.size() && keyed[b].first == keyed[a].first) ++b;
    if (b - a >= 2) {
      std::vector<std::uint32_t> members;
      for (std::size_t k = a; k < b; ++k) members.push_back(keyed[k].second);
      std::sort(members.begin(), members.end(), [&](std::uint32_t x, std::uint32_t y) {
        return it.buffers[requests[x].target].alloc_index < it.buffers[requests[y].target].alloc_index;
      });
      offload_request m = requests[members.front()];
      pack pk;
      pk.offloaded = true;
      for (std::uint32_t j : members) {
        const offload_request& r = requests[j];
        const buffer& x = it.buffers[r.target];
        if (x.alloc_index == none || x.stream != it.buffers[m.target].stream) {
          error = "offloaded pack " + std::to_string(keyed[a].first) + ": buffer " + std::to_string(r.target) +
                  (x.alloc_index == none ? " has no allocation index" : " is on another stream than its first member");
          return false;
        }
        m.evict_after = std::max(m.evict_after, r.evict_after);
        m.restore_before = std::min(m.restore_before, r.restore_before);
        if (r.need_lo != none) m.need_lo = m.need_lo == none ? r.need_lo : std::min(m.need_lo, r.need_lo);
        if (r.need_hi != none) m.need_hi = m.need_hi == none ? r.need_hi : std::max(m.need_hi, r.need_hi);
        pk.members.push_back(r.target);
        pk.offsets.push_back(pk.bytes);
        pk.bytes += round_up(x.size, unplanned_rounding);
      }
      if (m.evict_after >= m.restore_before) {
        error = "offloaded pack " + std::to_string(keyed[a].first) + ": its members share no gap (the last forward use " +
                std::to_string(m.evict_after) + " is not before the first backward use " +
                std::to_string(m.restore_before) + ")";
        return false;
      }
      m.bytes = pk.bytes;
      const std::uint32_t first = *std::min_element(members.begin(), members.end());
      for (std::uint32_t j : members) merged_into[j] = first;
      merged.emplace_back(first, m);
      made.push_back(std::move(pk));
    }
    a = b;
  }
  std::vector<std::size_t> order(merged.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return merged[x].first < merged[y].first; });
  std::vector<offload_request> out;
  std::size_t next = 0;
  for (std::uint32_t j = 0; j < requests.size(); ++j) {
    if (merged_into[j] == none) {
      out.push_back(requests[j]);
    } else if (merged_into[j] == j) {
      out.push_back(merged[order[next]].second);
      packs.push_back(std::move(made[order[next]]));
      ++next;
    }
  }
  requests = std::move(out);
  return true;
}

namespace {

// The run's window: the launches in [lo, hi) where `kept` (the plan with the run resident)
// maps more than `room` (as Note [Tight windows] asks of one offload); none..none if none.
std::pair<launch_id, launch_id> run_window(const planner::context& ctx, const plan& kept, launch_id lo, launch_id hi,
                                           std::size_t room) {
  std::pair<launch_id, launch_id> out{none, none};
  const std::vector<std::size_t> during = ctx.sim().timeline(kept);
  for (launch_id t = lo; t < hi && t < during.size(); ++t) {
    if (during[t] <= room) continue;
    if (out.first == none) out.first = t;
    out.second = t;
  }
  return out;
}

// Per candidate of `run`, whether it may join a pack: not if a recipe of `kept` reads it,
// or takes it as a temporary, in its gap (Note [Offloaded recipe inputs]); brought back
// on its own, it would split the pack's copy.
std::vector<std::uint8_t> packable(const iteration& it, const candidate_set& cs, const plan& kept,
                                   std::span<const std::uint32_t> run) {
  std::vector<offload_request> reads(run.size());
  for (std::size_t k = 0; k < run.size(); ++k) reads[k] = {cs[run[k]].buffer, cs[run[k]].evict_after, cs[run[k]].restore_before};
  fetch_before_recipes(it, kept, reads);
  std::vector<std::uint8_t> out(run.size());
  for (std::size_t k = 0; k < run.size(); ++k) out[k] = reads[k].restore_before == cs[run[k]].restore_before ? 1 : 0;
  return out;
}

}  // namespace

void pack_offloads(planner::context& ctx, std::size_t budget, planner::context::evaluation& best) {
  const iteration& it = ctx.graph();
  const candidate_set& cs = ctx.candidates();
  if (!ctx.offload().offload_packs || !ctx.packs() || !packs_apply(it) || ctx.offload().mode != offload_mode::on ||
      !best.fits(budget))
    return;
  const std::size_t page = it.granularity;
  // The best plan as actions; its offloads asked to be out at least where they are.
  const std::vector<action> actions = ctx.actions_of(best);
  std::vector<launch_id> lo(cs.size(), none), hi(cs.size(), none);
  if (best.need_lo.size() == cs.size() && best.need_hi.size() == cs.size()) lo = best.need_lo, hi = best.need_hi;
  std::vector<std::uint32_t> small;
  for (std::uint32_t c = 0; c < cs.size(); ++c) {
    const buffer& b = it.buffers[cs[c].buffer];
    if (actions[c] != action::keep && b.alloc_index != none && round_up(b.size, unplanned_rounding) * 2 <= page)
      small.push_back(c);
  }
  if (small.size() < 2) return;
  std::sort(small.begin(), small.end(), [&](std::uint32_t x, std::uint32_t y) {
    const buffer& a = it.buffers[cs[x].buffer];
    const buffer& b = it.buffers[cs[y].buffer];
    return std::tie(a.stream, a.alloc_index) < std::tie(b.stream, b.alloc_index);
  });
  std::vector<std::uint32_t> none_packed(cs.size(), none);
  planner::context::evaluation start = ctx.evaluate_actions(actions, lo, hi, best.horizons, none_packed);
  if (!start.fits(budget)) return;
  const std::size_t work = it.launches.size() + cs.size() + 1;
  std::size_t trials = std::max<std::size_t>(48, 1'000'000 / work);
  for (const std::size_t pages : {1, 4, 16}) {
    const std::size_t cap = pages * page;
    std::vector<action> acts = actions;
    std::vector<launch_id> l = lo, h = hi;
    std::vector<std::uint32_t> packed = none_packed;
    planner::context::evaluation current = start;
    std::uint32_t next_pack = 0;
    for (std::size_t i = 0; i < small.size() && trials > 0;) {
      // The run from i: one stream, at most cap bytes.
      const std::uint32_t stream = it.buffers[cs[small[i]].buffer].stream;
      std::size_t j = i, bytes = 0;
      while (j < small.size() && it.buffers[cs[small[j]].buffer].stream == stream) {
        const std::size_t b = round_up(it.buffers[cs[small[j]].buffer].size, unplanned_rounding);
        if (bytes + b > cap) break;
        bytes += b;
        ++j;
      }
      if (j - i >= 2) {
        std::vector<action> was(j - i);
        std::vector<launch_id> was_lo(j - i), was_hi(j - i);
        for (std::size_t k = i; k < j; ++k) was[k - i] = acts[small[k]], was_lo[k - i] = l[small[k]], was_hi[k - i] = h[small[k]];
        launch_id shared_lo = 0, shared_hi = none;  // the gap the run's members share
        for (std::size_t k = i; k < j; ++k) {
          shared_lo = std::max<launch_id>(shared_lo, cs[small[k]].evict_after + 1);
          shared_hi = std::min<launch_id>(shared_hi, cs[small[k]].restore_before);
        }
        for (std::size_t k = i; k < j; ++k) acts[small[k]] = action::keep;
        const planner::context::evaluation kept = ctx.evaluate_actions(acts, l, h, best.horizons, packed);
        --trials;
        launch_id need_lo = none, need_hi = none;
        std::vector<std::uint8_t> member(j - i, 1);
        if (kept.ok) {
          // Resident, the pack holds whole pages where its members held their own bytes.
          const std::size_t extra = round_up(bytes, page) - bytes;
          std::tie(need_lo, need_hi) = run_window(ctx, kept.result, shared_lo, shared_hi, budget > extra ? budget - extra : 0);
          member = packable(it, cs, kept.result, std::span<const std::uint32_t>(small).subspan(i, j - i));
        }
        for (std::size_t k = i; k < j; ++k) {
          if (member[k - i] == 0) {
            acts[small[k]] = was[k - i];
            continue;
          }
          acts[small[k]] = action::offload, packed[small[k]] = next_pack;
          l[small[k]] = need_lo, h[small[k]] = need_hi;
        }
        planner::context::evaluation e = ctx.evaluate_actions(acts, l, h, best.horizons, packed);
        --trials;
        // A peak inside the shared gap but outside the window (a recipe's working set,
        // which the timeline leaves out): the window widens to it, at most twice.
        for (int widen = 0; widen < 2 && e.ok && !e.fits(budget) && trials > 0; ++widen) {
          const launch_id at = e.sim.peak_at;
          if (at < shared_lo || at >= shared_hi || (need_lo != none && need_lo <= at && at <= need_hi)) break;
          need_lo = need_lo == none ? at : std::min(need_lo, at);
          need_hi = need_hi == none ? at : std::max(need_hi, at);
          for (std::size_t k = i; k < j; ++k)
            if (member[k - i] != 0) l[small[k]] = need_lo, h[small[k]] = need_hi;
          e = ctx.evaluate_actions(acts, l, h, best.horizons, packed);
          --trials;
        }
        if (e.fits(budget) && e.sim.added_time_s() < current.sim.added_time_s() * (1.0 - 1e-12)) {
          current = std::move(e);
          ++next_pack;
        } else {
          for (std::size_t k = i; k < j; ++k) {
            acts[small[k]] = was[k - i], packed[small[k]] = none;
            l[small[k]] = was_lo[k - i], h[small[k]] = was_hi[k - i];
          }
        }
      }
      i = std::max(j, i + 1);
    }
    order_copies_out_if_better(ctx, budget, current);  // as with_offload did for `best`
    if (current.sim.added_time_s() < best.sim.added_time_s() * (1.0 - 1e-12)) best = std::move(current);
  }
}

}  // namespace sublinear::policy
