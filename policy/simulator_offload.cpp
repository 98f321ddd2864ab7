// The simulator's offload half: the rules an offload entry must follow, and the link
// timeline that turns launch costs, recipes and copies into predicted time.
//
// Note [Link timeline]
// Rationale: an offload costs no compute but may cost time: a copy that is not back when
//   its consumer starts stalls the compute stream, and one direction of the link carries
//   one copy at a time. The planner's objective (added compute + stalls) and the
//   prediction the runtime compares with its measured iteration both come from here.
// Approach: launches run one after another (streams serialised, as for recipes); before
//   launch i, in this order: (1) the launch waits for the device->host copy of every
//   offload with release_before = i (the pages are released then); (2) the recipes
//   restoring at i run (their launches' costs); (3) it waits for the host->device copy of
//   every offload with restore_before = i; then launch i runs for its cost_s. After launch
//   i ends, the device->host copies of the offloads with evict_after = i join their queue
//   (deadline order: release_before, then plan order), then the host->device copies of
//   those with fetch_after = i (restore_before, then plan order); the runtime queues them
//   so (Note [Offload execution]). Each direction is a FIFO queue: a copy starts when it
//   is queued and the copy before it is done; a fetch also not before its own
//   device->host copy is done. The last of the copies queued at one launch ends at the
//   same time in any order, so deadline order brings the earlier-needed ones forward at
//   no cost to the last. A copy takes link_direction::copy_s of the buffer's size. Waits
//   are stalls; predicted time = the sum of launch costs + added compute + stalls. Host
//   memory: host_bytes is the pool the runtime makes, laid out slot by slot as it will
//   be (Note [Host pool layout]: each offload holds round_up(size, 512) over positions
//   evict_after + 1 ..= restore_before); over a nonzero host budget the plan is invalid.
// Limitations: streams that overlap in the trace are taken to run in sequence, so the
//   predicted time is an upper bound where they did overlap.
#include <algorithm>
#include <numeric>
#include <string>

#include "policy/host_layout.hpp"
#include "policy/offload_packs.hpp"
#include "policy/simulator.hpp"

