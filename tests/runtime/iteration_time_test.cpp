// The predicted iteration time (Note [Predicted iteration time] in runtime/iteration_time.hpp):
// its arithmetic, the launches the engine counts for it, the measure each planned iteration's
// prediction comes from (an iteration before it, never itself), active_s leaving out the time
// before an iteration's first call, and the report carrying it all. No wall-time thresholds:
// every check recomputes a figure from the reported ones or uses an injected cost.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "device/vmm_cost_probe.hpp"
#include "policy/iteration.hpp"
#include "policy/plan.hpp"
#include "runtime/host/host_runtime.hpp"
#include "runtime/iteration_time.hpp"
#include "runtime/report/report.hpp"
#include "chain_kernels.hpp"

namespace sublinear::runtime {
namespace {

using test::accumulate_kernel;
using test::accumulate_params;
using test::fill_kernel;
using test::fill_params;
using test::scale_kernel;
using test::scale_params;
using test::small_page_options;


TEST(IterationTime, HostCostPerLaunchIsTheUnexplainedTimeOverTheLaunches) {
  EXPECT_EQ(host_s_per_launch({0.75, 0.25, 4}), 0.125);
  EXPECT_EQ(host_s_per_launch({0.25, 0.75, 4}), 0.0) << "a device-bound iteration hides the host's work";
  EXPECT_EQ(host_s_per_launch({0.75, 0.25, 0}), 0.0) << "no launches, no cost per launch";
  EXPECT_EQ(host_s_per_launch({1.25, 0.25, 4, 0.5}), 0.125) << "the tracer's hashing is not the host's cost per launch";
  EXPECT_EQ(host_s_per_launch({1.5, 0.25, 4, 0.5, 0.25}), 0.125) << "nor is its recording of each launch";
}

TEST(IterationTime, ThePredictionAddsTheHostCostOfTracedAndReplayedLaunches) {
  const iteration_time t = predict_iteration_time(0.5, 0.125, 6, 2);
  EXPECT_EQ(t.device_s, 0.5);
  EXPECT_EQ(t.host_s_per_launch, 0.125);
  EXPECT_EQ(t.launches, 8u);
  EXPECT_EQ(t.host_s, 1.0);
  EXPECT_EQ(t.predicted_s, 1.5);
  EXPECT_EQ(t.vmm_s, 0.0) << "no map-backs, no VMM work";
  EXPECT_EQ(t.check_s, 0.0) << "no write checks, no hashing";
}

// The write checks' hashes, waits and bytes at the probed cost (Note [Write check work]).
TEST(IterationTime, ThePlansWriteChecksAddTheirHashesWaitsAndBytesAtTheProbedCost) {
  hash_cost cost;
  cost.issue_s = 0.5;
  cost.wait_s = 0.25;
  cost.byte_s = 0.125;
  write_check_work w;
  w.hashes = 4;
  w.copies = 2;
  w.waits = 3;
  w.hashed_bytes = 8;
  w.copied_bytes = 8;
  const iteration_time t = predict_iteration_time(0.5, 0.125, 6, 2, {}, {}, w, cost);
  EXPECT_EQ(t.checks.hashes, 4u);
  EXPECT_EQ(t.check_s, 0.5 * 6 + 0.25 * 3 + 0.125 * 16);
  EXPECT_EQ(t.predicted_s, 1.5 + t.check_s);
}

// Each map-back and the allocation it displaces: two map, set access and unmap cycles of
// its bytes at the probed cost.
TEST(IterationTime, ThePlansMapBacksAddTwoVmmCyclesEachAtTheProbedCost) {
  device::vmm_cycle_cost cost;
  cost.cycle_s = 0.25;
  cost.byte_s = 1.0 / 1024;
  const remap_work w{3, 4096};
  EXPECT_EQ(w.cycles(), 6u);
  EXPECT_EQ(w.cycle_bytes(), 8192u);
  EXPECT_EQ(cost.cost_s(6, 8192), 9.5);
  const iteration_time t = predict_iteration_time(0.5, 0.125, 6, 2, w, cost);
  EXPECT_EQ(t.remaps.map_backs, 3u);
  EXPECT_EQ(t.vmm_calls, 18u) << "map, set access, unmap per cycle";
  EXPECT_EQ(t.vmm_s, 9.5);
  EXPECT_EQ(t.host_s, 1.0);
  EXPECT_EQ(t.predicted_s, 0.5 + 1.0 + 9.5);
}

// One map-back per pack and per evicted or offloaded block outside a pack, in whole granules.
TEST(IterationTime, MapBacksCountPacksOnceAndOffloads) {
  policy::iteration g;
  g.buffers.resize(5);
  const std::size_t sizes[] = {1000, 2000, 70000, 64 * 1024, 10};
  for (std::size_t b = 0; b < 5; ++b) g.buffers[b].size = sizes[b];
  policy::plan p;
  for (policy::buffer_id b : {0u, 1u, 2u}) p.evictions.emplace_back().target = b;
  p.packs.push_back({{0, 1}, {0, 1024}, 3000});
  p.offloads.emplace_back().target = 3;
  const remap_work w = remaps_of(p, g, 64 * 1024);
  EXPECT_EQ(w.map_backs, 3u) << "the pack of buffers 0 and 1, buffer 2, the offload of buffer 3";
  EXPECT_EQ(w.bytes, (64u + 128u + 64u) * 1024u);
  EXPECT_EQ(remaps_of(policy::plan{}, g, 64 * 1024).map_backs, 0u);
}

TEST(IterationTime, AnOffloadedPackIsOneMapBackWhateverItsMembers) {
  policy::iteration g;
  g.buffers.resize(4);
  for (policy::buffer_id b = 0; b < 4; ++b) g.buffers[b].size = 3000;
  policy::plan p;
  for (policy::buffer_id b : {0u, 1u, 2u, 3u}) p.offloads.emplace_back().target = b;
  p.packs.push_back({{0, 1, 2}, {0, 3072, 6144}, 9144, true});
  const remap_work w = remaps_of(p, g, 64 * 1024);
  EXPECT_EQ(w.map_backs, 2u) << "the pack of offloads 0-2 is mapped back as one block; offload 3 on its own";
  EXPECT_EQ(w.bytes, 2u * 64u * 1024u);
}

// ---- the engine --------------------------------------------------------------------------------
constexpr std::int64_t kFloats = 64 * 1024;  // 256 KiB activations
constexpr int kLayers = 16;
constexpr std::size_t kLaunches = 2 * kLayers;  // a fill, 15 steps, 16 sums

// A chain whose backward reads the forward's activations in reverse, under the engine.
struct chain {
  device::host_vmm vmm{device::host_vmm_options{64 * 1024, std::size_t{256} << 20}};
  device::host::device dev;
  allocator::caching_allocator alloc{vmm, dev, small_page_options()};
  float* acc = nullptr;
  std::unique_ptr<host_runtime> rt;

