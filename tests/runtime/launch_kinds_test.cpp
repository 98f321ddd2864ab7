// Training through launches that are more than a plain launch, on the host device, under a
// budget: a kernel whose result depends on its thread-block cluster shape (Note [Launch
// attributes] in device/launch_attributes.hpp) is replayed with it and training stays bit
// for bit what it is without sublinear; a launch with an attribute no replay reproduces,
// and a graph launch (Note [Graph launches] in tracer/analysis.cpp), keep what they touch
// resident. The report carries the interception cost (Note [Interception cost]).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chain_kernels.hpp"
#include "allocator/caching_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "policy/planner.hpp"
#include "runtime/host/host_runtime.hpp"
#include "runtime/report/report_plan.hpp"
#include "tracer/events.hpp"
#include "tracer/host/host_collector.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::runtime {
namespace {

namespace id = device::launch_attribute_id;

constexpr std::int64_t kFloats = 64 * 1024;  // 256 KiB: whole host pages
constexpr std::uint32_t kGrid = 8;           // blocks; element i belongs to block i % kGrid
constexpr int kLayers = 8;
constexpr int kIterations = 6;

// out[i] = in[i] * 0.9 + rank * 0.01, rank = the block's place in its cluster: a replay
// without the recorded cluster shape computes other bytes.
struct cluster_params {
  float* out;
  const float* in;
  std::int64_t n;
};
void cluster_body(const device::host::launch_config& cfg, const cluster_params& p) {
  const device::cluster_shape c = device::cluster_of(cfg.attributes);
  for (std::int64_t i = 0; i < p.n; ++i) {
    const auto block = static_cast<std::uint32_t>(i % cfg.grid.x);
    p.out[i] = p.in[i] * 0.9f + static_cast<float>(block % c.x) * 0.01f;
  }
}
// acc[i % 64] += in[i] * 0.001
struct accumulate_params {
  float* acc;
  const float* in;
  std::int64_t n;
};
void accumulate_body(const device::host::launch_config&, const accumulate_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.acc[i % 64] += p.in[i] * 0.001f;
}
// Stands for a cuGraphLaunch (tracer::graph_launch_kernel_name): no parameters, it reads
// every activation through pointers the scan cannot see and adds their first elements.
std::vector<float*> g_graph_reads;
float* g_graph_out = nullptr;
struct graph_params {
  std::int64_t unused;
};
void graph_body(const device::host::launch_config&, const graph_params&) {
  for (const float* a : g_graph_reads) g_graph_out[0] += a[0];
}

const device::host::kernel& cluster_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<cluster_params, cluster_body>(
      "test_kinds_cluster", {SUBLINEAR_PARAM(cluster_params, out), SUBLINEAR_PARAM(cluster_params, in),
                             SUBLINEAR_PARAM(cluster_params, n)});
  return k;
}
const device::host::kernel& accumulate_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<accumulate_params, accumulate_body>(
      "test_kinds_accumulate", {SUBLINEAR_PARAM(accumulate_params, acc), SUBLINEAR_PARAM(accumulate_params, in),
                                SUBLINEAR_PARAM(accumulate_params, n)});
  return k;
}
const device::host::kernel& graph_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<graph_params, graph_body>(
      tracer::graph_launch_kernel_name, {SUBLINEAR_PARAM(graph_params, unused)});
  return k;
}

enum class variant {
  cluster,       // every layer is a 4-block-cluster launch
  event,         // the same, with a launch completion event: not replayable
  graph,         // the cluster launches, and a graph launch reading every activation before the backward
};

struct chain {
  device::host_vmm vmm{device::host_vmm_options{64 * 1024, std::size_t{256} << 20}};
  device::host::device dev;
  allocator::caching_allocator alloc{vmm, dev, test::small_page_options()};
  float* acc = nullptr;
  float* input = nullptr;


  chain() {
    acc = static_cast<float*>(alloc.allocate(64 * sizeof(float), nullptr));
    input = static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr));
    dev.synchronize();
    std::memset(acc, 0, 64 * sizeof(float));
    for (std::int64_t i = 0; i < kFloats; ++i) input[i] = static_cast<float>(i % 113) * 0.125f;
  }
  ~chain() {
    dev.synchronize();
    alloc.deallocate(acc);
    alloc.deallocate(input);
  }

  void iteration(variant v) {
    std::vector<float*> acts;
    device::host::launch_config cfg;
    cfg.grid = {kGrid, 1, 1};
    cfg.attributes = {device::make_launch_attribute(id::cluster_dimension, 4, 1, 1),
                      device::make_launch_attribute(id::priority, 1)};
    if (v == variant::event) cfg.attributes.push_back(device::make_launch_attribute(id::launch_completion_event, 7));
    const float* in = input;
    for (int l = 0; l < kLayers; ++l) {
      auto* out = static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr));
      cluster_params p{out, in, kFloats};
      dev.launch(cluster_kernel(), cfg, nullptr, &p);
      acts.push_back(out);
      in = out;
    }
    if (v == variant::graph) {
      dev.synchronize();
      g_graph_reads = acts;
      g_graph_out = acc;
      graph_params gp{0};
      dev.launch(graph_kernel(), {}, nullptr, &gp);
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      accumulate_params ap{acc, acts[static_cast<std::size_t>(l)], kFloats};
      dev.launch(accumulate_kernel(), {}, nullptr, &ap);
      dev.synchronize();
      alloc.deallocate(acts[static_cast<std::size_t>(l)]);
    }
    dev.synchronize();
    g_graph_reads.clear();
  }
};

