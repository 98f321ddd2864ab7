// Helpers for the policy tests: hand-built iterations and a brute-force reference.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "policy/candidates.hpp"
#include "policy/iteration.hpp"
#include "policy/plan.hpp"
#include "policy/simulator.hpp"
#include "policy/testing/synthetic.hpp"

namespace sublinear::policy::test {

// An offload with its four points (policy/plan.hpp).
inline offload offload_entry(buffer_id target, launch_id evict_after, launch_id release_before, launch_id fetch_after,
                             launch_id restore_before) {
  return offload{target, evict_after, release_before, fetch_after, restore_before};
}

// A link with both directions at `bytes_per_s` and no latency.
inline link_model link_at(double bytes_per_s) {
  link_model l;
  l.to_host.bytes_per_s = bytes_per_s;
  l.to_device.bytes_per_s = bytes_per_s;
  return l;
}

// A link over which one 64 KiB page takes a random time in [lo_s, hi_s) each way, and a
// copy 1 us more: the random offload tests' links.
inline link_model random_page_link(std::mt19937_64& rng, double lo_s, double hi_s) {
  const double page_s = std::uniform_real_distribution<double>(lo_s, hi_s)(rng);
  link_model l = link_at(static_cast<double>(64 * 1024) / page_s);
  l.to_host.latency_s = l.to_device.latency_s = 1e-6;
  return l;
}

// A random DAG (synthetic::random_dag) of `layers` layers whose buffers are whole 64 KiB
// pages: the offload tests' graphs.
inline iteration page_dag(std::uint64_t seed, std::size_t layers) {
  synthetic::dag_spec spec;
  spec.layers = layers;
  spec.quantum = 64 * 1024;
  spec.granularity = 64 * 1024;
  return synthetic::build(synthetic::random_dag(spec, seed));
}

// Builds small iterations launch by launch. Buffers are persistent (allocated before the
// iteration, never freed) or live over an explicit [alloc_at, free_at).
class hand_iteration {
 public:
  explicit hand_iteration(std::size_t granularity = 4096) { it_.granularity = granularity; }

  buffer_id persistent(std::size_t bytes) {
    buffer b;
    b.size = bytes;
    b.alloc_index = none;
    b.alloc_at = 0;
    b.free_at = none;
    it_.buffers.push_back(b);
    return static_cast<buffer_id>(it_.buffers.size() - 1);
  }
  buffer_id transient(std::size_t bytes, launch_id alloc_at, launch_id free_at) {
    buffer b;
    b.size = bytes;
    b.alloc_index = next_alloc_++;
    b.alloc_at = alloc_at;
    b.free_at = free_at;
    it_.buffers.push_back(b);
    return static_cast<buffer_id>(it_.buffers.size() - 1);
  }
  // Appends a launch; returns its id.
  launch_id launch(std::vector<buffer_id> reads, std::vector<buffer_id> writes, double cost = 1.0,
                   bool replayable = true) {
    policy::launch l;
    l.cost_s = cost;
    l.replayable = replayable;
    l.kernel = 0;
    for (buffer_id b : reads) l.touched.push_back(b);
    for (buffer_id b : writes) l.touched.push_back(b);
    std::sort(l.touched.begin(), l.touched.end());
    l.touched.erase(std::unique(l.touched.begin(), l.touched.end()), l.touched.end());
    l.written = std::move(writes);
    std::sort(l.written.begin(), l.written.end());
    it_.launches.push_back(std::move(l));
    return static_cast<launch_id>(it_.launches.size() - 1);
  }
  // Finishes users, names, and the turning point (the given one).
  iteration finish(launch_id turning_point) {
    it_.kernel_names = {"k"};
    for (buffer& b : it_.buffers) b.users.clear();
    for (launch_id l = 0; l < it_.launches.size(); ++l) {
      for (buffer_id b : it_.launches[l].touched) it_.buffers[b].users.push_back(l);
    }
    it_.turning_point = turning_point;
    return it_;
  }

 private:
  iteration it_;
  std::uint32_t next_alloc_ = 0;
};

// Three buffers offloaded over one iteration of 16 one-second launches, buffers of
// `big` bytes on pages of `page`: L0 -> z | L1 -> a | L2 -> b | L3..L14 read P | L10 reads
// b | L12 reads a | L15 reads z. With `c_bytes`, L5 writes c instead of reading P and L7
// reads it (c live over L5..L7). Shared by the deadline and fetch margin tests.
struct three_out {
  iteration it;
  buffer_id z = 0, a = 0, b = 0, c = none;
};

inline three_out make_three_out(std::size_t page, std::size_t big, std::size_t c_bytes = 0) {
  hand_iteration h(page);
  three_out s;
  const buffer_id P = h.persistent(1000);
  s.z = h.transient(big, 0, 16);
  s.a = h.transient(big, 1, 13);
  s.b = h.transient(big, 2, 11);
  if (c_bytes > 0) s.c = h.transient(c_bytes, 5, 8);
  h.launch({P}, {s.z});
  h.launch({P}, {s.a});
  h.launch({P}, {s.b});
  for (launch_id i = 3; i <= 9; ++i) {
    if (s.c != none && i == 5) {
      h.launch({P}, {s.c});
    } else if (s.c != none && i == 7) {
      h.launch({s.c}, {});
    } else {
      h.launch({P}, {});
    }
  }
  h.launch({s.b}, {});
  h.launch({P}, {});
  h.launch({s.a}, {});
  h.launch({P}, {});
  h.launch({P}, {});
  h.launch({s.z}, {});
  s.it = h.finish(8);
  return s;
}

struct reference {
  double cost = std::numeric_limits<double>::infinity();
  std::size_t min_peak = std::numeric_limits<std::size_t>::max();  // over every drop set
  bool feasible() const { return cost != std::numeric_limits<double>::infinity(); }
};

// Every drop set of the iteration's candidates (2^k of them), built and simulated.
inline reference brute_force(const iteration& it, std::size_t budget) {
  const dataflow df(it);
  const candidate_set cs(df);
  drop_plan_builder builder(cs);
  const simulator sim(it);
  reference out;
  const std::size_t k = cs.size();
  std::vector<std::uint8_t> dropped(k, 0);
  for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << k); ++mask) {
    for (std::size_t c = 0; c < k; ++c) dropped[c] = (mask >> c) & 1U;
    const drop_plan_builder::outcome o = builder.build(dropped);
    if (!o.ok) continue;
    const simulation s = sim.run(o.result);
    if (!s.valid) continue;
    out.min_peak = std::min(out.min_peak, s.peak);
    if (s.peak <= budget) out.cost = std::min(out.cost, s.added_compute_s);
  }
  return out;
}

// The budget `part`/`parts` of the way from the least any plan can map (candidate_set's
// lower bound) to the unplanned peak.
inline std::size_t budget_at(const iteration& it, std::size_t part, std::size_t parts) {
  const dataflow df(it);
  const std::size_t lo = candidate_set(df).lower_bound_bytes();
  return lo + (simulate(it, plan{}).peak - lo) * part / parts;
}

// `count` budgets spread evenly from the least any plan can map (candidate_set's lower
// bound) to the unplanned peak.
inline std::vector<std::size_t> budgets_for(const iteration& it, std::size_t count) {
  const dataflow df(it);
  const candidate_set cs(df);
  const std::size_t lo = cs.lower_bound_bytes();
  const std::size_t hi = simulate(it, plan{}).peak;
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(lo + (hi - lo) * i / (count - 1));
  return out;
}

}  // namespace sublinear::policy::test
