#include "policy/recompute_floor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "policy/recipe.hpp"
#include "policy/simulator.hpp"

namespace sublinear::policy {
namespace {

constexpr double infinite = std::numeric_limits<double>::infinity();

// What a buffer occupies at least while resident, under any plan (as lower_bound_of in
// candidates.cpp counts it).
std::size_t least_footprint(const buffer& b, std::size_t granularity) {
  return std::min(round_up(b.size, granularity), round_up(b.size, unplanned_rounding));
}

// A buffer freed before the position that a droppable buffer's writers read: its recipe
// needs it back, so the plan either retains it (its bytes stay mapped during the
// position) or rebuilds it in scratch (its writers run again).
struct freed_input {
  buffer_id buffer = none;
  std::size_t bytes = 0;
  launch_id first_reader = none;       // the earliest such writer reading it
  std::span<const launch_id> writers;  // its writers before first_reader
  bool rebuildable = true;             // every one of them replayable
};

// One buffer that could be out during the position, and the launches that must run again
// if it is.
struct droppable {
  buffer_id buffer = none;
  std::size_t bytes = 0;
  std::span<const launch_id> writers;  // empty: free to drop
  std::vector<std::uint32_t> inputs;   // indices of its freed inputs
};

// An option of a group: free `bytes` (`units` of the knapsack) at `cost`.
struct option {
  std::size_t units = 0;
  double cost = 0.0;
  std::size_t bytes = 0;
};

class union_find {
 public:
  explicit union_find(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0U); }
  std::uint32_t find(std::uint32_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void join(std::uint32_t a, std::uint32_t b) { parent_[find(a)] = find(b); }

 private:
  std::vector<std::uint32_t> parent_;
};

// Options of one group of buffers that share writers or freed inputs: the Pareto front of
// (bytes freed, cost of the union of writers) over its subsets and their inputs' choices
// (retained: bytes kept; rebuilt: writers paid), or, for a large group, one option per
// buffer at its share of each writer, inputs left out (returned as separate groups).
class group_solver {
 public:
  group_solver(const iteration& it, const recompute_floor_options& o) : it_(&it), options_(&o) {}