namespace sublinear::policy {

namespace {

std::string offload_label(const plan& p, std::size_t j) {
  return "offload " + std::to_string(j) + " (buffer " +
         (p.offloads[j].target == none ? std::string("none") : std::to_string(p.offloads[j].target)) + ")";
}

}  // namespace

bool simulator::prepare_offloads(const plan& p, const std::vector<std::uint8_t>& planned,
                                 std::vector<std::uint32_t>& offload_of, std::string& error) const {
  const iteration& it = *it_;
  const std::size_t n = it.launches.size();
  const std::size_t nb = it.buffers.size();
  offload_of.assign(nb, none);
  if (!p.offloads.empty() && !link_.usable()) {
    error = "the plan offloads " + std::to_string(p.offloads.size()) +
            " buffers but the link model has no bandwidth (give both directions one)";
    return false;
  }
  for (std::size_t j = 0; j < p.offloads.size(); ++j) {
    const offload& o = p.offloads[j];
    const std::string who = offload_label(p, j);
    if (o.target >= nb) {
      error = who + ": the target is not a buffer of the iteration";
      return false;
    }
    const buffer& b = it.buffers[o.target];
    if (b.persistent()) {
      error = who + ": the target is not allocated and freed within the iteration, so it cannot be offloaded";
      return false;
    }
    if (b.never_evict) {
      error = who + ": the target is marked never_evict";
      return false;
    }
    if (planned[o.target]) {
      error = who + ": the target is also an eviction's target (a buffer is kept, recomputed or offloaded)";
      return false;
    }
    if (offload_of[o.target] != none) {
      error = who + ": the target is already offloaded by offload " + std::to_string(offload_of[o.target]);
      return false;
    }
    if (o.restore_before >= n || o.evict_after == none || o.release_before == none || o.fetch_after == none ||
        !(o.evict_after < o.release_before) || !(o.release_before <= static_cast<std::size_t>(o.fetch_after) + 1) ||
        !(o.fetch_after < o.restore_before)) {
      error = who + ": needs evict_after < release_before <= fetch_after + 1, fetch_after < restore_before and "
                    "restore_before a launch of the iteration; got " +
              std::to_string(o.evict_after) + ", " + std::to_string(o.release_before) + ", " +
              std::to_string(o.fetch_after) + ", " + std::to_string(o.restore_before);
      return false;
    }
    if (o.evict_after < b.alloc_at || !df_.allocated_at(o.target, o.restore_before)) {
      error = who + ": the target is not allocated over launches " + std::to_string(o.evict_after) + ".." +
              std::to_string(o.restore_before);
      return false;
    }
    if (df_.used_between(o.target, o.evict_after, o.restore_before)) {
      error = who + ": the target is used by launch " +
              std::to_string(df_.next_use_after(o.target, o.evict_after)) + " while offloaded";
      return false;
    }
    offload_of[o.target] = static_cast<std::uint32_t>(j);
  }
  return true;
}

bool simulator::link_timeline(const plan& p, simulation& out) const {
  const iteration& it = *it_;
  const std::size_t n = it.launches.size();
  const std::size_t m = p.offloads.size();
  std::vector<double> recipe_at(n + 1, 0.0);
  for (const eviction& ev : p.evictions) {
    for (launch_id l : ev.recipe) recipe_at[ev.restore_before] += it.launches[l].cost_s;
  }
  out.copies.assign(m, offload_times{});
  out.offloaded_buffers = m;
  const link_copies moved = copies_of(it, p);  // Note [Offload packs]: one copy per pack
  // Offload indices by each event's launch, in the order Note [Link timeline] gives.
  const auto by = [&](auto key, auto deadline) {
    std::vector<std::uint32_t> order(m);
    std::iota(order.begin(), order.end(), 0U);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const offload& x = p.offloads[a];
      const offload& y = p.offloads[b];
      return key(x) != key(y) ? key(x) < key(y) : deadline(x) < deadline(y);
    });
    return order;
  };
  const auto release = [](const offload& o) { return o.release_before; };
  const auto restore = [](const offload& o) { return o.restore_before; };
  const std::vector<std::uint32_t> to_host = by([](const offload& o) { return o.evict_after; }, release);
  const std::vector<std::uint32_t> to_device = by([](const offload& o) { return o.fetch_after; }, restore);
  const std::vector<std::uint32_t> releases = by(release, release);
  const std::vector<std::uint32_t> restores = by(restore, restore);
  std::size_t next_to_host = 0, next_to_device = 0, next_release = 0, next_restore = 0;
  double clock = 0.0, host_free = 0.0, device_free = 0.0;
  const auto wait_for = [&](double ready) {
    if (ready > clock) {
      out.predicted_stall_s += ready - clock;
      clock = ready;
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (; next_release < m && p.offloads[releases[next_release]].release_before == i; ++next_release)
      wait_for(out.copies[releases[next_release]].to_host_done);
    clock += recipe_at[i];
    for (; next_restore < m && p.offloads[restores[next_restore]].restore_before == i; ++next_restore)
      wait_for(out.copies[restores[next_restore]].to_device_done);
    clock += it.launches[i].cost_s;
    for (; next_to_host < m && p.offloads[to_host[next_to_host]].evict_after == i; ++next_to_host) {
      const std::uint32_t j = to_host[next_to_host];
      if (moved.carrier[j] != j) continue;
      const double copy = link_.to_host.copy_s(moved.bytes[j]);
      offload_times& c = out.copies[j];
      c.to_host_start = std::max(clock, host_free);
      c.to_host_done = host_free = c.to_host_start + copy;
      out.link_busy_s += copy;
    }
    for (; next_to_device < m && p.offloads[to_device[next_to_device]].fetch_after == i; ++next_to_device) {
      const std::uint32_t j = to_device[next_to_device];
      if (moved.carrier[j] != j) continue;
      const double copy = link_.to_device.copy_s(moved.bytes[j]);
      offload_times& c = out.copies[j];
      c.to_device_start = std::max({clock, device_free, c.to_host_done});
      c.to_device_done = device_free = c.to_device_start + copy;
      out.link_busy_s += copy;
    }
  }
  out.predicted_time_s = clock;

  for (std::size_t j = 0; j < m; ++j) {
    out.offloaded_bytes += moved.bytes[j];
    if (moved.carrier[j] != j) out.copies[j] = out.copies[moved.carrier[j]];  // rode on its pack's copy
  }
  // Host memory: the pool the runtime makes, slot for slot (Note [Host pool layout]).
  const host_layout pool = lay_out_host_pool(it, p);
  out.host_bytes = pool.pool_bytes;
  if (host_budget_ != 0 && out.host_bytes > host_budget_) {
    out.error = "the offloads' host pool takes " + std::to_string(out.host_bytes) + " bytes (" +
                std::to_string(pool.most_held) + " held at once at most, before launch " +
                std::to_string(pool.most_held_at) + "), over the host budget of " + std::to_string(host_budget_) +
                " bytes (offload fewer buffers, or raise the host budget)";
    return false;
  }
  return true;
}

}  // namespace sublinear::policy
