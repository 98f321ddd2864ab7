// Note [Write check work] is in write_check_work.hpp.
#include "runtime/write_check_work.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <iterator>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "device/vmm.hpp"
#include "policy/plan.hpp"
#include "runtime/engine_types.hpp"

namespace sublinear::runtime {

using policy::buffer_id;
using policy::launch_id;
using policy::none;

write_check_index index_write_checks(const policy::plan& plan, const policy::iteration& g) {
  const std::size_t n = g.launches.size();
  write_check_index ix;
  ix.hash_before_at.assign(n + 1, {});
  ix.hash_after_at.assign(n + 1, {});
  ix.guarded_inputs.assign(plan.evictions.size(), {});
  ix.productions.assign(plan.evictions.size(), {});
  for (std::size_t i = 0; i < plan.evictions.size(); ++i) {
    const auto& e = plan.evictions[i];
    if (e.recipe.empty()) continue;
    std::unordered_set<buffer_id> made(e.temporaries.begin(), e.temporaries.end());
    made.insert(e.target);
    made.insert(e.also_regenerates.begin(), e.also_regenerates.end());
    for (launch_id l : e.recipe) made.insert(g.launches[l].written.begin(), g.launches[l].written.end());
    std::unordered_map<buffer_id, launch_id> first_read, last_write_of;
    for (launch_id l : e.recipe) {
      for (buffer_id u : g.launches[l].touched) {
        if (made.count(u) != 0) continue;
        ix.hash_before_at[l].push_back(u);
        ix.hash_after_at[l].push_back(u);
        first_read.emplace(u, l);
      }
      for (buffer_id w : g.launches[l].written) last_write_of[w] = l;
    }
    auto& guarded = ix.guarded_inputs[i];
    guarded.assign(first_read.begin(), first_read.end());
    std::sort(guarded.begin(), guarded.end());
    auto note_production = [&](buffer_id t) {
      const auto w = last_write_of.find(t);
      if (w == last_write_of.end()) return;
      ix.productions[i].emplace_back(t, w->second);
      ix.hash_after_at[w->second].push_back(t);
    };
    note_production(e.target);
    for (buffer_id t : e.also_regenerates) note_production(t);
  }
  for (auto* lists : {&ix.hash_before_at, &ix.hash_after_at})
    for (auto& v : *lists) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
  return ix;
}

namespace {

// Stamps as the engine's: 2l just before launch l, 2l + 1 just after it.
std::uint32_t before_stamp(std::size_t l) { return static_cast<std::uint32_t>(2 * l); }
std::uint32_t after_stamp(std::size_t l) { return static_cast<std::uint32_t>(2 * l + 1); }

// One step of the walk. At a stamp before a launch, restores come first (phase 0), then
// the hashes listed before it (1); after a launch, the listed hashes (0), then releases (1).
struct step {
  std::uint32_t stamp = 0;
  std::uint8_t phase = 0;
  enum class kind : std::uint8_t { listed, release, restore } what = kind::listed;
  std::size_t index = 0;  // buffer (listed), plan entry (release, restore)
};

}  // namespace

write_check_work count_write_checks(const write_check_index& ix, const policy::plan& plan,
                                    const policy::iteration& g) {
  const std::size_t n = g.launches.size();
  const std::size_t nb = g.buffers.size();
  write_check_work w;
  std::vector<std::vector<launch_id>> uses(nb);
  for (launch_id l = 0; l < n; ++l)
    for (buffer_id b : g.launches[l].touched) uses[b].push_back(l);
  const auto touched_between = [&](buffer_id b, std::uint32_t from, std::uint32_t to) {
    const auto& u = uses[b];
    const auto it = std::lower_bound(u.begin(), u.end(), static_cast<launch_id>((from + 1) / 2));
    return it != u.end() && after_stamp(*it) <= to;
  };
  // Offloaded blocks' pages are given back over these stamps; evicted ones from their
  // release (in the walk's order) to their regeneration.
  std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> offloaded(nb);
  for (const auto& o : plan.offloads)
    offloaded[o.target].emplace_back(before_stamp(o.release_before), after_stamp(o.fetch_after));
  std::vector<std::uint8_t> evicted(nb, 0);
  const auto present = [&](buffer_id b, std::uint32_t s) {
    const auto& buf = g.buffers[b];
    if (!buf.persistent()) {
      if (s < before_stamp(buf.alloc_at)) return false;
      if (buf.free_at != none && s >= before_stamp(buf.free_at)) return false;
    }
    return evicted[b] == 0 && std::none_of(offloaded[b].begin(), offloaded[b].end(),
                                          [&](const auto& r) { return s >= r.first && s <= r.second; });
  };
  std::vector<std::int32_t> carrier(nb, -1);  // as the engine's entry_of
  for (std::size_t i = 0; i < plan.evictions.size(); ++i) {
    const auto& e = plan.evictions[i];
    if (carrier[e.target] < 0 || !e.recipe.empty()) carrier[e.target] = static_cast<std::int32_t>(i);
  }
  for (std::size_t i = 0; i < plan.evictions.size(); ++i)
    for (buffer_id b : plan.evictions[i].also_regenerates)
      if (carrier[b] < 0 || plan.evictions[static_cast<std::size_t>(carrier[b])].recipe.empty())
        carrier[b] = static_cast<std::int32_t>(i);

  std::vector<step> steps;
  for (std::size_t l = 0; l < n; ++l) {
    for (buffer_id b : ix.hash_before_at[l]) steps.push_back({before_stamp(l), 1, step::kind::listed, b});
    for (buffer_id b : ix.hash_after_at[l]) steps.push_back({after_stamp(l), 0, step::kind::listed, b});
  }
  for (std::size_t i = 0; i < plan.evictions.size(); ++i) {
    const auto& e = plan.evictions[i];
    if (e.evict_after < n) steps.push_back({after_stamp(e.evict_after), 1, step::kind::release, i});
    if (!e.recipe.empty() && e.restore_before <= n) steps.push_back({before_stamp(e.restore_before), 0, step::kind::restore, i});
  }
  std::stable_sort(steps.begin(), steps.end(), [](const step& a, const step& b) {
    return std::tie(a.stamp, a.phase) < std::tie(b.stamp, b.phase);
  });

  constexpr std::uint32_t never = ~std::uint32_t{0};
  std::vector<std::uint32_t> last(nb, never);   // stamp of the block's last hash
  std::vector<std::uint8_t> replayed(nb, 0);    // a replay touched it since
  std::vector<std::uint32_t> released(nb, never);
  std::unordered_map<buffer_id, std::size_t> copied_version;
  // The engine's observe: true when it takes a new hash.
  const auto observe = [&](buffer_id b, std::uint32_t s) {
    if (!present(b, s)) return false;
    if (last[b] != never) {
      if (last[b] == s) return false;
      if (!replayed[b] && !touched_between(b, last[b], s)) {
        last[b] = s;
        return false;
      }
    }
    last[b] = s;
    replayed[b] = 0;
    ++w.hashes;
    w.hashed_bytes += g.buffers[b].size;
    return true;
  };
  const auto writes_before = [&](buffer_id b, std::size_t pos) {  // the block's version after launch pos
    std::size_t v = 0;
    for (launch_id l : uses[b]) {
      if (l > pos) break;
      v += std::binary_search(g.launches[l].written.begin(), g.launches[l].written.end(), b) ? 1 : 0;
    }
    return v;
  };
  // release_check: the target and the inputs read so far, then a comparison that waits
  // when any hash is new; keep_input_copies: inputs a kernel touches before the target's
  // next use.
  const auto release = [&](const policy::eviction& e, const auto& guarded, std::uint32_t stamp) {
    const buffer_id b = e.target;
    bool fresh = observe(b, stamp);
    for (const auto& [u, first] : guarded)
      if (before_stamp(first) < stamp) fresh = observe(u, stamp) || fresh;
    w.waits += fresh ? 1 : 0;
    released[b] = stamp;
    const auto& ub = uses[b];
    const auto next = std::upper_bound(ub.begin(), ub.end(), e.evict_after);
    if (next == ub.end()) return;
    for (const auto& [u, first] : guarded) {
      const auto& ubuf = g.buffers[u];
      if (ubuf.persistent() || !present(u, stamp)) continue;
      const std::size_t version = writes_before(u, e.evict_after);
      if (const auto k = copied_version.find(u); k != copied_version.end() && k->second == version) continue;
      if (last[u] == never || last[u] < before_stamp(first)) continue;  // no hash of what its readers read yet
      bool exposed = false;
      const auto& uu = uses[u];
      for (auto l = std::upper_bound(uu.begin(), uu.end(), e.evict_after); l != uu.end() && *l < *next && !exposed; ++l)
        exposed = g.launches[*l].kind == policy::launch_kind::kernel &&
                  !std::binary_search(g.launches[*l].written.begin(), g.launches[*l].written.end(), u);
      if (!exposed) continue;
      copied_version[u] = version;
      ++w.copies;
      ++w.waits;
      w.copied_bytes += ubuf.size;
    }
  };
  for (const step& s : steps) {
    if (s.what == step::kind::listed) {
      observe(static_cast<buffer_id>(s.index), s.stamp);
      continue;
    }
    const auto& e = plan.evictions[s.index];
    const std::int32_t c = e.recipe.empty() ? carrier[e.target] : static_cast<std::int32_t>(s.index);
    const bool regenerated = c >= 0 && !plan.evictions[static_cast<std::size_t>(c)].recipe.empty();
    if (s.what == step::kind::release && present(e.target, s.stamp)) {
      if (regenerated) release(e, ix.guarded_inputs[static_cast<std::size_t>(c)], s.stamp);
      evicted[e.target] = 1;
      continue;
    }
    if (s.what != step::kind::restore || !regenerated) continue;
    const auto& guarded = ix.guarded_inputs[static_cast<std::size_t>(c)];
    // A restore: inputs touched since the release are hashed and waited for, the replay
    // touches its launches' blocks, and each regenerated target is hashed once.
    std::uint32_t from = never;
    std::vector<buffer_id> targets{e.target};
    targets.insert(targets.end(), e.also_regenerates.begin(), e.also_regenerates.end());
    for (buffer_id b : targets) from = std::min(from, released[b]);
    const std::unordered_set<buffer_id> temps(e.temporaries.begin(), e.temporaries.end());
    if (from != never) {
      for (const auto& [u, first] : guarded) {
        if (temps.count(u) != 0 || !present(u, s.stamp) || !touched_between(u, from, s.stamp)) continue;
        if (observe(u, s.stamp)) ++w.waits;  // a new hash: the engine waits for it
      }
    }
    for (launch_id l : e.recipe)
      for (buffer_id u : g.launches[l].touched)
        if (temps.count(u) == 0) replayed[u] = 1;
    for (buffer_id b : targets) {
      evicted[b] = 0;
      if (released[b] == never || released[b] > s.stamp) continue;
      released[b] = never;
      ++w.hashes;
      w.hashed_bytes += g.buffers[b].size;
      replayed[b] = 1;
    }
  }
  return w;
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

hash_cost probe_hash_cost(replay_device& dev, device::vmm& vmm, std::size_t large_granules, int rounds) {
  hash_cost out;
  out.device = vmm.name();
  const std::size_t granule = vmm.granularity();
  large_granules = std::max<std::size_t>(large_granules, 2);
  rounds = std::max(rounds, 1);
  const std::size_t small = granule, large = granule * large_granules;
  void* address = nullptr;
  device::chunk_handle chunk = 0;
  if (device::vmm_status s = vmm.reserve(large, &address); s != device::vmm_status::ok) {
    out.error = std::string("reserve: ") + device::to_string(s) + " " + vmm.last_error();
    return out;
  }
  device::vmm_status s = vmm.create_chunk(large, &chunk);
  if (s == device::vmm_status::ok) {
    s = vmm.map(address, large, chunk);
    if (s == device::vmm_status::ok) s = vmm.set_access(address, large);
  }
  if (s != device::vmm_status::ok) {
    out.error = std::string("map: ") + device::to_string(s) + " " + vmm.last_error();
  } else {
    try {
      dev.fill(address, 0x5A, large, nullptr);
      // Issue: a batch queued back to back (the stream busy with the first, as in an
      // iteration), per hash. Waits and bytes: one hash waited for, at two sizes. Least of
      // the rounds: what the work costs without another thread's interference.
      constexpr int batch = 16;
      std::vector<double> issued, waited[2];
      const std::size_t sizes[2] = {small, large};
      std::vector<std::shared_future<std::uint64_t>> queued(batch);
      for (int r = 0; r < rounds; ++r) {
        const double t0 = now_s();
        for (auto& h : queued) h = dev.hash(address, small, nullptr);
        issued.push_back((now_s() - t0) / batch);
        for (auto& h : queued) (void)h.get();
        for (int k = 0; k < 2; ++k) {
          const double t1 = now_s();
          (void)dev.hash(address, sizes[k], nullptr).get();
          waited[k].push_back(now_s() - t1);
        }
      }
      const auto least = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
      out.issue_s = least(issued);
      const double w0 = least(waited[0]), w1 = least(waited[1]);
      out.byte_s = std::max(0.0, (w1 - w0) / static_cast<double>(large - small));
      out.wait_s = std::max(0.0, w0 - out.issue_s - out.byte_s * static_cast<double>(small));
    } catch (const std::exception& e) {
      out.error = std::string("hash: ") + e.what();
    }
    (void)vmm.unmap(address, large);
  }
  if (chunk != 0) (void)vmm.release_chunk(chunk);
  (void)vmm.release(address, large);
  if (!out.error.empty()) out.issue_s = out.wait_s = out.byte_s = 0.0;
  return out;
}

}  // namespace sublinear::runtime