  void solve(const std::vector<const droppable*>& group, const std::vector<freed_input>& freed, std::size_t unit,
             std::vector<std::vector<option>>& out) {
    std::vector<std::uint32_t> inputs;  // the group's freed inputs
    for (const droppable* d : group) inputs.insert(inputs.end(), d->inputs.begin(), d->inputs.end());
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    // Too many to enumerate their choices: leave them out, which only lowers the bound.
    const bool with_inputs = group.size() + inputs.size() <= options_->exact_group + 2;
    std::vector<launch_id> launches;
    for (const droppable* d : group) launches.insert(launches.end(), d->writers.begin(), d->writers.end());
    if (with_inputs) {
      for (std::uint32_t x : inputs) launches.insert(launches.end(), freed[x].writers.begin(), freed[x].writers.end());
    }
    std::sort(launches.begin(), launches.end());
    launches.erase(std::unique(launches.begin(), launches.end()), launches.end());
    const auto local = [&](launch_id l) {
      return static_cast<std::size_t>(std::lower_bound(launches.begin(), launches.end(), l) - launches.begin());
    };
    const auto units_of = [&](std::size_t bytes) { return (bytes + unit - 1) / unit; };

    if (group.size() > options_->exact_group) {
      std::vector<std::size_t> sharers(launches.size(), 0);
      for (const droppable* d : group) {
        for (launch_id l : d->writers) ++sharers[local(l)];
      }
      for (const droppable* d : group) {
        double share = 0.0;
        for (launch_id l : d->writers) share += it_->launches[l].cost_s / static_cast<double>(sharers[local(l)]);
        out.push_back({option{}, option{units_of(d->bytes), share, d->bytes}});
      }
      return;
    }

    const std::size_t k = group.size();
    std::vector<std::vector<std::size_t>> masks(k);  // per buffer, its writers' local indices
    std::vector<std::vector<std::size_t>> needs(k);  // per buffer, its freed inputs' indices in `inputs`
    for (std::size_t i = 0; i < k; ++i) {
      for (launch_id l : group[i]->writers) masks[i].push_back(local(l));
      if (!with_inputs) continue;
      for (std::uint32_t x : group[i]->inputs) {
        needs[i].push_back(static_cast<std::size_t>(std::lower_bound(inputs.begin(), inputs.end(), x) - inputs.begin()));
      }
    }
    std::vector<std::vector<std::size_t>> input_masks(inputs.size());
    if (with_inputs) {
      for (std::size_t j = 0; j < inputs.size(); ++j) {
        for (launch_id l : freed[inputs[j]].writers) input_masks[j].push_back(local(l));
      }
    }
    std::vector<option> all;
    all.reserve(std::size_t{1} << k);
    std::vector<std::uint8_t> paid(launches.size());
    std::vector<std::uint8_t> with(launches.size());
    std::vector<std::size_t> needed;
    const auto pay = [&](std::vector<std::uint8_t>& set, const std::vector<std::size_t>& mask, double& cost) {
      for (std::size_t w : mask) {
        if (set[w] == 0) {
          set[w] = 1;
          cost += it_->launches[launches[w]].cost_s;
        }
      }
    };
    for (std::size_t subset = 1; subset < (std::size_t{1} << k); ++subset) {
      std::fill(paid.begin(), paid.end(), 0);
      std::size_t bytes = 0;
      double cost = 0.0;
      needed.clear();
      for (std::size_t i = 0; i < k; ++i) {
        if ((subset >> i & 1U) == 0) continue;
        bytes += group[i]->bytes;
        pay(paid, masks[i], cost);
        needed.insert(needed.end(), needs[i].begin(), needs[i].end());
      }
      std::sort(needed.begin(), needed.end());
      needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
      // Each freed input retained (its bytes stay mapped) or rebuilt (its writers run).
      for (std::size_t choice = 0; choice < (std::size_t{1} << needed.size()); ++choice) {
        std::size_t kept = 0;
        double c = cost;
        with = paid;
        bool possible = true;
        for (std::size_t j = 0; j < needed.size(); ++j) {
          const freed_input& x = freed[inputs[needed[j]]];
          if ((choice >> j & 1U) != 0) {
            kept += x.bytes;
          } else if (x.rebuildable) {
            pay(with, input_masks[needed[j]], c);
          } else {
            possible = false;
          }
        }
        if (possible && kept < bytes) all.push_back({units_of(bytes - kept), c, bytes - kept});
      }
    }
    // Keep the Pareto front: cheapest first, each option that frees more bytes than every
    // cheaper one.
    std::sort(all.begin(), all.end(), [](const option& a, const option& b) {
      return a.cost != b.cost ? a.cost < b.cost : a.bytes > b.bytes;
    });
    std::vector<option> front{option{}};
    std::size_t most = 0;
    for (const option& o : all) {
      if (o.bytes > most) {
        front.push_back(o);
        most = o.bytes;
      }
    }
    out.push_back(std::move(front));
  }