  explicit chain(engine_options o) {
    acc = static_cast<float*>(alloc.allocate(64 * sizeof(float), nullptr));
    dev.memset_async(acc, 0, 64 * sizeof(float), nullptr);
    dev.synchronize();
    rt = std::make_unique<host_runtime>(dev, alloc, std::move(o));
  }
  ~chain() {
    dev.synchronize();
    rt.reset();
    alloc.deallocate(acc);
  }
  void iteration() {
    std::vector<float*> acts;
    acts.push_back(static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr)));
    fill_params fp{acts.back(), kFloats, 0.5f};
    dev.launch(fill_kernel(), {}, nullptr, &fp);
    for (int l = 1; l < kLayers; ++l) {
      auto* next = static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr));
      scale_params sp{next, acts.back(), kFloats, 0.75f};
      dev.launch(scale_kernel(), {}, nullptr, &sp);
      acts.push_back(next);
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      accumulate_params ap{acc, acts[static_cast<std::size_t>(l)], kFloats};
      dev.launch(accumulate_kernel(), {}, nullptr, &ap);
      alloc.deallocate(acts[static_cast<std::size_t>(l)]);
    }
    dev.synchronize();
  }
};

engine_options recompute_options() {
  engine_options o;
  // Well above the least budget: the traced peak varies a little with the stream
  // workers' timing, and at 0.5x the plan was, now and then, infeasible.
  o.config.budget = policy::parse_budget("0.6x");
  o.config.policy = "greedy";
  o.config.validate = validate_mode::first;
  o.config.offload = policy::offload_mode::off;
  o.config.log = log_level::error;
  o.device_capacity = std::size_t{256} << 20;
  return o;
}

struct outcome {
  std::vector<iteration_report> reports;
  engine::plan_time time;
  engine::plan_link link;
  engine::plan_compute compute;
  std::size_t replayed = 0;
  run_report report;
};