struct run {
  std::vector<float> result;
  std::vector<iteration_report> reports;
  std::size_t evictions = 0;
  std::size_t recomputed = 0;
  std::size_t mismatches = 0;
};

run train(variant v, bool sublinear) {
  chain m;
  std::unique_ptr<host_runtime> rt;
  if (sublinear) {
    engine_options o;
    o.config.budget = policy::parse_budget("0.6x");
    o.config.validate = validate_mode::always;
    o.config.log = log_level::error;
    o.device_capacity = std::size_t{256} << 20;
    rt = std::make_unique<host_runtime>(m.dev, m.alloc, o);
  }
  for (int it = 0; it < kIterations; ++it) {
    m.iteration(v);
    if (rt) rt->mark_iteration();
  }
  m.dev.synchronize();
  run out;
  out.result.assign(m.acc, m.acc + 64);
  if (rt) {
    out.reports = rt->get().iterations();
    for (const auto& r : out.reports) {
      out.evictions += r.evictions;
      out.recomputed += r.recomputed_launches;
      out.mismatches += r.validation_mismatches;
    }
  }
  return out;
}

TEST(LaunchKinds, AClusterKernelIsReplayedWithItsClusterShapeBitForBit) {
  const run plain = train(variant::cluster, false);
  const run sub = train(variant::cluster, true);
  EXPECT_GT(sub.evictions, 0U);
  EXPECT_GT(sub.recomputed, 0U);
  EXPECT_EQ(sub.mismatches, 0U);  // validate=always compares every regenerated buffer with its copy
  EXPECT_EQ(sub.result, plain.result);
}

TEST(LaunchKinds, ALaunchWithAnAttributeNoReplayReproducesKeepsItsOutputs) {
  const run plain = train(variant::event, false);
  const run sub = train(variant::event, true);
  EXPECT_EQ(sub.evictions, 0U);
  EXPECT_EQ(sub.recomputed, 0U);
  EXPECT_EQ(sub.result, plain.result);
}

TEST(LaunchKinds, NothingLiveAtAGraphLaunchIsEvicted) {
  const run plain = train(variant::graph, false);
  const run sub = train(variant::graph, true);
  EXPECT_EQ(sub.evictions, 0U);  // every activation is live at the graph launch
  EXPECT_EQ(sub.result, plain.result);
}

TEST(LaunchKinds, ThePlanPreviewNamesLaunchesNotReplayableForAnAttribute) {
  chain m;
  tracer::recorder_options ro;
  ro.device = "host";
  ro.granularity = m.alloc.granularity();
  tracer::recorder rec(ro);
  m.alloc.set_observer(&rec);
  tracer::host_collector_options co;
  co.observe_writes = true;
  tracer::host_collector collector(m.dev, rec, co);
  rec.mark_iteration();
  m.iteration(variant::event);
  rec.mark_iteration();
  m.iteration(variant::graph);
  rec.mark_iteration();
  m.dev.synchronize();
  const tracer::trace t = rec.take();
  m.alloc.set_observer(nullptr);
  plan_preview_options po;
  po.budget = policy::parse_budget("0.6x");
  po.policies = {"greedy"};
  const plan_preview p = preview_plans(t, po);  // the last iteration: the graph variant
  EXPECT_EQ(p.graph_launches, 1U);
  EXPECT_EQ(p.attribute_unreplayable_count, 0U);
  const std::string text = render_plan_preview(p);
  EXPECT_NE(text.find("1 CUDA graph launch: every buffer live at one is never evicted"), std::string::npos) << text;

  tracer::trace first = t;  // the event variant alone
  const auto iterations = t.marked_iterations();
  ASSERT_GE(iterations.size(), 2U);
  first.events.resize(iterations[1].begin);
  const std::uint64_t last_seq = first.events.back().seq;
  const auto after = [&](const auto& r) { return r.seq > last_seq; };
  std::erase_if(first.writes, after);
  std::erase_if(first.fresh, after);
  std::erase_if(first.launch_attributes, after);
  const plan_preview q = preview_plans(first, po);
  EXPECT_EQ(q.attribute_unreplayable_count, static_cast<std::size_t>(kLayers));
  ASSERT_FALSE(q.attribute_unreplayable.empty());
  EXPECT_EQ(q.attribute_unreplayable[0].kernel, "test_kinds_cluster");
  EXPECT_EQ(q.attribute_unreplayable[0].attribute, "launch_completion_event");
  const std::string json = plan_preview_json(q);
  EXPECT_NE(json.find("\"attribute_unreplayable_count\": " + std::to_string(kLayers)), std::string::npos) << json;
}

TEST(LaunchKinds, TheReportCarriesThePerLaunchEngineCostAndVmmCalls) {
  const run sub = train(variant::cluster, true);
  ASSERT_EQ(sub.reports.size(), static_cast<std::size_t>(kIterations));
  const iteration_report& last = sub.reports.back();
  EXPECT_EQ(last.launches, static_cast<std::size_t>(2 * kLayers));  // cluster launches and accumulations
  EXPECT_GT(last.launch_hooks_s, 0.0);
  EXPECT_LE(last.launch_hooks_s, last.engine_s);
  EXPECT_GT(last.vmm_calls, 0U);  // the planned iteration evicts and maps back
}

}  // namespace
}  // namespace sublinear::runtime