 private:
  const iteration* it_;
  const recompute_floor_options* options_;
};

// The cost of one way to free at least min(rest, w * unit) bytes, for every w = 0..units:
// whole groups, cheapest per byte first (infinite where they do not reach). An upper bound
// on the least cost, so on both bounds below: a position where it is no more than the
// floor found so far cannot raise the floor, and is not solved.
std::vector<double> greedy_cover_all(const std::vector<std::vector<option>>& groups, std::size_t rest,
                                     std::size_t unit, std::size_t units) {
  std::vector<option> whole;
  whole.reserve(groups.size());
  for (const std::vector<option>& g : groups) {
    if (!g.empty() && g.back().bytes > 0) whole.push_back(g.back());  // the front's largest
  }
  std::sort(whole.begin(), whole.end(), [](const option& a, const option& b) {
    return a.cost * static_cast<double>(b.bytes) < b.cost * static_cast<double>(a.bytes);
  });
  std::vector<double> out(units + 1, infinite);
  std::size_t freed = 0;
  double cost = 0.0;
  std::size_t next = 0;
  for (std::size_t w = 0; w <= units; ++w) {
    const std::size_t need = std::min(rest, w * unit);
    while (freed < need && next < whole.size()) {
      freed += whole[next].bytes;
      cost += whole[next++].cost;
    }
    if (freed < need) break;
    out[w] = cost;
  }
  return out;
}

double greedy_cover(const std::vector<std::vector<option>>& groups, std::size_t need) {
  return greedy_cover_all(groups, need, need, 1)[1];
}

// The linear relaxation of cover() in bytes: each group's lower convex hull of (bytes,
// cost), its segments taken cheapest per byte first, the last one in part. A lower bound
// on the least cost of freeing `need` bytes with one option per group; close to it where
// the groups are small against `need` (where the knapsack's rounding of weights is worst).
class relaxed_cover {
 public:
  explicit relaxed_cover(const std::vector<std::vector<option>>& groups) {
    struct segment {
      double bytes;
      double cost;
    };
    std::vector<segment> segments;
    std::vector<const option*> hull;
    for (const std::vector<option>& g : groups) {
      // g is sorted by bytes and cost, both increasing, and starts at (0, 0).
      hull.clear();
      for (const option& o : g) {
        while (hull.size() >= 2) {
          const option& a = *hull[hull.size() - 2];
          const option& b = *hull.back();
          // Drop b if it lies on or above the line from a to o.
          const double lhs = (b.cost - a.cost) * static_cast<double>(o.bytes - a.bytes);
          const double rhs = (o.cost - a.cost) * static_cast<double>(b.bytes - a.bytes);
          if (lhs < rhs) break;
          hull.pop_back();
        }
        hull.push_back(&o);
      }
      for (std::size_t i = 1; i < hull.size(); ++i) {
        segments.push_back({static_cast<double>(hull[i]->bytes - hull[i - 1]->bytes), hull[i]->cost - hull[i - 1]->cost});
      }
    }
    std::sort(segments.begin(), segments.end(),
              [](const segment& a, const segment& b) { return a.cost * b.bytes < b.cost * a.bytes; });
    bytes_.reserve(segments.size() + 1);
    cost_.reserve(segments.size() + 1);
    bytes_.push_back(0.0);
    cost_.push_back(0.0);
    for (const segment& sg : segments) {
      bytes_.push_back(bytes_.back() + sg.bytes);
      cost_.push_back(cost_.back() + sg.cost);
    }
  }
  [[nodiscard]] double at(std::size_t need) const {
    const auto want = static_cast<double>(need);
    if (want > bytes_.back()) return infinite;
    const auto j = static_cast<std::size_t>(std::lower_bound(bytes_.begin(), bytes_.end(), want) - bytes_.begin());
    if (j == 0) return 0.0;
    return cost_[j - 1] + (cost_[j] - cost_[j - 1]) * (want - bytes_[j - 1]) / (bytes_[j] - bytes_[j - 1]);
  }

