// Iteration boundaries (markers and automatic period detection, with and without noise)
// and divergence from a traced iteration.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "workloads/models/registry.hpp"
#include "workloads/models/resnet.hpp"
#include "workloads/training.hpp"
#include "tracer/iterations.hpp"
#include "marked_training.hpp"
#include "tracer_fixture.hpp"

namespace sublinear::tracer {
namespace {

using testing::traced_session;
using testing::train_marked;
using workloads::models::model_kind;

TEST(MarkedIterations, AreTheEventsBetweenConsecutiveMarkers) {
  trace t;
  t.streams = {0};
  for (event_kind k : {event_kind::alloc, event_kind::marker, event_kind::alloc, event_kind::free, event_kind::marker,
                       event_kind::alloc, event_kind::marker, event_kind::free}) {
    event& e = t.events.emplace_back();
    e.kind = k;
  }
  EXPECT_EQ(t.marked_iterations(), (std::vector<event_range>{{2, 4}, {5, 6}}));
}

class DetectsIterations : public ::testing::TestWithParam<model_kind> {};

// Detection never looks at markers; the markers are the ground truth it is checked against.
void expect_detected_like_marked(const trace& t, std::size_t tolerance) {
  const std::vector<event_range> marked = t.marked_iterations();
  const detected_iterations found = detect_iterations(t);
  ASSERT_TRUE(found.found()) << found.reason;
  // Every complete iteration but the first and the last (they bound the anchor's windows).
  ASSERT_GE(found.iterations.size(), marked.size() - 1);
  for (const event_range& d : found.iterations) {
    // The marker is the last event of a marked iteration's span; a detected iteration
    // includes it, so it ends one event later.
    bool matched = false;
    for (const event_range& m : marked) {
      const auto near = [&](std::size_t a, std::size_t b) { return (a > b ? a - b : b - a) <= tolerance; };
      matched = matched || (near(d.begin, m.begin) && near(d.end, m.end + 1));
    }
    EXPECT_TRUE(matched) << "detected [" << d.begin << ", " << d.end << ") matches no marked iteration";
  }
}

TEST_P(DetectsIterations, ExactlyAtTheMarkersWithoutNoise) {
  const trace t = train_marked(GetParam(), 5);
  expect_detected_like_marked(t, 0);
}

TEST_P(DetectsIterations, NearTheMarkersWithNoiseEvents) {
  int injected = 0;
  const trace t = train_marked(GetParam(), 5, 0.08, 2, &injected);
  ASSERT_GE(injected, 3) << "the noise source injected too little to test anything";
  // A noise allocation right at a boundary may fall on either side of it.
  expect_detected_like_marked(t, 2);
}

INSTANTIATE_TEST_SUITE_P(Workloads, DetectsIterations,
                         ::testing::Values(model_kind::mlp, model_kind::resnet, model_kind::densenet, model_kind::lstm,
                                           model_kind::transformer),
                         [](const ::testing::TestParamInfo<model_kind>& p) {
                           return std::string(workloads::models::to_string(p.param));
                         });

// Training steps of an MLP recorded without its initialization (whose per-parameter
// pattern repeats too, and is rightly detected as periodic on its own).
trace train_steps_only(int iterations) {
  recorder_options ro;
  ro.start_recording = false;
  traced_session s({}, ro);
  auto ctx = s.ctx();
  workloads::models::model_config mc;
  mc.kind = model_kind::mlp;
  mc.batch = 2;
  auto m = workloads::models::make_model(mc);
  m->init(ctx, 1);
  s.dev().synchronize();
  s.rec().start();
  workloads::training_options o;
  o.iterations = iterations;
  static_cast<void>(workloads::train(ctx, *m, o));
  m->release();
  return s.take();
}

TEST(DetectIterations, SaysWhyWhenTheTraceHoldsTooFewRepetitions) {
  const detected_iterations one = detect_iterations(train_steps_only(1));
  EXPECT_FALSE(one.found());
  EXPECT_FALSE(one.reason.empty());
  const detected_iterations two = detect_iterations(train_steps_only(2));
  EXPECT_FALSE(two.found());
  EXPECT_NE(two.reason.find("three occurrences"), std::string::npos) << two.reason;
  EXPECT_TRUE(detect_iterations(train_steps_only(3)).found());
}

TEST(IterationsOf, PrefersMarkersAndFallsBackToDetection) {
  trace t = train_marked(model_kind::lstm, 4);
  EXPECT_EQ(iterations_of(t), t.marked_iterations());
  std::erase_if(t.events, [](const event& e) { return e.kind == event_kind::marker; });
  EXPECT_EQ(iterations_of(t), detect_iterations(t).iterations);
  EXPECT_FALSE(iterations_of(t).empty());
}

// ---- divergence ------------------------------------------------------------------------------------

// A scripted iteration: alloc two buffers, three launches, free both. `variant` changes the
// grid of the second launch.
void scripted_iteration(traced_session& s, std::uint32_t variant_grid, bool extra_launch = false,
                        bool skip_last_free = false) {
  auto ctx = s.ctx();
  auto* a = static_cast<float*>(ctx.bytes(256));
  auto* b = static_cast<float*>(ctx.bytes(512));
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{a, b, 0});
  testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{b, a, 0}, nullptr, {variant_grid, 1, 1});
  testing::launch(s.dev(), testing::fake_collective_kernel(), testing::fake_collective_params{a, 0});
  if (extra_launch) testing::launch(s.dev(), testing::noop_kernel(), testing::noop_params{0});
  ctx.release_bytes(a, 256);
  if (!skip_last_free) ctx.release_bytes(b, 512);
  s.rec().mark_iteration();
  if (skip_last_free) ctx.release_bytes(b, 512);
}

