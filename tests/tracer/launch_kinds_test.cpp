// Launches beyond a plain cuLaunchKernel, as the tracer records and analyses them: launch
// attributes (Note [Launch attributes] in device/launch_attributes.hpp) and graph launches
// (Note [Graph launches] in analysis.cpp), on the host device.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tracer/analysis.hpp"
#include "tracer/trace_file.hpp"
#include "tracer_fixture.hpp"

namespace sublinear::tracer {
namespace {

using policy::buffer_id;
using testing::traced_session;
namespace id = device::launch_attribute_id;

template <class Params>
void launch_with(device::host::device& dev, const device::host::kernel& k, const Params& p,
                 std::vector<device::launch_attribute> attrs, device::host::dim3 grid = {4, 1, 1}) {
  device::host::launch_config cfg;
  cfg.grid = grid;
  cfg.attributes = std::move(attrs);
  dev.launch(k, cfg, nullptr, &p);
}

TEST(LaunchAttributesTraced, RecordedPerLaunchWithIgnoredEntriesDroppedAndTheVerdictInTheFlags) {
  traced_session s;
  auto ctx = s.ctx();
  auto* a = static_cast<float*>(ctx.bytes(4096));
  auto* b = static_cast<float*>(ctx.bytes(4096));
  s.dev().memset_async(a, 0, 4096, nullptr);
  const testing::scale_params p{a, b, 1024};
  launch_with(s.dev(), testing::scale_kernel(), p,
              {device::make_launch_attribute(id::cluster_dimension, 2, 1, 1), device::make_launch_attribute(id::ignore, 5),
               device::make_launch_attribute(id::priority, 1)});
  launch_with(s.dev(), testing::scale_kernel(), p, {device::make_launch_attribute(id::launch_completion_event, 9)});
  testing::launch(s.dev(), testing::scale_kernel(), p);
  const trace t = s.take();
  ctx.release_bytes(a, 4096);
  ctx.release_bytes(b, 4096);
  const auto launches = testing::of_kind(t, event_kind::launch);
  ASSERT_EQ(launches.size(), 3U);
  const auto first = t.attributes_of(launches[0]->seq);
  ASSERT_EQ(first.size(), 2U);
  EXPECT_EQ(first[0].attribute.id, id::cluster_dimension);
  EXPECT_EQ(first[1].attribute.id, id::priority);
  EXPECT_EQ(launches[0]->flags & event_flags::names_event, 0);  // a replay reproduces both
  ASSERT_EQ(t.attributes_of(launches[1]->seq).size(), 1U);
  EXPECT_NE(launches[1]->flags & event_flags::names_event, 0);  // an event it records: not replayable
  EXPECT_TRUE(t.attributes_of(launches[2]->seq).empty());
  EXPECT_EQ(decode_trace(encode_trace(t)), t);
}

// Stands for a cuGraphLaunch: named as the CUPTI collector names one, with no parameters;
// its body reads and writes blocks the scan cannot see (a graph's nodes).
float* g_graph_target = nullptr;
struct graph_params {
  std::int64_t unused;
};
void graph_body(const device::host::launch_config&, const graph_params&) {
  if (g_graph_target != nullptr) g_graph_target[0] += 1.0f;
}
const device::host::kernel& graph_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<graph_params, graph_body>(
      graph_launch_kernel_name, {SUBLINEAR_PARAM(graph_params, unused)});
  return k;
}

// Forward w -> a -> b, a graph launch while both are live, a buffer c made after it, then a
// backward that reads b, a and c.
TEST(GraphLaunches, EveryBlockLiveAtAGraphLaunchIsTouchedByItAndNeverEvicted) {
  traced_session s;
  auto ctx = s.ctx();
  auto* w = static_cast<float*>(ctx.bytes(4096));
  s.dev().memset_async(w, 0, 4096, nullptr);
  s.rec().mark_iteration();
  auto scale = [&](const float* in, float* out) {
    testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{in, out, 1024});
  };
  auto* a = static_cast<float*>(ctx.bytes(4096));
  scale(w, a);
  auto* b = static_cast<float*>(ctx.bytes(4096));
  scale(a, b);
  g_graph_target = b;
  testing::launch(s.dev(), graph_kernel(), graph_params{0});
  auto* c = static_cast<float*>(ctx.bytes(4096));
  scale(b, c);
  auto* g = static_cast<float*>(ctx.bytes(4096));
  scale(c, g);
  ctx.release_bytes(c, 4096);
  scale(b, g);
  ctx.release_bytes(b, 4096);
  scale(a, g);
  ctx.release_bytes(a, 4096);
  ctx.release_bytes(g, 4096);
  s.rec().mark_iteration();
  const trace t = s.take();
  g_graph_target = nullptr;
  ctx.release_bytes(w, 4096);
  const analysed_iteration it = analyse(t, t.marked_iterations().at(0));
  constexpr buffer_id W = 0, A = 1, B = 2, C = 3;
  ASSERT_EQ(it.graph.buffers.size(), 5U);
  EXPECT_EQ(it.graph_launches, 1U);
  const policy::launch& graph = it.graph.launches[2];
  EXPECT_FALSE(graph.replayable);
  EXPECT_EQ(graph.touched, (std::vector<buffer_id>{W, A, B}));
  EXPECT_EQ(graph.written, graph.touched);
  EXPECT_TRUE(it.graph.buffers[A].never_evict);
  EXPECT_TRUE(it.graph.buffers[B].never_evict);
  EXPECT_FALSE(it.graph.buffers[C].never_evict);  // allocated after the graph launch
  const auto& cand = it.graph.candidates;
  EXPECT_EQ(std::find(cand.begin(), cand.end(), A), cand.end());
  EXPECT_EQ(std::find(cand.begin(), cand.end(), B), cand.end());
}

}  // namespace
}  // namespace sublinear::tracer