 private:
  std::vector<double> bytes_;  // cumulative, cheapest per byte first
  std::vector<double> cost_;
};

// Least cost of freeing at least w units with one option from each group, for every w up
// to `need` (index w).
std::vector<double> cover_all(const std::vector<std::vector<option>>& groups, std::size_t need) {
  std::vector<double> best(need + 1, infinite);
  best[0] = 0.0;
  std::vector<double> next(need + 1, infinite);
  // Past `reach` (the most units the groups so far free, capped at need) every entry is
  // infinite, so each group only updates up to its own reach.
  std::size_t reach = 0;
  for (const std::vector<option>& g : groups) {
    std::size_t most = 0;
    for (const option& o : g) most = std::max(most, o.units);
    const std::size_t to = std::min(need, reach + most);
    std::copy(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(to + 1), next.begin());
    for (const option& o : g) {
      if (o.units == 0) continue;
      for (std::size_t w = 1; w <= to; ++w) {
        const std::size_t from = w > o.units ? w - o.units : 0;
        if (best[from] + o.cost < next[w]) next[w] = best[from] + o.cost;
      }
    }
    best.swap(next);
    reach = to;
  }
  return best;
}

double cover(const std::vector<std::vector<option>>& groups, std::size_t need) { return cover_all(groups, need)[need]; }

// Note [Offload floor]
// Rationale: with offload, a buffer can be out during t at no compute; what bounds it is
//   the link: every buffer out by offload during t went to host memory before t started
//   and comes back after t ends, and each copy has its own window.
// Approach: a buffer offloadable at t can start its copy to host only when its last use
//   before t ends (ready) and must be back when its first use after t starts (due). The
//   copies to host of the chosen buffers with ready >= a must fit between a and t, so the
//   plan adds at least (their bytes / bandwidth + one latency - (S(t) - a)) before t, for
//   every a; likewise the copies back. For X footprint bytes over the link, link_excess
//   takes the larger of two bounds: the earliest-ready (latest-due) buffers first, each
//   byte at the least size per footprint of any, which makes every window's share the
//   least at once (a prefix maximum); and at 32 window edges, the footprint the wider
//   windows cannot hold taken from the narrower ones at the least size for it (a
//   fractional knapsack by size per footprint), so one small buffer's ratio does not make
//   every copy cheap. The copies to host wait before t, while recompute and copies back
//   for t happen after it, and a recompute gives the copies back its time: added time is
//   at least the excess to host plus the larger of the recompute for the rest of the
//   deficit (the knapsack of Note [Recompute floor] and its relaxation in exact bytes,
//   for every remainder) and the excess back, minimised over X. Buffers whose writers
//   cannot be replayed count as offloadable; X is at most the host budget.
// Limitations: the directions and the recompute may count the same buffers; contention
//   with copies for other positions and all but one latency per window are not counted,
//   so the bound is loose where many small copies queue.
struct link_window {
  double slack = 0.0;     // compute time between the copy's window edge and t
  std::size_t bytes = 0;  // footprint
  std::size_t size = 0;   // bytes the copy moves
};

// One direction's least excess over its windows, for X footprint bytes over the link: the
// larger of two bounds (Note [Offload floor]).
class link_excess {
 public:
  static constexpr std::size_t max_edges = 32;
  static constexpr std::size_t ratio_steps = 1024;

  link_excess(std::vector<link_window>& windows, const link_direction& link, double ratio)
      : per_byte_(1.0 / link.bytes_per_s), ratio_(ratio), latency_(link.latency_s) {
    std::sort(windows.begin(), windows.end(), [](const link_window& a, const link_window& b) { return a.slack > b.slack; });
    before_.reserve(windows.size());
    best_.reserve(windows.size());
    std::size_t taken = 0;
    double best = -infinite;
    for (const link_window& w : windows) {
      // Window of the buffers from this one on: (X - taken) bytes, at least one copy.
      best = std::max(best, link.latency_s - w.slack - per_byte_ * ratio_ * static_cast<double>(taken));
      before_.push_back(taken);
      best_.push_back(best);
      taken += w.bytes;
    }
    // Edges at quantiles of the footprint; each keeps its suffix's footprint by ratio of
    // size to footprint (rounded down to 1/ratio_steps), least first, as cumulative
    // footprint and size (a fractional knapsack).
    std::size_t k = 0;
    for (std::size_t q = 0; q < max_edges && k < windows.size(); ++q) {
      const std::size_t from = taken / max_edges * q;
      while (k < windows.size() && before_[k] < from) ++k;
      if (k == windows.size() || (!edges_.empty() && edges_.back().first == k)) continue;
      edges_.push_back({k, windows[k].slack, before_[k], {0}, {0.0}});
    }
    std::vector<std::size_t> by_step(ratio_steps + 1, 0);  // footprint of the suffix per step
    std::size_t i = windows.size();
    for (auto e = edges_.rbegin(); e != edges_.rend(); ++e) {
      for (; i > e->first; --i) {
        const link_window& w = windows[i - 1];
        by_step[std::min<std::size_t>(ratio_steps, w.size * ratio_steps / w.bytes)] += w.bytes;
      }
      for (std::size_t step = 0; step <= ratio_steps; ++step) {
        if (by_step[step] == 0) continue;
        e->footprint.push_back(e->footprint.back() + by_step[step]);
        e->moved.push_back(e->moved.back() + static_cast<double>(by_step[step]) * static_cast<double>(step) / ratio_steps);
      }
    }
  }
  // The excess with rest - w * unit footprint bytes over the link (0 below 0), for
  // w = 0..units: the prefix bound and, walking each edge's knapsack once, the edges'.
  [[nodiscard]] std::vector<double> on_grid(std::size_t rest, std::size_t unit, std::size_t units) const {
    std::vector<double> out(units + 1, 0.0);
    std::vector<std::size_t> at_edge(edges_.size(), 0);
    std::size_t k = 0;
    for (std::size_t w = units + 1; w-- > 0;) {
      const std::size_t bytes = rest > w * unit ? rest - w * unit : 0;
      if (bytes == 0 || before_.empty()) continue;
      while (k < before_.size() && before_[k] < bytes) ++k;
      double excess = per_byte_ * ratio_ * static_cast<double>(bytes) + best_[k - 1];
      for (std::size_t i = 0; i < edges_.size(); ++i) {
        const edge& e = edges_[i];
        if (bytes <= e.before) continue;
        std::size_t& j = at_edge[i];
        while (j + 1 < e.footprint.size() && e.footprint[j + 1] <= bytes - e.before) ++j;
        excess = std::max(excess, edge_excess(e, j, bytes));
      }
      out[w] = std::max(0.0, excess);
    }
    return out;
  }