outcome train(engine_options o, int iterations, double pause_before_s = 0.0) {
  outcome out;
  chain c(o);
  for (int it = 0; it < iterations; ++it) {
    if (pause_before_s > 0.0) std::this_thread::sleep_for(std::chrono::duration<double>(pause_before_s));
    c.iteration();
    c.rt->mark_iteration();
  }
  const engine& e = c.rt->get();
  out.reports = e.iterations();
  out.time = e.predicted_time();
  out.link = e.planned_link();
  out.compute = e.planned_compute();
  out.replayed = e.planned_recomputed_launches();
  EXPECT_EQ(e.plan_error(), "");
  report_metadata meta;
  meta.model = "chain";
  out.report = make_report(e, o.config, meta);
  return out;
}

TEST(IterationTime, AnInjectedHostCostGivesEveryPlannedIterationDeviceTimePlusItsLaunches) {
  engine_options o = recompute_options();
  o.host_s_per_launch = 0.25;
  const outcome r = train(o, 6);
  ASSERT_GT(r.replayed, 0u) << "the plan recomputes";
  const engine::plan_time& t = r.time;
  EXPECT_EQ(t.measured_on, "given");
  EXPECT_EQ(t.traced.launches, kLaunches);
  EXPECT_EQ(t.at_plan.launches, kLaunches + r.replayed) << "traced launches and replayed ones";
  EXPECT_EQ(t.at_plan.device_s, r.link.predicted_device_s);
  EXPECT_GT(t.at_plan.device_s, 0.0);
  EXPECT_EQ(t.at_plan.predicted_s, r.link.predicted_device_s + 0.25 * static_cast<double>(kLaunches + r.replayed));
  EXPECT_EQ(t.next.predicted_s, t.at_plan.predicted_s) << "an injected cost is never measured over";
  ASSERT_EQ(r.reports.size(), 6u);
  for (const auto& it : r.reports) {
    SCOPED_TRACE(it.index);
    if (it.state == engine_state::trace) {
      EXPECT_EQ(it.predicted_s, 0.0);
      continue;
    }
    EXPECT_FALSE(it.diverged) << it.divergence;
    EXPECT_EQ(it.predicted_s, t.at_plan.predicted_s);
    EXPECT_EQ(it.launches + it.recomputed_launches, t.at_plan.launches) << "the iteration ran what was predicted";
  }
}

// Each planned iteration's prediction recomputed from what the iterations before it reported.
TEST(IterationTime, EachPlannedIterationIsPredictedFromAnIterationBeforeIt) {
  const outcome r = train(recompute_options(), 7);
  const engine::plan_time& t = r.time;
  ASSERT_EQ(r.reports.size(), 7u);
  const iteration_report& traced = r.reports[1];  // two traced iterations; the plan is made from the last
  ASSERT_EQ(traced.state, engine_state::trace);
  EXPECT_EQ(t.traced.active_s, traced.active_s);
  EXPECT_EQ(t.traced.launches, traced.launches);
  // The traced iterations hash what each launch touches; the planned ones do not.
  EXPECT_EQ(t.traced.observation_s, traced.observation_s);
  EXPECT_GT(traced.observation_s, 0.0);
  EXPECT_LT(traced.observation_s, traced.active_s);
  EXPECT_EQ(t.traced.device_s, r.compute.traced_s);
  const double device_s = r.link.predicted_device_s;
  const std::size_t launches = traced.launches + r.replayed;
  EXPECT_EQ(t.traced.recording_s, traced.recording_s);
  EXPECT_GT(traced.recording_s, 0.0) << "the host collector times its recording";
  EXPECT_EQ(t.at_plan.predicted_s, predict_iteration_time(device_s, host_s_per_launch(t.traced), traced.launches,
                                                          r.replayed, t.remaps, t.vmm_cycle, t.checks, t.hash)
                                        .predicted_s);
  const iteration_report* measured = nullptr;  // the last steady iteration before the one predicted
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    SCOPED_TRACE(it.index);
    ASSERT_FALSE(it.diverged) << it.divergence;
    EXPECT_EQ(it.observation_s, 0.0);
    if (measured == nullptr) {
      EXPECT_EQ(it.predicted_s, t.at_plan.predicted_s) << "no steady iteration yet: the traced one's measure";
    } else {
      const host_cost_sample s{measured->active_s, t.traced.device_s + measured->recompute_s + measured->copy_stall_s,
                               measured->launches + measured->recomputed_launches};
      EXPECT_EQ(it.predicted_s, predict_iteration_time(device_s, host_s_per_launch(s), traced.launches, r.replayed).predicted_s);
      if (measured->pressure_evictions == 0) {
        // The pressure valve (timing: the stream workers free blocks late) replays more.
        EXPECT_EQ(measured->launches + measured->recomputed_launches, launches);
      }
    }
    if (it.state == engine_state::steady) measured = &it;
  }
  ASSERT_NE(measured, nullptr);
  EXPECT_EQ(t.measured_on, "planned iteration " + std::to_string(measured->index));
}

