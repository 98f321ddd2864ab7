#include "policy/simulator.hpp"

#include "policy/retention.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>

namespace sublinear::policy {

namespace {

std::string entry_label(const plan& p, std::size_t k) {
  return "eviction " + std::to_string(k) + " (buffer " +
         (p.evictions[k].target == none ? std::string("none") : std::to_string(p.evictions[k].target)) + ")";
}

// An entry's or a pack's name in an error, formatted only when an error is written: the
// searches simulate thousands of plans and almost all of them are valid.
struct entry_name {
  const plan& p;
  std::size_t k;
  bool is_pack = false;
  [[nodiscard]] std::string str() const { return is_pack ? "pack " + std::to_string(k) : entry_label(p, k); }
};
std::string operator+(const entry_name& who, const char* rest) { return who.str() + rest; }

std::size_t granularity_of(const iteration& it) { return it.granularity == 0 ? 1 : it.granularity; }

}  // namespace

struct simulator::prepared {
  std::vector<launch_id> regenerated_at;   // per entry: the moment its buffer is back
  std::vector<std::size_t> order;          // per entry: the plan index of the recipe regenerating it
  std::vector<std::size_t> claimed_by;     // per entry: carrier index or SIZE_MAX
  std::vector<std::uint32_t> offsets;      // CSR per buffer: entries sorted by evict_after
  std::vector<std::uint32_t> by_buffer;
  std::vector<std::uint8_t> planned;       // per buffer
  std::vector<std::uint32_t> pack_of;      // per buffer: its pack, or none
  std::vector<std::uint32_t> offload_of;   // per buffer: its plan.offloads entry, or none

  // Whether b has own pages (an eviction or an offload targets it).
  [[nodiscard]] bool paged(buffer_id b) const { return planned[b] != 0 || offload_of[b] != none; }
  // Whether a recipe running just before launch t may not read b in place: b is offloaded
  // and t is in (evict_after, restore_before] of its offload.
  [[nodiscard]] bool offloaded_at(const plan& p, buffer_id b, launch_id t) const {
    if (offload_of[b] == none) return false;
    const offload& o = p.offloads[offload_of[b]];
    return o.evict_after < t && t <= o.restore_before;
  }

