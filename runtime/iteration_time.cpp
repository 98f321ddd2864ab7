// Note [Predicted iteration time] is in iteration_time.hpp.
#include "runtime/iteration_time.hpp"

#include <algorithm>
#include <unordered_set>

#include "policy/iteration.hpp"
#include "policy/plan.hpp"

namespace sublinear::runtime {

namespace {
std::size_t whole_granules(std::size_t bytes, std::size_t granularity) {
  return granularity == 0 ? bytes : (bytes + granularity - 1) / granularity * granularity;
}
}  // namespace

remap_work remaps_of(const policy::plan& plan, const policy::iteration& traced, std::size_t granularity) {
  remap_work w;
  std::unordered_set<policy::buffer_id> packed;
  for (const policy::pack& p : plan.packs) {
    packed.insert(p.members.begin(), p.members.end());
    ++w.map_backs;
    w.bytes += whole_granules(p.bytes, granularity);
  }
  for (const policy::eviction& e : plan.evictions) {
    if (packed.count(e.target) != 0) continue;
    ++w.map_backs;
    w.bytes += whole_granules(traced.buffers[e.target].size, granularity);
  }
  for (const policy::offload& o : plan.offloads) {
    if (packed.count(o.target) != 0) continue;  // its pack's block is mapped back once
    ++w.map_backs;
    w.bytes += whole_granules(traced.buffers[o.target].size, granularity);
  }
  return w;
}

double host_s_per_launch(const host_cost_sample& s) noexcept {
  if (s.launches == 0) return 0.0;
  return std::max(0.0, s.active_s - s.device_s - s.observation_s - s.recording_s) / static_cast<double>(s.launches);
}

iteration_time predict_iteration_time(double device_s, double per_launch, std::size_t traced_launches,
                                      std::size_t replayed_launches, const remap_work& remaps,
                                      const device::vmm_cycle_cost& cycle, const write_check_work& checks,
                                      const hash_cost& hash) noexcept {
  iteration_time t;
  t.device_s = device_s;
  t.host_s_per_launch = per_launch;
  t.launches = traced_launches + replayed_launches;
  t.replayed_launches = replayed_launches;
  t.host_s = per_launch * static_cast<double>(t.launches);
  t.remaps = remaps;
  t.vmm_calls = remaps.cycles() * cycle.calls_per_cycle;
  t.vmm_s = cycle.cost_s(remaps.cycles(), remaps.cycle_bytes());
  t.checks = checks;
  t.check_s = hash.cost_s(checks);
  t.predicted_s = device_s + t.host_s + t.vmm_s + t.check_s;
  return t;
}

}  // namespace sublinear::runtime