// The plan's map-backs are the blocks a steady iteration maps back (or finds still mapped,
// its eviction cancelled before the pages went), and the probe ran on the allocator's device.
TEST(IterationTime, ThePlansMapBacksAreWhatEachSteadyIterationMapsBack) {
  engine_options o = recompute_options();
  chain c(o);
  std::vector<std::uint64_t> restored;
  for (int it = 0; it < 6; ++it) {
    const allocator::stats before = c.alloc.get_stats();
    c.iteration();
    c.rt->mark_iteration();
    const allocator::stats after = c.alloc.get_stats();
    restored.push_back(after.restores + after.cancelled_evictions - before.restores - before.cancelled_evictions);
  }
  const engine& e = c.rt->get();
  const engine::plan_time t = e.predicted_time();
  ASSERT_EQ(e.plan_error(), "");
  ASSERT_GT(t.remaps.map_backs, 0u) << "the plan evicts";
  EXPECT_EQ(t.at_plan.remaps.map_backs, t.remaps.map_backs);
  EXPECT_EQ(t.at_plan.vmm_calls, 2 * 3 * t.remaps.map_backs);
  EXPECT_EQ(t.vmm_cycle.device, "host");
  EXPECT_EQ(t.vmm_cycle.error, "");
  EXPECT_GT(t.vmm_cycle.cycle_s + t.vmm_cycle.byte_s, 0.0) << "the probe measured the device";
  EXPECT_EQ(t.at_plan.vmm_s, t.vmm_cycle.cost_s(t.remaps.cycles(), t.remaps.cycle_bytes()));
  EXPECT_EQ(t.next.vmm_s, 0.0) << "a steady iteration's cost per launch holds its VMM work";
  const auto reports = e.iterations();
  ASSERT_EQ(reports.size(), restored.size());
  for (std::size_t i = 0; i < reports.size(); ++i) {
    SCOPED_TRACE(i);
    if (reports[i].state != engine_state::steady) continue;
    EXPECT_FALSE(reports[i].diverged) << reports[i].divergence;
    // Each block the pressure valve evicts (now and then: the stream workers free blocks
    // late) may be mapped back once more.
    EXPECT_GE(restored[i], t.remaps.map_backs);
    EXPECT_LE(restored[i], t.remaps.map_backs + reports[i].pressure_evictions);
  }
}

TEST(IterationTime, ActiveTimeLeavesOutWhatTheProgramDidBeforeItsFirstCall) {
  const double pause_s = 0.02;
  const outcome r = train(recompute_options(), 4, pause_s);
  for (const auto& it : r.reports) {
    SCOPED_TRACE(it.index);
    EXPECT_GT(it.active_s, 0.0);
    EXPECT_GE(it.wall_s - it.active_s, pause_s) << "the pause before the first allocation is not the iteration's";
  }
}

