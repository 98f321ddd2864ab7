// Note [Chain solver]
// Rationale: on a chain, which activations to keep is a shortest-path problem over
//   checkpoint positions (Re-forwarding's linear case; Rotor's dynamic program): between
//   two kept checkpoints everything is dropped and rebuilt in one go, so a plan is a path
//   0 -> i1 -> i2 -> ... -> end, its cost the sum of its runs' recomputation, its memory a
//   function of the kept bytes before each run and of the run itself.
// Approach: the candidates (Note [Drop sets]) in production order are cut into segments
//   at articulations (no later candidate's recipe reads one before the cut except the
//   cut's own candidate). Each segment becomes two nodes: its internal candidates I and
//   its last candidate A (Chen's segment output); a plain chain has no I nodes. Node gaps
//   are forced to nest, so a run (i, j) of dropped nodes is regenerated in one go, and
//   every edge's feasibility is "P(i) + X(i, j) <= budget" (P the kept bytes before the
//   run, X from range maxima of the memory at each launch, O(1) amortised). The search
//   keeps, per node, the Pareto front of (kept bytes, added compute) labels: exact, with
//   no discretisation of memory. An I node may only be kept together with the A node
//   before it. The memory at each launch: docs/design-notes.md#chain-solver; node bytes:
//   Note [Chain solver bytes].
// Limitations: exact on chains whose candidate sizes are multiples of the granularity,
//   up to these work limits: runs of at most 128 dropped nodes; at most 8192 segments
//   (more are merged, solving a coarser chain); about 3e7 label moves (beyond, each front
//   keeps the extremes of equal buckets of kept bytes). On a DAG the node gaps and
//   segment options are approximations; the result is simulated exactly and, if it
//   overshoots, solved again with the budget lowered by the overshoot.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "policy/solvers.hpp"