TEST(Divergence, IsReportedAtTheFirstDifferingEventWithBothEventsDescribed) {
  traced_session s;
  s.rec().mark_iteration();
  scripted_iteration(s, 1);
  scripted_iteration(s, 7);
  const trace t = s.take();
  const auto its = t.marked_iterations();
  ASSERT_EQ(its.size(), 2u);
  const auto d = find_divergence(t, its[0], t, its[1]);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->index, 3u);  // alloc, alloc, launch, -> the second launch
  EXPECT_NE(d->expected.find("tracer_test.scale grid (1,1,1)"), std::string::npos) << d->expected;
  EXPECT_NE(d->seen.find("tracer_test.scale grid (7,1,1)"), std::string::npos) << d->seen;
}

TEST(Divergence, IsNotReportedForARepeatOfTheSameIteration) {
  traced_session s;
  s.rec().mark_iteration();
  scripted_iteration(s, 1);
  scripted_iteration(s, 1);
  const trace t = s.take();
  const auto its = t.marked_iterations();
  EXPECT_FALSE(find_divergence(t, its[0], t, its[1]).has_value());
}

TEST(Divergence, AnExtraEventAndAnEarlyEndAreBothDivergences) {
  traced_session s;
  s.rec().mark_iteration();
  scripted_iteration(s, 1);
  scripted_iteration(s, 1, /*extra_launch=*/true);
  scripted_iteration(s, 1, false, /*skip_last_free=*/true);
  const trace t = s.take();
  const auto its = t.marked_iterations();
  ASSERT_EQ(its.size(), 3u);
  const auto extra = find_divergence(t, its[0], t, its[1]);
  ASSERT_TRUE(extra.has_value());
  EXPECT_EQ(extra->index, 5u);
  EXPECT_NE(extra->seen.find("tracer_test.log_noop"), std::string::npos) << extra->seen;
  EXPECT_EQ(extra->expected, "free 256 B");
  const auto early = find_divergence(t, its[0], t, its[2]);
  ASSERT_TRUE(early.has_value());
  EXPECT_EQ(early->index, 6u);
  EXPECT_EQ(early->seen, "end of iteration");
  EXPECT_EQ(early->expected, "free 512 B");
}

TEST(Divergence, MatchesKernelsByNameAcrossTraces) {
  traced_session first;
  first.rec().mark_iteration();
  scripted_iteration(first, 1);
  const trace expected = first.take();

  traced_session second;
  // A different first kernel gives every kernel another index in this trace.
  testing::launch(second.dev(), testing::noop_kernel(), testing::noop_params{0});
  second.rec().mark_iteration();
  scripted_iteration(second, 1);
  const trace live = second.take();
  ASSERT_NE(expected.kernels[0].name, live.kernels[0].name);

  divergence_detector d(expected, expected.marked_iterations().at(0));
  const event_range r = live.marked_iterations().at(0);
  for (std::size_t i = r.begin; i < r.end; ++i) EXPECT_FALSE(d.feed(live, live.events[i]).has_value()) << i;
  EXPECT_FALSE(d.finish().has_value());
  EXPECT_EQ(d.position(), d.length());
  d.restart();
  EXPECT_EQ(d.position(), 0u);
}

TEST(Divergence, ABatchSizeChangeIsCaughtAtTheBatchAllocation) {
  traced_session s;
  auto ctx = s.ctx();
  workloads::models::resnet_config c;
  c.depth = 8;
  c.batch = 2;
  workloads::models::resnet small(c);
  c.batch = 3;
  workloads::models::resnet large(c);
  small.init(ctx, 1);
  large.init(ctx, 1);
  workloads::training_options o;
  o.iterations = 1;
  s.rec().mark_iteration();
  static_cast<void>(workloads::train(ctx, small, o));
  s.rec().mark_iteration();
  static_cast<void>(workloads::train(ctx, large, o));
  s.rec().mark_iteration();
  small.release();
  large.release();
  const trace t = s.take();
  const auto its = t.marked_iterations();
  ASSERT_EQ(its.size(), 2u);
  // Same layers, another batch: the very first event of the step, the batch's
  // allocation, differs.
  const std::uint64_t input_bytes = 2u * 3 * 16 * 16 * sizeof(float);
  const auto div = find_divergence(t, its[0], t, its[1]);
  ASSERT_TRUE(div.has_value());
  EXPECT_EQ(div->index, 0u);
  EXPECT_EQ(div->expected, "alloc " + std::to_string(input_bytes) + " B");
  EXPECT_EQ(div->seen, "alloc " + std::to_string(input_bytes * 3 / 2) + " B");
}

}  // namespace
}  // namespace sublinear::tracer