  // Entry of buffer b with the largest evict_after < t, or SIZE_MAX.
  [[nodiscard]] std::size_t entry_before(const plan& p, buffer_id b, launch_id t) const {
    const auto first = by_buffer.begin() + offsets[b];
    const auto last = by_buffer.begin() + offsets[b + 1];
    auto it = std::partition_point(first, last, [&](std::uint32_t j) { return p.evictions[j].evict_after < t; });
    if (it == first) return SIZE_MAX;
    return *std::prev(it);
  }
  // Whether b is not resident while the recipe of entry k runs just before launch t.
  [[nodiscard]] bool evicted_at_recipe(const plan& p, buffer_id b, launch_id t, std::size_t k) const {
    const std::size_t j = entry_before(p, b, t);
    if (j == SIZE_MAX) return false;
    return regenerated_at[j] > t || (regenerated_at[j] == t && order[j] >= k);
  }
};

simulator::simulator(const iteration& it, const link_model& link, std::size_t host_budget)
    : it_(&it), df_(it), link_(link), host_budget_(host_budget) {}

bool simulator::prepare(const plan& p, prepared& s, std::string& error) const {
  const iteration& it = *it_;
  const std::size_t n = it.launches.size();
  const std::size_t nb = it.buffers.size();
  const std::size_t ne = p.evictions.size();

  // 1. Each entry on its own.
  for (std::size_t k = 0; k < ne; ++k) {
    const eviction& ev = p.evictions[k];
    const entry_name who{p, k};
    if (ev.target >= nb) {
      error = who + ": the target is not a buffer of the iteration";
      return false;
    }
    const buffer& b = it.buffers[ev.target];
    if (b.persistent()) {
      error = who + ": the target is not allocated and freed within the iteration, so it cannot be evicted";
      return false;
    }
    if (b.never_evict) {
      error = who + ": the target is marked never_evict";
      return false;
    }
    if (ev.restore_before >= n || ev.evict_after >= ev.restore_before) {
      error = who + ": evict_after " + std::to_string(ev.evict_after) + " must come before restore_before " +
              std::to_string(ev.restore_before) + ", a launch of the iteration";
      return false;
    }
    if (ev.evict_after < b.alloc_at || !df_.allocated_at(ev.target, ev.restore_before)) {
      error = who + ": the target is not allocated over launches " + std::to_string(ev.evict_after) + ".." +
              std::to_string(ev.restore_before);
      return false;
    }
    if (df_.used_between(ev.target, ev.evict_after, ev.restore_before)) {
      error = who + ": the target is used by launch " +
              std::to_string(df_.next_use_after(ev.target, ev.evict_after)) + " while evicted";
      return false;
    }
    for (launch_id l : ev.recipe) {
      if (l >= n) {
        error = who + ": recipe launch " + std::to_string(l) + " does not exist";
        return false;
      }
    }
    for (buffer_id x : ev.temporaries) {
      if (x >= nb) {
        error = who + ": temporary " + std::to_string(x) + " is not a buffer of the iteration";
        return false;
      }
    }
    for (buffer_id x : ev.also_regenerates) {
      if (x >= nb) {
        error = who + ": also_regenerates buffer " + std::to_string(x) + " is not a buffer of the iteration";
        return false;
      }
    }
  }

  // 2. Per-buffer entry lists, sorted by evict_after; evictions of one buffer must not overlap.
  s.offsets.assign(nb + 1, 0);
  for (const eviction& ev : p.evictions) ++s.offsets[ev.target + 1];
  for (std::size_t b = 0; b < nb; ++b) s.offsets[b + 1] += s.offsets[b];
  s.by_buffer.resize(ne);
  {
    std::vector<std::uint32_t> fill(s.offsets.begin(), s.offsets.end() - 1);
    for (std::size_t k = 0; k < ne; ++k) s.by_buffer[fill[p.evictions[k].target]++] = static_cast<std::uint32_t>(k);
  }
  s.planned.assign(nb, 0);
  for (std::size_t b = 0; b < nb; ++b) {
    const auto first = s.by_buffer.begin() + s.offsets[b];
    const auto last = s.by_buffer.begin() + s.offsets[b + 1];
    if (first == last) continue;
    s.planned[b] = 1;
    std::sort(first, last, [&](std::uint32_t x, std::uint32_t y) {
      return p.evictions[x].evict_after < p.evictions[y].evict_after;
    });
    for (auto it2 = first; it2 + 1 < last; ++it2) {
      const eviction& a = p.evictions[*it2];
      const eviction& c = p.evictions[*(it2 + 1)];
      if (c.evict_after < a.restore_before) {
        error = entry_label(p, *(it2 + 1)) + ": overlaps eviction " + std::to_string(*it2) + " of the same buffer";
        return false;
      }
    }
  }

  // 3. Claims: entries listed in another entry's also_regenerates are regenerated by it.
  s.regenerated_at.resize(ne);
  s.order.resize(ne);
  s.claimed_by.assign(ne, SIZE_MAX);
  for (std::size_t k = 0; k < ne; ++k) {
    s.regenerated_at[k] = p.evictions[k].restore_before;
    s.order[k] = k;
  }
  for (std::size_t k = 0; k < ne; ++k) {
    const eviction& ev = p.evictions[k];
    for (std::size_t a = 0; a < ev.also_regenerates.size(); ++a) {
      const buffer_id x = ev.also_regenerates[a];
      const entry_name who{p, k};
      if (x == ev.target || std::find(ev.also_regenerates.begin(), ev.also_regenerates.begin() + static_cast<std::ptrdiff_t>(a), x) !=
                                ev.also_regenerates.begin() + static_cast<std::ptrdiff_t>(a)) {
        error = who + ": buffer " + std::to_string(x) + " is listed twice among the regenerated buffers";
        return false;
      }
      const std::size_t j = s.entry_before(p, x, ev.restore_before);
      if (j == SIZE_MAX || p.evictions[j].restore_before < ev.restore_before) {
        error = who + ": also_regenerates buffer " + std::to_string(x) +
                " has no eviction of its own that is in progress before launch " + std::to_string(ev.restore_before);
        return false;
      }
      const eviction& own = p.evictions[j];
      if (!own.recipe.empty() || !own.also_regenerates.empty()) {
        error = who + ": also_regenerates buffer " + std::to_string(x) + " has its own recipe in eviction " +
                std::to_string(j);
        return false;
      }
      if (s.claimed_by[j] != SIZE_MAX) {
        error = who + ": buffer " + std::to_string(x) + " is already regenerated by eviction " +
                std::to_string(s.claimed_by[j]);
        return false;
      }
      s.claimed_by[j] = k;
    }
  }
  for (std::size_t j = 0; j < ne; ++j) {
    if (s.claimed_by[j] == SIZE_MAX) continue;
    if (s.claimed_by[j] == j || s.claimed_by[s.claimed_by[j]] != SIZE_MAX) {
      error = entry_label(p, j) + ": regenerated by an eviction that is itself regenerated by another";
      return false;
    }
    s.regenerated_at[j] = p.evictions[s.claimed_by[j]].restore_before;
    s.order[j] = s.claimed_by[j];
  }

  if (!prepare_offloads(p, s.planned, s.offload_of, error)) return false;
  // Packs: planned members (offloaded ones for an offloaded pack), in allocation order, at
  // offsets that do not overlap.
  s.pack_of.assign(nb, none);
  for (std::size_t j = 0; j < p.packs.size(); ++j) {
    const pack& pk = p.packs[j];
    const entry_name who{p, j, true};
    if (pk.members.empty() || pk.offsets.size() != pk.members.size()) {
      error = who + ": needs members, each with an offset";
      return false;
    }
    std::size_t end = 0;
    for (std::size_t i = 0; i < pk.members.size(); ++i) {
      const buffer_id x = pk.members[i];
      if (x >= nb || (pk.offloaded ? s.offload_of[x] == none : !s.planned[x])) {
        error = who + ": member " + std::to_string(x) + " is not a buffer some " +
                (pk.offloaded ? "offload" : "eviction") + " targets";
        return false;
      }
      if (pk.offloaded) {
        const offload& o = p.offloads[s.offload_of[x]];
        const offload& first = p.offloads[s.offload_of[pk.members[0]]];
        if (o.evict_after != first.evict_after || o.release_before != first.release_before ||
            o.fetch_after != first.fetch_after || o.restore_before != first.restore_before) {
          error = who + ": member " + std::to_string(x) + " is offloaded at other points than the first member " +
                  std::to_string(pk.members[0]) + " (an offloaded pack moves as one; Note [Offload packs])";
          return false;
        }
      }
      if (s.pack_of[x] != none) {
        error = who + ": buffer " + std::to_string(x) + " is already in pack " + std::to_string(s.pack_of[x]);
        return false;
      }
      if (i > 0 && it.buffers[x].alloc_index <= it.buffers[pk.members[i - 1]].alloc_index) {
        error = who + ": members are not in allocation order (buffer " + std::to_string(x) + ")";
        return false;
      }
      if (it.buffers[x].stream != it.buffers[pk.members[0]].stream) {
        error = who + ": buffer " + std::to_string(x) + " is allocated on stream " +
                std::to_string(it.buffers[x].stream) + ", the pack's first member on stream " +
                std::to_string(it.buffers[pk.members[0]].stream);
        return false;
      }
      if (pk.offsets[i] % unplanned_rounding != 0 || pk.offsets[i] < end) {
        error = who + ": buffer " + std::to_string(x) + " is at offset " + std::to_string(pk.offsets[i]) +
                ", which is not a multiple of 512 at or after the previous member's end " + std::to_string(end);
        return false;
      }
      end = pk.offsets[i] + round_up(it.buffers[x].size, unplanned_rounding);
      s.pack_of[x] = static_cast<std::uint32_t>(j);
    }
    if (pk.bytes < end) {
      error = who + ": " + std::to_string(pk.bytes) + " bytes do not hold its members (" + std::to_string(end) + ")";
      return false;
    }
  }
  return true;
}

void simulator::levels(const plan& p, const prepared& s, std::vector<std::size_t>& during,
                       std::vector<std::size_t>& restored_bytes, std::vector<std::uint64_t>& fresh_packs) const {
  const iteration& it = *it_;
  const std::size_t n = it.launches.size();
  const std::size_t g = granularity_of(it);
  const auto footprint = [&](buffer_id b) {
    return round_up(it.buffers[b].size, s.paged(b) ? g : unplanned_rounding);
  };
  const auto span_of = [&](const buffer& buf) {
    const std::size_t lo = std::min<std::size_t>(buf.alloc_at, n);
    const std::size_t hi = buf.free_at == none ? n : std::min<std::size_t>(buf.free_at, n);
    return std::pair{lo, hi};
  };
  std::vector<std::int64_t> delta(n + 1, 0);
  restored_bytes.assign(n + 1, 0);
  fresh_packs.clear();
  for (buffer_id b = 0; b < it.buffers.size(); ++b) {
    if (s.pack_of[b] != none) continue;
    const auto [lo, hi] = span_of(it.buffers[b]);
    if (lo >= hi) continue;
    const auto sz = static_cast<std::int64_t>(footprint(b));
    delta[lo] += sz;
    delta[hi] -= sz;
  }
  for (std::size_t k = 0; k < p.evictions.size(); ++k) {
    const eviction& ev = p.evictions[k];
    if (s.pack_of[ev.target] != none) continue;
    restored_bytes[s.regenerated_at[k]] += footprint(ev.target);
    const std::size_t lo = static_cast<std::size_t>(ev.evict_after) + 1;
    const std::size_t hi = s.regenerated_at[k];
    if (lo >= hi) continue;
    const auto sz = static_cast<std::int64_t>(footprint(ev.target));
    delta[lo] -= sz;
    delta[hi] += sz;
  }
  // An offloaded buffer is out from release_before to fetch_after (Note [Offload]).
  for (const offload& o : p.offloads) {
    if (s.pack_of[o.target] != none) continue;  // its pack's pages, below
    const std::size_t lo = o.release_before;
    const std::size_t hi = static_cast<std::size_t>(o.fetch_after) + 1;
    if (lo >= hi) continue;
    const auto sz = static_cast<std::int64_t>(footprint(o.target));
    delta[lo] -= sz;
    delta[hi] += sz;
  }
  // A pack holds its pages wherever at least one member is resident (Note [Packs]).
  std::vector<std::pair<std::size_t, int>> changes;  // (position, members gained or lost)
  std::vector<std::size_t> regenerations;
  for (std::size_t j = 0; j < p.packs.size(); ++j) {
    changes.clear();
    regenerations.clear();
    for (buffer_id x : p.packs[j].members) {
      const auto [lo, hi] = span_of(it.buffers[x]);
      if (lo >= hi) continue;
      changes.emplace_back(lo, 1);
      changes.emplace_back(hi, -1);
      for (std::uint32_t e = s.offsets[x]; e < s.offsets[x + 1]; ++e) {
        const std::size_t k = s.by_buffer[e];
        const std::size_t gap_lo = static_cast<std::size_t>(p.evictions[k].evict_after) + 1;
        const std::size_t gap_hi = s.regenerated_at[k];
        if (gap_lo >= gap_hi) continue;
        changes.emplace_back(gap_lo, -1);
        changes.emplace_back(gap_hi, 1);
        regenerations.push_back(gap_hi);
      }
      if (s.offload_of[x] != none) {  // an offloaded pack's member: out from release to fetch
        const offload& o = p.offloads[s.offload_of[x]];
        const std::size_t gap_lo = o.release_before;
        const std::size_t gap_hi = static_cast<std::size_t>(o.fetch_after) + 1;
        if (gap_lo < gap_hi) {
          changes.emplace_back(gap_lo, -1);
          changes.emplace_back(gap_hi, 1);
        }
      }
    }
    std::sort(changes.begin(), changes.end());
    std::sort(regenerations.begin(), regenerations.end());
    const auto pages = static_cast<std::int64_t>(round_up(p.packs[j].bytes, g));
    int count = 0;
    for (std::size_t c = 0; c < changes.size();) {
      const std::size_t at = changes[c].first;
      const int before = count;
      for (; c < changes.size() && changes[c].first == at; ++c) count += changes[c].second;
      if (before == 0 && count > 0) delta[at] += pages;
      if (before > 0 && count == 0) delta[at] -= pages;
      // Members coming back at `at` find the pages unmapped: the recipes map them.
      const auto [first, last] = std::equal_range(regenerations.begin(), regenerations.end(), at);
      const auto back = static_cast<int>(last - first);
      if (back > 0 && count - back == 0 && at < n) {
        restored_bytes[at] += static_cast<std::size_t>(pages);
        fresh_packs.push_back((static_cast<std::uint64_t>(at) << 32) | j);
      }
    }
  }
  std::sort(fresh_packs.begin(), fresh_packs.end());
  during.assign(n, 0);
  std::int64_t level = 0;
  for (std::size_t i = 0; i < n; ++i) {
    level += delta[i];
    during[i] = static_cast<std::size_t>(level);
  }
}

simulation simulator::run(const plan& p) const {
  const iteration& it = *it_;
  simulation out;
  // A plan's retentions must already be applied to the iteration this simulator was made
  // for (simulate() does that): the lifetimes are what the rules below check.
  for (const retention& r : p.retentions) {
    if (r.buffer >= it.buffers.size() || it.buffers[r.buffer].free_at != r.release_before) {
      out.error = "retention of buffer " + std::to_string(r.buffer) +
                  " is not applied to the iteration (simulate on with_retentions)";
      return out;
    }
  }
  prepared s;
  if (!prepare(p, s, out.error)) return out;
  const std::size_t n = it.launches.size();
  const std::size_t nb = it.buffers.size();
  const std::size_t ne = p.evictions.size();
  const std::size_t g = granularity_of(it);

  // 4. Recipes: closed, replayable, ordered, before their restore point.
  std::vector<std::uint32_t> in_regen(nb, 0), in_temp(nb, 0), need(nb, 0), need_epoch(nb, 0);
  std::vector<std::uint32_t> in_recipe(n, 0);
  std::vector<buffer_id> needed;
  std::uint32_t epoch = 0;
  for (std::size_t k = 0; k < ne; ++k) {
    if (s.claimed_by[k] != SIZE_MAX) continue;
    const eviction& ev = p.evictions[k];
    const entry_name who{p, k};
    const launch_id t = ev.restore_before;
    ++epoch;
    in_regen[ev.target] = epoch;
    for (buffer_id x : ev.also_regenerates) in_regen[x] = epoch;
    for (buffer_id x : ev.temporaries) {
      if (in_regen[x] == epoch) {
        out.error = who + ": buffer " + std::to_string(x) + " is both regenerated and a temporary";
        return out;
      }
      in_temp[x] = epoch;
    }
    for (buffer_id x : ev.temporaries) {
      // The runtime starts a live temporary's scratch from its bytes (Note [Recipe scratch]).
      if (s.offloaded_at(p, x, t) && reads_on_entry(it, ev.recipe, x)) {
        out.error = who + ": the recipe reads buffer " + std::to_string(x) + " (a temporary) on entry, which is " +
                    "offloaded (offload " + std::to_string(s.offload_of[x]) + ") before launch " + std::to_string(t);
        return out;
      }
    }
    for (std::size_t i = 0; i < ev.recipe.size(); ++i) {
      const launch_id l = ev.recipe[i];
      if (i > 0 && ev.recipe[i - 1] >= l) {
        out.error = who + ": recipe launches must be strictly ascending (launch " + std::to_string(l) + ")";
        return out;
      }
      if (l >= t) {
        out.error = who + ": recipe launch " + std::to_string(l) + " does not come before restore_before " +
                    std::to_string(t);
        return out;
      }
      if (!it.launches[l].replayable) {
        out.error = who + ": recipe launch " + std::to_string(l) + " is not replayable";
        return out;
      }
      in_recipe[l] = epoch;
    }
    needed.clear();
    auto set_need = [&](buffer_id x, launch_id before) {
      if (need_epoch[x] == epoch) return;  // sweeping downwards: the first need is the latest
      need_epoch[x] = epoch;
      need[x] = before;
      needed.push_back(x);
    };
    set_need(ev.target, t);
    for (buffer_id x : ev.also_regenerates) set_need(x, t);
    for (std::size_t i = ev.recipe.size(); i-- > 0;) {
      const launch_id l = ev.recipe[i];
      const launch& ln = it.launches[l];
      auto w_it = ln.written.begin();
      for (buffer_id x : ln.touched) {
        while (w_it != ln.written.end() && *w_it < x) ++w_it;
        const bool writes = w_it != ln.written.end() && *w_it == x;
        if (in_regen[x] == epoch || in_temp[x] == epoch) {
          const bool value_flows = need_epoch[x] == epoch && need[x] > l;
          if (!value_flows && !writes) set_need(x, l);
          continue;
        }
        if (writes) {
          out.error = who + ": recipe launch " + std::to_string(l) + " writes buffer " + std::to_string(x) +
                      ", which is neither regenerated nor a temporary";
          return out;
        }
        if (s.offloaded_at(p, x, t)) {
          out.error = who + ": recipe launch " + std::to_string(l) + " reads buffer " + std::to_string(x) +
                      ", which is offloaded (offload " + std::to_string(s.offload_of[x]) + ") before launch " +
                      std::to_string(t);
          return out;
        }
        if (!df_.allocated_at(x, t) || s.evicted_at_recipe(p, x, t, k)) {
          out.error = who + ": recipe launch " + std::to_string(l) + " reads buffer " + std::to_string(x) +
                      ", which is not resident before launch " + std::to_string(t) +
                      " and is neither regenerated nor a temporary";
          return out;
        }
        if (df_.written_in(x, l, t)) {
          out.error = who + ": recipe launch " + std::to_string(l) + " reads buffer " + std::to_string(x) +
                      ", which is written again before launch " + std::to_string(t);
          return out;
        }
      }
    }
    for (buffer_id x : needed) {
      const buffer& b = it.buffers[x];
      if (b.alloc_index == none) {
        out.error = who + ": buffer " + std::to_string(x) + " would need its contents from before the iteration";
        return out;
      }
      for (launch_id w : df_.writers_in(x, b.alloc_at, need[x])) {
        if (in_recipe[w] != epoch) {
          out.error = who + ": buffer " + std::to_string(x) + " is written by launch " + std::to_string(w) +
                      " before it is needed, but the recipe does not replay that launch";
          return out;
        }
      }
    }
  }

  // 5. Memory.
  auto footprint = [&](buffer_id b) {
    return round_up(it.buffers[b].size, s.paged(b) ? g : unplanned_rounding);
  };
  std::vector<std::size_t> during, restored_bytes;
  std::vector<std::uint64_t> fresh_packs;
  levels(p, s, during, restored_bytes, fresh_packs);
  for (std::size_t i = 0; i < n; ++i) {
    if (during[i] > out.peak) {
      out.peak = during[i];
      out.peak_at = static_cast<launch_id>(i);
      out.peak_in_recipe = false;
    }
  }
  // Recipe moments, in (restore point, plan order).
  std::vector<std::size_t> carriers;
  for (std::size_t k = 0; k < ne; ++k) {
    if (s.claimed_by[k] == SIZE_MAX) carriers.push_back(k);
  }
  std::sort(carriers.begin(), carriers.end(), [&](std::size_t a, std::size_t b) {
    const launch_id ra = p.evictions[a].restore_before;
    const launch_id rb = p.evictions[b].restore_before;
    return ra != rb ? ra < rb : a < b;
  });
  std::vector<std::uint32_t> mapped_here;  // packs the recipes at this restore point mapped so far
  std::vector<std::uint32_t> slot;  // scratch_bytes' table, made at the first recipe with temporaries
  for (std::size_t c = 0; c < carriers.size();) {
    const launch_id t = p.evictions[carriers[c]].restore_before;
    std::size_t running = during[t] - restored_bytes[t];
    mapped_here.clear();
    // What regenerating x adds: its pages, or its pack's the first time they are mapped here.
    const auto adds = [&](buffer_id x) -> std::size_t {
      const std::uint32_t j = s.pack_of[x];
      if (j == none) return footprint(x);
      if (!std::binary_search(fresh_packs.begin(), fresh_packs.end(), (static_cast<std::uint64_t>(t) << 32) | j) ||
          std::find(mapped_here.begin(), mapped_here.end(), j) != mapped_here.end())
        return 0;
      mapped_here.push_back(j);
      return round_up(p.packs[j].bytes, g);
    };
    for (; c < carriers.size() && p.evictions[carriers[c]].restore_before == t; ++c) {
      const eviction& ev = p.evictions[carriers[c]];
      running += adds(ev.target);
      for (buffer_id x : ev.also_regenerates) running += adds(x);
      if (slot.empty() && !ev.temporaries.empty()) slot.assign(nb, none);
      const std::size_t scratch = scratch_bytes(it, ev.recipe, ev.temporaries, slot);
      if (running + scratch > out.peak) {
        out.peak = running + scratch;
        out.peak_at = t;
        out.peak_in_recipe = true;
      }
    }
  }

  for (const eviction& ev : p.evictions) {
    out.recomputed_launches += ev.recipe.size();
    for (launch_id l : ev.recipe) out.added_compute_s += it.launches[l].cost_s;
  }
  out.evicted_buffers = static_cast<std::size_t>(std::count(s.planned.begin(), s.planned.end(), std::uint8_t{1}));
  if (!link_timeline(p, out)) return out;
  out.valid = true;
  return out;
}

std::vector<std::size_t> simulator::timeline(const plan& p) const {
  prepared s;
  std::string error;
  if (!prepare(p, s, error)) return {};
  std::vector<std::size_t> during, restored_bytes;
  std::vector<std::uint64_t> fresh_packs;
  levels(p, s, during, restored_bytes, fresh_packs);
  return during;
}

std::size_t scratch_bytes(const iteration& it, const std::vector<launch_id>& recipe,
                          const std::vector<buffer_id>& temporaries, std::vector<std::uint32_t>& slot) {
  if (temporaries.empty()) return 0;
  // Each temporary holds its bytes from the first recipe launch that touches it to the
  // last; the most held at once is what the recipe needs. One pass over the recipe's
  // touches, each looked up in `slot` by buffer id: multi-pass plans rebuild whole
  // chains, with thousands of launches and temporaries, and the search simulates every
  // recipe of every plan it tries.
  std::vector<buffer_id> temps;
  std::vector<std::size_t> first, last;
  temps.reserve(temporaries.size());
  first.reserve(temporaries.size());
  last.reserve(temporaries.size());
  std::vector<std::int64_t> delta(recipe.size() + 1, 0);
  for (buffer_id x : temporaries) {
    if (slot[x] != none) continue;  // listed twice
    slot[x] = static_cast<std::uint32_t>(temps.size());
    temps.push_back(x);
    first.push_back(recipe.size());
    last.push_back(0);
  }
  for (std::size_t i = 0; i < recipe.size(); ++i) {
    for (buffer_id x : it.launches[recipe[i]].touched) {
      const std::uint32_t k = slot[x];
      if (k == none) continue;
      first[k] = std::min(first[k], i);
      last[k] = i;
    }
  }
  for (std::size_t k = 0; k < temps.size(); ++k) {
    slot[temps[k]] = none;
    if (first[k] == recipe.size()) first[k] = last[k] = 0;
    const auto b = static_cast<std::int64_t>(round_up(it.buffers[temps[k]].size, unplanned_rounding));
    delta[first[k]] += b;
    delta[last[k] + 1] -= b;
  }
  std::int64_t level = 0, most = 0;
  for (auto d : delta) {
    level += d;
    most = std::max(most, level);
  }
  return round_up(static_cast<std::size_t>(most), granularity_of(it));
}

std::size_t scratch_bytes(const iteration& it, const std::vector<launch_id>& recipe,
                          const std::vector<buffer_id>& temporaries) {
  if (temporaries.empty()) return 0;
  std::vector<std::uint32_t> slot(it.buffers.size(), none);
  return scratch_bytes(it, recipe, temporaries, slot);
}

simulation simulate(const iteration& it, const plan& p, const link_model& link, std::size_t host_budget) {
  if (p.retentions.empty()) return simulator(it, link, host_budget).run(p);
  if (std::string problem = check_retentions(it, p.retentions); !problem.empty()) {
    simulation out;
    out.error = std::move(problem);
    return out;
  }
  return simulator(with_retentions(it, p.retentions), link, host_budget).run(p);
}

void record(const simulation& s, plan& p) {
  p.predicted_peak = s.peak;
  p.added_compute_s = s.added_compute_s;
  p.recomputed_launches = s.recomputed_launches;
  p.offloaded_bytes = s.offloaded_bytes;
  p.host_bytes = s.host_bytes;
  p.link_busy_s = s.link_busy_s;
  p.predicted_stall_s = s.predicted_stall_s;
  p.predicted_time_s = s.predicted_time_s;
}

simulation simulate_into(const iteration& it, plan& p, const link_model& link, std::size_t host_budget) {
  simulation s = simulate(it, p, link, host_budget);
  if (s.valid) record(s, p);
  return s;
}

std::string check_iteration(const iteration& it) {
  const std::size_t n = it.launches.size();
  const std::size_t nb = it.buffers.size();
  std::vector<std::vector<launch_id>> users(nb);
  for (launch_id l = 0; l < n; ++l) {
    const launch& ln = it.launches[l];
    const std::string who = "launch " + std::to_string(l);
    if (!it.kernel_names.empty() && ln.kernel >= it.kernel_names.size()) return who + ": kernel id out of range";
    for (std::size_t i = 0; i < ln.touched.size(); ++i) {
      if (ln.touched[i] >= nb) return who + ": touches buffer " + std::to_string(ln.touched[i]) + ", which does not exist";
      if (i > 0 && ln.touched[i - 1] >= ln.touched[i]) return who + ": touched buffers are not strictly ascending";
      users[ln.touched[i]].push_back(l);
    }
    for (std::size_t i = 0; i < ln.written.size(); ++i) {
      if (i > 0 && ln.written[i - 1] >= ln.written[i]) return who + ": written buffers are not strictly ascending";
      if (!std::binary_search(ln.touched.begin(), ln.touched.end(), ln.written[i])) {
        return who + ": writes buffer " + std::to_string(ln.written[i]) + " without touching it";
      }
    }
    if (!(ln.cost_s >= 0.0)) return who + ": negative or undefined cost";
  }
  for (buffer_id b = 0; b < nb; ++b) {
    const buffer& buf = it.buffers[b];
    const std::string who = "buffer " + std::to_string(b);
    if (buf.users != users[b]) return who + ": users do not match the launches that touch it";
    if (buf.alloc_at > n) return who + ": allocated after the last position";
    if (buf.free_at != none && (buf.free_at < buf.alloc_at || buf.free_at > n)) {
      return who + ": freed before it is allocated or after the last position";
    }
    if (buf.alloc_index == none && buf.alloc_at != 0) return who + ": allocated before the iteration but alloc_at != 0";
    for (launch_id u : buf.users) {
      if (u < buf.alloc_at || (buf.free_at != none && u >= buf.free_at)) {
        return who + ": used by launch " + std::to_string(u) + " outside its lifetime";
      }
    }
  }
  for (buffer_id c : it.candidates) {
    if (c >= nb) return "candidate " + std::to_string(c) + " is not a buffer";
  }
  if (n > 0 && it.turning_point >= n) return "the turning point is not a launch of the iteration";
  return {};
}

}  // namespace sublinear::policy