namespace sublinear::policy {

namespace {

using i64 = std::int64_t;
constexpr i64 minus_inf = std::numeric_limits<i64>::min() / 4;
constexpr std::size_t max_segments = 8192;  // more are merged (a coarser chain)
constexpr std::size_t max_run = 128;        // longest run of dropped nodes considered

struct chain_node {
  std::vector<std::uint32_t> members;  // candidate indices
  std::size_t bytes = 0;
  launch_id e = 0;  // nested gap
  launch_id r = 0;
  bool forced = false;    // its gap is empty: it must be kept
  bool internal = false;  // an I node: kept only with the node before it
};

std::vector<chain_node> build_chain(const candidate_set& cs, std::size_t segment_limit) {
  const std::size_t k = cs.size();
  std::vector<chain_node> nodes;
  if (k == 0) return nodes;
  // min_dep[q]: the earliest candidate q's recipe reads (q itself if none earlier);
  // forward[p] > 0: some candidate at or before p reads one after p (no cut after p).
  std::vector<std::uint32_t> suffix_min(k + 1, static_cast<std::uint32_t>(k));
  std::vector<i64> forward(k + 1, 0);
  for (std::uint32_t q = 0; q < k; ++q) {
    std::uint32_t lowest = q;
    for (std::uint32_t d : cs[q].deps) {
      if (d < q) {
        lowest = std::min(lowest, d);
      } else if (d > q) {
        forward[q] += 1;
        forward[d] -= 1;
      }
    }
    suffix_min[q] = lowest;
  }
  for (std::size_t q = k - 1; q-- > 0;) suffix_min[q] = std::min(suffix_min[q], suffix_min[q + 1]);
  // Cut after p when nothing later reads a candidate before the current segment: later
  // segments then depend on this one only through its "outputs" (the A node).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> segments;  // [first, last]
  std::uint32_t lo = 0;
  i64 open = 0;
  for (std::uint32_t p = 0; p < k; ++p) {
    open += forward[p];
    if (p + 1 == k || (open == 0 && suffix_min[p + 1] >= lo)) {
      segments.emplace_back(lo, p);
      lo = p + 1;
    }
  }
  // Merge adjacent segments when there are too many for the dynamic program.
  if (segments.size() > segment_limit) {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> merged;
    const std::size_t per = (segments.size() + segment_limit - 1) / segment_limit;
    for (std::size_t s = 0; s < segments.size(); s += per) {
      const std::size_t last = std::min(segments.size(), s + per) - 1;
      merged.emplace_back(segments[s].first, segments[last].second);
    }
    segments = std::move(merged);
  }
  // A segment's outputs: its candidates read by a later segment (its last one if none).
  std::vector<std::uint8_t> output(k, 0);
  {
    std::vector<std::uint32_t> segment_of(k);
    for (std::size_t s = 0; s < segments.size(); ++s) {
      for (std::uint32_t c = segments[s].first; c <= segments[s].second; ++c) segment_of[c] = static_cast<std::uint32_t>(s);
    }
    for (std::uint32_t q = 0; q < k; ++q) {
      for (std::uint32_t d : cs[q].deps) {
        if (d < q && segment_of[d] != segment_of[q]) output[d] = 1;
      }
    }
  }
  for (const auto& [first, last] : segments) {
    chain_node in, out;
    in.internal = true;
    for (std::uint32_t c = first; c <= last; ++c) (output[c] != 0 ? out : in).members.push_back(c);
    if (out.members.empty()) {
      out.members.push_back(in.members.back());
      in.members.pop_back();
    }
    if (!in.members.empty()) nodes.push_back(std::move(in));
    nodes.push_back(std::move(out));
  }
  launch_id e_max = 0;
  launch_id r_min = none;
  for (chain_node& nd : nodes) {
    launch_id e = 0;
    launch_id r = none;
    for (std::uint32_t c : nd.members) {
      nd.bytes += cs[c].unplanned_bytes;
      e = std::max(e, cs[c].evict_after);
      r = std::min(r, cs[c].restore_before);
    }
    e_max = std::max(e_max, e);
    r_min = std::min(r_min, r);
    nd.e = e_max;
    nd.r = r_min;
    nd.forced = nd.e + 1 >= nd.r;
  }
  return nodes;
}

struct label {
  std::size_t kept = 0;  // P: bytes of kept nodes up to this one
  double cost = 0.0;
  std::uint32_t from_node = none;
  std::uint32_t from_label = none;
};

// Merges `chunk` (ascending kept bytes, descending cost) into the Pareto front `front` of
// (kept bytes, cost), in linear time. Beyond `cap` labels, [0, budget] is cut into cap/2
// equal buckets of kept bytes and each bucket keeps its two extremes (least kept bytes,
// least cost): a choice that more merges can only improve.
void merge_front(std::vector<label>& front, const std::vector<label>& chunk, std::vector<label>& scratch,
                 std::size_t cap, std::size_t budget) {
  scratch.resize(front.size() + chunk.size());
  std::merge(front.begin(), front.end(), chunk.begin(), chunk.end(), scratch.begin(), [](const label& a, const label& b) {
    return a.kept != b.kept ? a.kept < b.kept : a.cost < b.cost;
  });
  std::size_t out = 0;
  for (std::size_t i = 0; i < scratch.size(); ++i) {
    if (out == 0 || scratch[i].cost < scratch[out - 1].cost) scratch[out++] = scratch[i];
  }
  scratch.resize(out);
  if (scratch.size() <= cap) {
    front.swap(scratch);
    return;
  }
  const std::size_t width = budget / (cap / 2) + 1;  // cap/2 buckets over [0, budget]
  front.clear();
  std::size_t bucket = scratch.front().kept / width;
  front.push_back(scratch.front());
  for (std::size_t i = 1; i < scratch.size(); ++i) {
    const std::size_t b = scratch[i].kept / width;
    if (b != bucket) {
      if (front.back().kept != scratch[i - 1].kept) front.push_back(scratch[i - 1]);  // the bucket's cheapest
      front.push_back(scratch[i]);  // the next bucket's leanest
      bucket = b;
    }
  }
  if (front.back().kept != scratch.back().kept) front.push_back(scratch.back());
}

// Drop set (per candidate) chosen by the dynamic program for `budget`, or nothing.
// `run_pages`: count what a regenerated run holds beyond its candidates' own sizes (the
// rest of each one's last page) at the moment it is regenerated.
std::optional<std::vector<std::uint8_t>> chain_drop_set(planner::context& ctx, std::size_t budget, bool run_pages) {
  const candidate_set& cs = ctx.candidates();
  const iteration& it = ctx.graph();
  const std::size_t n = it.launches.size();
  const std::size_t nb = it.buffers.size();
  const std::size_t g = it.granularity == 0 ? 1 : it.granularity;
  const std::vector<chain_node> nodes = build_chain(cs, max_segments);
  const std::size_t nn = nodes.size();
  std::vector<std::uint8_t> dropped(cs.size(), 0);
  if (nn == 0 || n == 0) return dropped;

  // L(t): mapped bytes during t with nothing evicted (so nothing has pages of its own).
  std::vector<i64> L(n, 0);
  {
    std::vector<i64> delta(n + 1, 0);
    for (buffer_id b = 0; b < nb; ++b) {
      const buffer& buf = it.buffers[b];
      const std::size_t lo = std::min<std::size_t>(buf.alloc_at, n);
      const std::size_t hi = buf.free_at == none ? n : std::min<std::size_t>(buf.free_at, n);
      if (lo >= hi) continue;
      const std::size_t sz = round_up(buf.size, unplanned_rounding);
      delta[lo] += static_cast<i64>(sz);
      delta[hi] -= static_cast<i64>(sz);
    }
    i64 level = 0;
    for (std::size_t t = 0; t < n; ++t) {
      level += delta[t];
      L[t] = level;
    }
  }
  // Nodes are 1-based below; 0 and nn+1 are the virtual ends (kept, zero bytes).
  std::vector<i64> S(nn + 1, 0);
  std::vector<launch_id> e(nn + 2, 0), r(nn + 2, 0);
  for (std::size_t p = 1; p <= nn; ++p) {
    S[p] = S[p - 1] + static_cast<i64>(nodes[p - 1].bytes);
    e[p] = nodes[p - 1].e;
    r[p] = nodes[p - 1].r;
  }
  std::vector<i64> max_vb(nn + 1, minus_inf), max_vf(nn + 1, minus_inf), max_lb(nn + 2, minus_inf);
  struct rare_moment {
    std::uint32_t m, delta;
    i64 l;
  };
  std::vector<rare_moment> rare;
  std::vector<std::uint32_t> m_of(n);
  for (std::size_t t = 0; t < n; ++t) {
    // alpha: nodes with e' < t (e' ascending); delta: first node with r' <= t (r' descending).
    const auto alpha = static_cast<std::uint32_t>(
        std::partition_point(e.begin() + 1, e.begin() + static_cast<std::ptrdiff_t>(nn) + 1,
                             [&](launch_id x) { return x < t; }) -
        (e.begin() + 1));
    const auto delta = static_cast<std::uint32_t>(
        std::partition_point(r.begin() + 1, r.begin() + static_cast<std::ptrdiff_t>(nn) + 1,
                             [&](launch_id x) { return x > t; }) -
        r.begin());
    const std::uint32_t m = std::min(alpha, delta - 1);
    m_of[t] = m;
    if (alpha + 1 >= delta) {  // m = delta - 1: the backward side
      max_vb[m] = std::max(max_vb[m], L[t] - S[m]);
      max_lb[delta] = std::max(max_lb[delta], L[t]);
    } else if (delta == nn + 1) {
      max_vf[m] = std::max(max_vf[m], L[t] - S[m]);
    } else {
      rare.push_back({m, delta, L[t]});
    }
  }
  std::sort(rare.begin(), rare.end(), [](const rare_moment& a, const rare_moment& b) { return a.m < b.m; });

  // Label budget: about 3e7 label moves in all.
  const std::size_t edges = nn * std::min<std::size_t>(nn, max_run) + 1;
  const std::size_t cap = std::clamp<std::size_t>(30'000'000 / edges, 32, 4096);
  std::vector<std::vector<label>> labels(nn + 2);
  labels[0].push_back(label{});
  std::vector<std::uint32_t> launch_stamp(n, 0), temp_stamp(nb, 0), member_stamp(nb, 0);
  std::uint32_t stamp = 0;
  const auto B = static_cast<i64>(std::min<std::size_t>(budget, static_cast<std::size_t>(std::numeric_limits<i64>::max() / 4)));

  std::vector<label> chunk, scratch;
  for (std::size_t i = 0; i <= nn; ++i) {
    if (labels[i].empty()) continue;
    const auto p_min = static_cast<i64>(labels[i].front().kept);
    ++stamp;
    double run_cost = 0.0;
    i64 run_temps = 0;
    i64 run_extra = 0;
    i64 run_vf = minus_inf;
    i64 run_lb = minus_inf;
    const auto rare_begin = std::partition_point(rare.begin(), rare.end(), [&](const rare_moment& x) { return x.m < i; });
    for (std::size_t j = i + 1; j <= nn + 1 && j <= i + max_run + 1; ++j) {
      if (j - 1 > i) {
        const chain_node& q = nodes[j - 2];  // node j-1 joins the dropped run
        if (q.forced) break;
        for (std::uint32_t c : q.members) {
          const candidate& cd = cs[c];
          member_stamp[cd.buffer] = stamp;
          if (run_pages) run_extra += static_cast<i64>(cd.bytes) - static_cast<i64>(cd.unplanned_bytes);
          if (temp_stamp[cd.buffer] == stamp) {
            run_temps -= static_cast<i64>(round_up(it.buffers[cd.buffer].size, unplanned_rounding));
          }
          temp_stamp[cd.buffer] = stamp;
          for (launch_id l : cd.recipe) {
            if (launch_stamp[l] == stamp) continue;
            launch_stamp[l] = stamp;
            run_cost += it.launches[l].cost_s;
          }
          for (buffer_id x : cd.temporaries) {
            if (member_stamp[x] == stamp || temp_stamp[x] == stamp) continue;
            temp_stamp[x] = stamp;
            run_temps += static_cast<i64>(round_up(it.buffers[x].size, unplanned_rounding));
          }
        }
        run_lb = std::max(run_lb, max_lb[j - 1]);
      }
      run_vf = std::max(run_vf, max_vf[j - 1]);
      i64 x1 = std::max(run_vf, max_vb[j - 1]);
      i64 x2 = run_lb == minus_inf ? minus_inf : run_lb - S[i];
      for (auto rm = rare_begin; rm != rare.end() && rm->m <= j - 1; ++rm) {
        if (rm->delta >= j) x1 = std::max(x1, rm->l - S[rm->m]);
        if (rm->delta <= j - 1) x2 = std::max(x2, rm->l - S[i]);
      }
      i64 x3 = minus_inf;
      if (j >= i + 2) {
        const launch_id at = r[j - 1];
        x3 = L[at] + run_extra + static_cast<i64>(round_up(static_cast<std::size_t>(run_temps), g)) -
             S[std::min<std::size_t>(i, m_of[at])];
      }
      if (x2 != minus_inf && p_min + x2 > B) break;  // x2 only grows with j
      if (j <= nn && nodes[j - 1].internal && i + 1 != j) continue;
      const i64 x = std::max({x1, x2, x3});
      const i64 threshold = B - x;
      const std::size_t add = j <= nn ? nodes[j - 1].bytes : 0;
      const std::vector<label>& from = labels[i];
      chunk.clear();
      for (std::uint32_t li = 0; li < from.size(); ++li) {
        if (static_cast<i64>(from[li].kept) > threshold) break;
        chunk.push_back(label{from[li].kept + add, from[li].cost + run_cost, static_cast<std::uint32_t>(i), li});
      }
      if (!chunk.empty()) merge_front(labels[j], chunk, scratch, cap, budget);
    }
  }
  std::vector<label>& end = labels[nn + 1];
  if (end.empty()) return std::nullopt;
  const auto best = std::min_element(end.begin(), end.end(), [](const label& a, const label& b) { return a.cost < b.cost; });
  // Walk back: every node not on the path is dropped.
  std::vector<std::uint8_t> kept_node(nn + 2, 0);
  label at = *best;
  while (at.from_node != none) {
    kept_node[at.from_node] = 1;
    at = labels[at.from_node][at.from_label];
  }
  for (std::size_t p = 1; p <= nn; ++p) {
    if (kept_node[p] != 0) continue;
    for (std::uint32_t c : nodes[p - 1].members) dropped[c] = 1;
  }
  return dropped;
}

std::optional<planner::context::evaluation> solve_chain_model(planner::context& ctx, std::size_t budget, bool run_pages) {
  std::size_t internal = budget;
  for (int round = 0; round < 6; ++round) {
    std::optional<std::vector<std::uint8_t>> dropped = chain_drop_set(ctx, internal, run_pages);
    if (!dropped) return std::nullopt;
    planner::context::evaluation e = ctx.evaluate_keeping_refused(*dropped);
    if (e.fits(budget)) return e;
    if (!e.ok) return std::nullopt;
    // The chain model underestimated this graph: ask for the overshoot back.
    const std::size_t over = e.sim.peak - budget;
    if (over >= internal) return std::nullopt;
    internal -= over;
  }
  return std::nullopt;
}

}  // namespace

// Note [Chain solver bytes]
// Rationale: a kept candidate is never given pages of its own, so costing every candidate
//   at whole pages made a kept 16-byte BatchNorm statistic cost a 64 KiB page on the host
//   device, and the solver dropped what it should have kept.
// Approach: a node's bytes are its candidates' sizes as the allocator holds them when
//   nobody plans them (round_up(size, 512)): a dropped one frees exactly that much during
//   its gap. What a dropped candidate holds beyond that while resident (the rest of its
//   last page) is counted, in one of two solves, at the moment its run is regenerated
//   (run_pages), and left to the exact simulation and the overshoot retry in the other;
//   the cheaper plan is kept. Neither alone suffices: without the runs' pages the retries
//   can spiral into long runs on chains of sub-page activations; with them alone the
//   model is too cautious and misses budgets the other meets.
std::optional<planner::context::evaluation> solve_chain(planner::context& ctx, std::size_t budget) {
  // Note [Chain solver bytes]: both ways, the cheaper plan.
  std::optional<planner::context::evaluation> best = solve_chain_model(ctx, budget, false);
  std::optional<planner::context::evaluation> other = solve_chain_model(ctx, budget, true);
  if (other && (!best || other->sim.added_compute_s < best->sim.added_compute_s ||
                (other->sim.added_compute_s == best->sim.added_compute_s && other->sim.peak < best->sim.peak))) {
    best = std::move(other);
  }
  return best;
}

std::vector<chain_segment> chain_segments(const candidate_set& cs) {
  std::vector<chain_segment> out;
  std::vector<std::uint32_t> internal;
  for (chain_node& nd : build_chain(cs, max_segments)) {
    if (nd.internal) {
      internal = std::move(nd.members);
      continue;
    }
    out.push_back({std::move(internal), std::move(nd.members)});
    internal.clear();
  }
  return out;
}

}  // namespace sublinear::policy