 private:
  struct edge {
    std::size_t first;                   // its window's index, widest first
    double slack;                        // the edge's window
    std::size_t before;                  // footprint of the wider windows
    std::vector<std::size_t> footprint;  // cumulative, least size per footprint first
    std::vector<double> moved;           // their cumulative size
  };
  // At least bytes - before of footprint comes from the edge's window or narrower ones;
  // j: the last entry of its knapsack at or below that.
  [[nodiscard]] double edge_excess(const edge& e, std::size_t j, std::size_t bytes) const {
    const std::size_t need = bytes - e.before;
    double moved = e.moved[j];
    if (j + 1 < e.footprint.size()) {
      const double part = static_cast<double>(need - e.footprint[j]) / static_cast<double>(e.footprint[j + 1] - e.footprint[j]);
      moved += part * (e.moved[j + 1] - e.moved[j]);
    }
    return latency_ + per_byte_ * moved - e.slack;
  }
  double per_byte_;
  double ratio_;
  double latency_;
  std::vector<std::size_t> before_;  // footprint of the windows before each
  std::vector<double> best_;         // prefix maximum of latency - slack - per_byte * ratio * before
  std::vector<edge> edges_;
};

}  // namespace

recompute_floor find_recompute_floor(const iteration& it, std::size_t budget, const recompute_floor_options& options) {
  recompute_floor out;
  const std::size_t n = it.launches.size();
  if (n == 0) return out;
  const std::size_t g = it.granularity == 0 ? 1 : it.granularity;
  const dataflow df(it);
  const bool offload = options.link.usable();
  std::vector<double> cost_before(n + 1, 0.0);  // costs of launches 0..t-1
  for (std::size_t t = 0; t < n; ++t) cost_before[t + 1] = cost_before[t] + it.launches[t].cost_s;

  // Bytes allocated during each launch, at the least any plan maps for them.
  std::vector<std::int64_t> delta(n + 1, 0);
  for (const buffer& b : it.buffers) {
    const std::size_t lo = std::min<std::size_t>(b.alloc_at, n);
    const std::size_t hi = b.free_at == none ? n : std::min<std::size_t>(b.free_at, n);
    if (lo >= hi) continue;
    const auto sz = static_cast<std::int64_t>(least_footprint(b, g));
    delta[lo] += sz;
    delta[hi] -= sz;
  }
  std::vector<std::pair<std::size_t, launch_id>> deficits;  // (bytes over the budget, position)
  std::int64_t level = 0;
  for (std::size_t t = 0; t < n; ++t) {
    level += delta[t];
    if (level > 0 && static_cast<std::size_t>(level) > budget) {
      deficits.emplace_back(static_cast<std::size_t>(level) - budget, static_cast<launch_id>(t));
    }
  }
  out.positions = deficits.size();
  std::sort(deficits.begin(), deficits.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (deficits.size() > options.max_positions) deficits.resize(options.max_positions);

  // Buffers by allocation position, to walk those allocated at t.
  std::vector<buffer_id> evictable;
  for (buffer_id b = 0; b < it.buffers.size(); ++b) {
    const buffer& buf = it.buffers[b];
    if (!buf.persistent() && !buf.never_evict) evictable.push_back(b);
  }

  group_solver solver(it, options);
  std::vector<droppable> drops;
  std::vector<freed_input> freed;
  std::vector<std::uint32_t> input_epoch(it.buffers.size(), 0);
  std::vector<std::uint32_t> input_index(it.buffers.size(), 0);
  std::uint32_t epoch = 0;
  std::vector<std::vector<option>> groups;
  std::vector<link_window> to_host_windows, to_device_windows;
  double floor = -1.0;
  for (const auto& [need_bytes, t] : deficits) {
    ++out.examined;
    drops.clear();
    std::size_t free_bytes = 0;
    std::size_t possible = 0;
    std::size_t offloadable = 0;     // bytes that could be out by offload (not free ones)
    std::size_t offload_only = 0;    // of those, bytes whose writers cannot be replayed
    double link_ratio = 1.0;         // least size / footprint among the offloadable
    to_host_windows.clear();
    to_device_windows.clear();
    for (buffer_id b : evictable) {
      const buffer& buf = it.buffers[b];
      if (!(buf.alloc_at < t && t + 1 < buf.free_at)) continue;
      if (std::binary_search(buf.users.begin(), buf.users.end(), t)) continue;
      const std::size_t bytes = least_footprint(buf, g);
      const bool used_later = df.used_between(b, t, buf.free_at);
      const std::span<const launch_id> writers = df.writers_in(b, buf.alloc_at, t);
      if (!used_later || writers.empty()) {
        free_bytes += bytes;
        possible += bytes;
        continue;
      }
      const bool replayable = std::all_of(writers.begin(), writers.end(),
                                          [&](launch_id l) { return it.launches[l].replayable; });
      if (offload && bytes > 0) {
        offloadable += bytes;
        link_ratio = std::min(link_ratio, static_cast<double>(buf.size) / static_cast<double>(bytes));
        // Ready when its last use before t ends; due when its next use after t starts.
        const auto last = std::lower_bound(buf.users.begin(), buf.users.end(), t);
        const std::size_t ready = last == buf.users.begin() ? buf.alloc_at : *std::prev(last) + 1;
        const std::size_t due = df.next_use_after(b, t);
        to_host_windows.push_back({cost_before[t] - cost_before[ready], bytes, buf.size});
        to_device_windows.push_back({cost_before[std::min(due, n)] - cost_before[t + 1], bytes, buf.size});
        if (!replayable) offload_only += bytes;
      }
      if (!replayable) continue;
      drops.push_back({b, bytes, writers, {}});
      possible += bytes;
    }
    // The freed inputs of the droppable buffers' writers (Note [Recipe closure]: a recipe
    // rebuilds in scratch what it reads that is no longer allocated, unless the plan
    // retains it).
    freed.clear();
    ++epoch;
    for (droppable& d : drops) {
      for (launch_id l : d.writers) {
        for (buffer_id x : it.launches[l].touched) {
          const buffer& xb = it.buffers[x];
          if (xb.persistent() || xb.free_at > t || df.writes(l, x)) continue;
          if (input_epoch[x] != epoch) {
            input_epoch[x] = epoch;
            input_index[x] = static_cast<std::uint32_t>(freed.size());
            freed.push_back({x, least_footprint(xb, g), l, {}, true});
          }
          freed_input& fx = freed[input_index[x]];
          fx.first_reader = std::min(fx.first_reader, l);
          d.inputs.push_back(input_index[x]);
        }
      }
      std::sort(d.inputs.begin(), d.inputs.end());
      d.inputs.erase(std::unique(d.inputs.begin(), d.inputs.end()), d.inputs.end());
    }
    for (freed_input& fx : freed) {
      const buffer& xb = it.buffers[fx.buffer];
      fx.writers = df.writers_in(fx.buffer, xb.alloc_at, fx.first_reader);
      fx.rebuildable = std::all_of(fx.writers.begin(), fx.writers.end(),
                                   [&](launch_id l) { return it.launches[l].replayable; });
    }
    if (offload) {
      if (options.host_budget != 0) offloadable = std::min(offloadable, options.host_budget);
      possible += std::min(offload_only, offloadable);
    }
    if (possible < need_bytes) {
      out.feasible = false;
      out.added_s = infinite;
      out.at = t;
      out.must_free = need_bytes;
      out.can_free = possible;
      return out;
    }
    double cost = 0.0;
    if (free_bytes < need_bytes) {
      const std::size_t rest = need_bytes - free_bytes;
      const std::size_t unit = std::max<std::size_t>(1, (rest + options.units - 1) / std::max<std::size_t>(1, options.units));
      const std::size_t units = (rest + unit - 1) / unit;
      // The link's excess each way with rest - w * unit bytes offloaded, for every w.
      std::vector<double> host_excess, device_excess;
      if (offload) {
        host_excess = link_excess(to_host_windows, options.link.to_host, link_ratio).on_grid(rest, unit, units);
        device_excess = link_excess(to_device_windows, options.link.to_device, link_ratio).on_grid(rest, unit, units);
        // Offloading all of it (w = 0) bounds the cost here from above: no higher floor here.
        if (rest <= offloadable && host_excess[0] + device_excess[0] <= floor) continue;
      }
      // Groups: buffers joined through shared writers and shared freed inputs (node n + i
      // for freed input i).
      union_find joined(n + freed.size());
      for (const droppable& d : drops) {
        for (launch_id l : d.writers) joined.join(l, d.writers.front());
        for (std::uint32_t x : d.inputs) joined.join(static_cast<std::uint32_t>(n) + x, d.writers.front());
      }
      std::vector<std::pair<std::uint32_t, const droppable*>> keyed;
      keyed.reserve(drops.size());
      for (const droppable& d : drops) keyed.emplace_back(joined.find(d.writers.front()), &d);
      std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : a.second->buffer < b.second->buffer;
      });
      groups.clear();
      std::vector<const droppable*> group;
      for (std::size_t i = 0; i < keyed.size(); ++i) {
        group.push_back(keyed[i].second);
        if (i + 1 == keyed.size() || keyed[i + 1].first != keyed[i].first) {
          solver.solve(group, freed, unit, groups);
          group.clear();
        }
      }
      if (greedy_cover(groups, rest) <= floor) continue;
      if (offload) {
        // w units recomputed, the rest offloaded (see Note [Offload floor]).
        // Whole groups bound each split's recompute from above: where every split's bound
        // is no more than the floor found so far, this position cannot raise it.
        const std::vector<double> greedy = greedy_cover_all(groups, rest, unit, units);
        double above = infinite;
        for (std::size_t w = 0; w <= units; ++w) {
          const std::size_t by_link = rest > w * unit ? rest - w * unit : 0;
          if (by_link <= offloadable) above = std::min(above, host_excess[w] + std::max(greedy[w], device_excess[w]));
        }
        if (above <= floor) continue;
        const std::vector<double> best = cover_all(groups, units);
        const relaxed_cover relaxed(groups);
        cost = infinite;
        for (std::size_t w = 0; w <= units; ++w) {
          const std::size_t by_link = rest > w * unit ? rest - w * unit : 0;
          if (by_link > offloadable) continue;
          // A plan offloading no more than by_link recomputes more than (w - 1) units.
          const double recompute = std::max(best[w], relaxed.at(std::min(rest, (w > 0 ? w - 1 : 0) * unit)));
          cost = std::min(cost, host_excess[w] + std::max(recompute, device_excess[w]));
        }
      } else {
        // Two lower bounds, the larger kept: the knapsack (exact but for its rounding of
        // weights, which loosens it when many small groups meet) and its linear relaxation
        // in exact bytes (loose by at most part of one group's price).
        cost = std::max(cover(groups, units), relaxed_cover(groups).at(rest));
      }
    }
    if (cost > floor) {
      floor = cost;
      out.added_s = cost;
      out.at = t;
      out.must_free = need_bytes;
      out.can_free = possible;
    }
  }
  return out;
}

}  // namespace sublinear::policy