TEST(IterationTime, TheReportCarriesThePredictionThroughJsonAndText) {
  const outcome r = train(recompute_options(), 5);
  const run_report& rep = r.report;
  EXPECT_EQ(rep.plan.predicted_device_s, r.time.at_plan.device_s);
  EXPECT_EQ(rep.plan.host_s_per_launch, r.time.at_plan.host_s_per_launch);
  EXPECT_EQ(rep.plan.predicted_launches, r.time.at_plan.launches);
  EXPECT_EQ(rep.plan.predicted_iteration_s, r.time.at_plan.predicted_s);
  EXPECT_EQ(rep.plan.traced_active_s, r.time.traced.active_s);
  EXPECT_EQ(rep.plan.traced_observation_s, r.time.traced.observation_s);
  EXPECT_GT(rep.plan.traced_observation_s, 0.0);
  EXPECT_EQ(rep.plan.traced_launches, r.time.traced.launches);
  EXPECT_EQ(rep.plan.traced_recording_s, r.time.traced.recording_s);
  EXPECT_EQ(rep.plan.predicted_map_backs, r.time.at_plan.remaps.map_backs);
  EXPECT_EQ(rep.plan.predicted_map_back_bytes, r.time.at_plan.remaps.bytes);
  EXPECT_EQ(rep.plan.predicted_vmm_calls, r.time.at_plan.vmm_calls);
  EXPECT_EQ(rep.plan.predicted_vmm_s, r.time.at_plan.vmm_s);
  EXPECT_EQ(rep.plan.vmm_cycle_s, r.time.vmm_cycle.cycle_s);
  EXPECT_EQ(rep.plan.vmm_byte_s, r.time.vmm_cycle.byte_s);
  EXPECT_EQ(rep.plan.vmm_probe, "host");
  EXPECT_EQ(rep.plan.predicted_hashes, r.time.at_plan.checks.hashes);
  EXPECT_GT(rep.plan.predicted_hashes, 0u) << "the chain's recipes read the activation before";
  EXPECT_EQ(rep.plan.predicted_hashed_bytes, r.time.at_plan.checks.hashed_bytes);
  EXPECT_EQ(rep.plan.predicted_check_waits, r.time.at_plan.checks.waits);
  EXPECT_EQ(rep.plan.predicted_input_copy_bytes, r.time.at_plan.checks.copied_bytes);
  EXPECT_EQ(rep.plan.predicted_check_s, r.time.at_plan.check_s);
  EXPECT_EQ(rep.plan.hash_issue_s, r.time.hash.issue_s);
  EXPECT_EQ(rep.plan.hash_wait_s, r.time.hash.wait_s);
  EXPECT_EQ(rep.plan.hash_byte_s, r.time.hash.byte_s);
  EXPECT_EQ(rep.plan.hash_probe, "host, hashed on its stream");
  const run_report back = parse_report(to_json(rep));
  EXPECT_EQ(back.plan.predicted_device_s, rep.plan.predicted_device_s);
  EXPECT_EQ(back.plan.host_s_per_launch, rep.plan.host_s_per_launch);
  EXPECT_EQ(back.plan.predicted_launches, rep.plan.predicted_launches);
  EXPECT_EQ(back.plan.predicted_iteration_s, rep.plan.predicted_iteration_s);
  EXPECT_EQ(back.plan.traced_active_s, rep.plan.traced_active_s);
  EXPECT_EQ(back.plan.traced_observation_s, rep.plan.traced_observation_s);
  EXPECT_EQ(back.plan.traced_launches, rep.plan.traced_launches);
  EXPECT_EQ(back.plan.traced_recording_s, rep.plan.traced_recording_s);
  EXPECT_EQ(back.plan.predicted_map_backs, rep.plan.predicted_map_backs);
  EXPECT_EQ(back.plan.predicted_map_back_bytes, rep.plan.predicted_map_back_bytes);
  EXPECT_EQ(back.plan.predicted_vmm_calls, rep.plan.predicted_vmm_calls);
  EXPECT_EQ(back.plan.predicted_vmm_s, rep.plan.predicted_vmm_s);
  EXPECT_EQ(back.plan.vmm_cycle_s, rep.plan.vmm_cycle_s);
  EXPECT_EQ(back.plan.vmm_byte_s, rep.plan.vmm_byte_s);
  EXPECT_EQ(back.plan.vmm_probe, rep.plan.vmm_probe);
  EXPECT_EQ(back.plan.predicted_hashes, rep.plan.predicted_hashes);
  EXPECT_EQ(back.plan.predicted_hashed_bytes, rep.plan.predicted_hashed_bytes);
  EXPECT_EQ(back.plan.predicted_check_waits, rep.plan.predicted_check_waits);
  EXPECT_EQ(back.plan.predicted_input_copy_bytes, rep.plan.predicted_input_copy_bytes);
  EXPECT_EQ(back.plan.predicted_check_s, rep.plan.predicted_check_s);
  EXPECT_EQ(back.plan.hash_issue_s, rep.plan.hash_issue_s);
  EXPECT_EQ(back.plan.hash_wait_s, rep.plan.hash_wait_s);
  EXPECT_EQ(back.plan.hash_byte_s, rep.plan.hash_byte_s);
  EXPECT_EQ(back.plan.hash_probe, rep.plan.hash_probe);
  ASSERT_EQ(back.iterations.size(), rep.iterations.size());
  for (std::size_t i = 0; i < rep.iterations.size(); ++i) {
    EXPECT_EQ(back.iterations[i].active_s, rep.iterations[i].active_s);
    EXPECT_EQ(back.iterations[i].predicted_s, rep.iterations[i].predicted_s);
  }
  const std::string text = render_text(back, 5);
  EXPECT_NE(text.find("predicted time"), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(rep.plan.predicted_launches) + " launches x"), std::string::npos) << text;
  EXPECT_NE(text.find("predicted before each"), std::string::npos) << text;
}

}  // namespace
}  // namespace sublinear::runtime
