// Online iteration boundaries (Note [Online iteration boundaries]): on hand-made launch
// sequences, and on the launches of the host workloads' training, whose recorded markers
// are the ground truth the detector never sees.
#include "tracer/online_iterations.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"
#include "marked_training.hpp"

namespace sublinear::tracer {
namespace {

using workloads::models::model_kind;
using testing::train_marked;

struct launch {
  std::uint64_t signature;
  std::size_t live;
};

// One training step shaped like a network of `blocks` identical blocks: the forward pass
// launches the same kernels per block at rising live bytes, the backward pass the same
// backward kernels at falling ones, then an optimizer kernel per block.
std::vector<launch> step(int blocks, std::size_t persistent = 1000) {
  std::vector<launch> s;
  std::size_t live = persistent;
  s.push_back({1, live});  // the batch's copy
  for (int b = 0; b < blocks; ++b) {
    live += 10;
    s.push_back({2, live});  // conv
    live += 10;
    s.push_back({3, live});  // relu
  }
  for (int b = 0; b < blocks; ++b) {
    s.push_back({4, live});  // relu backward
    live -= 10;
    s.push_back({5, live});  // conv backward
    live -= 10;
  }
  for (int b = 0; b < blocks; ++b) s.push_back({6, live + 5});  // optimizer, gradients alive
  return s;
}

// Feeds `steps` and returns the indices of the launches the detector put a boundary before.
std::vector<std::size_t> feed(online_iterations& d, const std::vector<launch>& launches) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < launches.size(); ++i) {
    if (d.on_launch(launches[i].signature, launches[i].live)) at.push_back(i);
  }
  return at;
}

online_iteration_options every_launch() {
  online_iteration_options o;
  o.min_period = 4;
  o.check_every = 1;
  o.min_evidence = 0;
  return o;
}

TEST(OnlineIterations, FindsTheStepNotTheRepeatedBlockAndMarksEachStepAtItsStart) {
  const std::vector<launch> one = step(6);
  std::vector<launch> all{{9, 500}, {9, 600}, {7, 700}};  // initialisation: other kernels
  for (int i = 0; i < 6; ++i) all.insert(all.end(), one.begin(), one.end());
  online_iterations d(every_launch());
  const std::vector<std::size_t> at = feed(d, all);
  EXPECT_EQ(d.period(), one.size()) << "locked onto a period inside the step";
  ASSERT_FALSE(at.empty());
  for (std::size_t i : at) EXPECT_EQ((i - 3) % one.size(), 0u) << "a boundary at launch " << i << ", not a step's first";
  // Found at the end of the second step (these steps are identical from the first): the
  // four after it are marked.
  EXPECT_EQ(at.size(), 4u);
  EXPECT_EQ(d.lost(), 0u);
}

TEST(OnlineIterations, WithoutLiveBytesTheRepeatedBlockWouldBeTaken) {
  // The same launches with flat live bytes: the block's two kernels repeat at period 2, and
  // with min_period 2 that is what a signature-only search finds. This is why live bytes
  // are part of the test.
  std::vector<launch> all;
  for (int i = 0; i < 4; ++i) {
    for (const launch& l : step(6)) all.push_back({l.signature, 0});
  }
  online_iteration_options o = every_launch();
  o.min_period = 2;
  online_iterations d(o);
  feed(d, all);
  EXPECT_EQ(d.period(), 2u);
}

TEST(OnlineIterations, APeriodIsDroppedAtADifferingLaunchAndFoundAgain) {
  const std::vector<launch> one = step(4);
  std::vector<launch> all;
  for (int i = 0; i < 4; ++i) all.insert(all.end(), one.begin(), one.end());
  const std::size_t extra_at = all.size() + 5;
  for (int i = 0; i < 5; ++i) all.insert(all.end(), one.begin(), one.end());
  all.insert(all.begin() + static_cast<std::ptrdiff_t>(extra_at), launch{42, 2000});  // a logging kernel
  online_iterations d(every_launch());
  const std::vector<std::size_t> at = feed(d, all);
  EXPECT_EQ(d.lost(), 1u);
  EXPECT_EQ(d.period(), one.size());
  bool before = false, after = false;
  for (std::size_t i : at) {
    const std::size_t shifted = i > extra_at ? i - 1 : i;  // index without the extra launch
    EXPECT_EQ(shifted % one.size(), 0u) << "boundary at " << i;
    before = before || i < extra_at;
    after = after || i > extra_at;
  }
  EXPECT_TRUE(before && after) << "marked before the extra launch and again after it";
}

TEST(OnlineIterations, ASequenceThatNeverRepeatsIsNeverMarked) {
  online_iterations d(every_launch());
  std::vector<launch> all;
  for (std::uint64_t i = 0; i < 2000; ++i) all.push_back({i % 97 + (i / 97) * 1000, i});
  EXPECT_TRUE(feed(d, all).empty());
  EXPECT_EQ(d.period(), 0u);
}

TEST(OnlineIterations, CheckingEveryFewLaunchesFindsTheSamePeriodLater) {
  const std::vector<launch> one = step(5);
  std::vector<launch> all;
  for (int i = 0; i < 8; ++i) all.insert(all.end(), one.begin(), one.end());
  online_iteration_options o = every_launch();
  o.check_every = 7;
  online_iterations d(o);
  const std::vector<std::size_t> at = feed(d, all);
  EXPECT_EQ(d.period(), one.size());
  ASSERT_FALSE(at.empty());
  for (std::size_t i : at) EXPECT_EQ(i % one.size(), 0u);
}

TEST(LaunchSignature, DependsOnKernelShapeAndBytesNeverOnAddresses) {
  const dims g{4, 1, 1}, b{128, 1, 1};
  const std::uint64_t s = launch_signature(event_kind::launch, 7, g, b, 0, 0);
  EXPECT_EQ(s, launch_signature(event_kind::launch, 7, g, b, 0, 0));
  EXPECT_NE(s, launch_signature(event_kind::launch, 8, g, b, 0, 0));
  EXPECT_NE(s, launch_signature(event_kind::launch, 7, dims{8, 1, 1}, b, 0, 0));
  EXPECT_NE(s, launch_signature(event_kind::launch, 7, g, dims{64, 1, 1}, 0, 0));
  EXPECT_NE(s, launch_signature(event_kind::launch, 7, g, b, 256, 0));
  EXPECT_NE(launch_signature(event_kind::memcpy, 0, {}, {}, 0, 64), launch_signature(event_kind::memcpy, 0, {}, {}, 0, 32));
  EXPECT_NE(launch_signature(event_kind::memcpy, 0, {}, {}, 0, 64), launch_signature(event_kind::memset, 0, {}, {}, 0, 64));
}

// ---- the host workloads -----------------------------------------------------------------

class OnlineIterationsOnWorkloads : public ::testing::TestWithParam<model_kind> {};

// The detector sees what the process runtime sees: every launch, copy and set with the
// bytes allocated at that moment (from the trace's allocations and frees). The markers the
// training loop recorded after each optimizer step are the truth: every boundary the
// detector gives must be the first launch after one of them, and once found, every marker
// but the last must be followed by one.
TEST_P(OnlineIterationsOnWorkloads, MarksTheFirstLaunchAfterEachOptimizerStep) {
  // Enough steps for the smallest (the MLP's 20-odd launches) to span min_evidence.
  const int iterations = 24;
  const trace t = train_marked(GetParam(), iterations);
  online_iterations d;  // the runtime's options
  std::unordered_map<std::uint64_t, std::size_t> sizes;
  std::size_t live = 0;
  bool after_marker = false;
  std::size_t markers = 0, first_launches = 0, detected = 0, detected_at_first = 0, first_after_lock = 0;
  // Up to the last marker: what follows it is the end of the program, not an iteration.
  std::size_t end = t.events.size();
  while (end > 0 && t.events[end - 1].kind != event_kind::marker) --end;
  for (std::size_t i = 0; i < end; ++i) {
    const event& e = t.events[i];
    switch (e.kind) {
      case event_kind::alloc:
        sizes[e.address] = e.bytes;
        live += e.bytes;
        break;
      case event_kind::free:
        live -= sizes[e.address];
        sizes.erase(e.address);
        break;
      case event_kind::marker:
        ++markers;
        after_marker = true;
        break;
      case event_kind::launch:
      case event_kind::memcpy:
      case event_kind::memset: {
        const std::uint64_t kernel = e.kind == event_kind::launch ? t.kernels[e.kernel].handle : 0;
        const bool locked_before = d.period() > 0;
        const bool boundary =
            d.on_launch(launch_signature(e.kind, kernel, e.grid, e.block, e.shared_mem,
                                         e.kind == event_kind::launch ? 0 : e.bytes), live);
        if (after_marker) {
          ++first_launches;
          if (locked_before) ++first_after_lock;
        }
        if (boundary) {
          ++detected;
          if (after_marker) ++detected_at_first;
        }
        after_marker = false;
        break;
      }
      default: break;
    }
  }
  ASSERT_EQ(markers, static_cast<std::size_t>(iterations));
  EXPECT_GT(d.period(), 0u) << "no period found";
  EXPECT_EQ(d.lost(), 0u);
  EXPECT_EQ(detected, detected_at_first) << "a boundary fell inside an iteration";
  EXPECT_GE(detected, 4u) << "found late: " << detected << " of " << first_launches << " iterations marked";
  EXPECT_EQ(detected, first_after_lock) << "an iteration start after the period was found went unmarked";
}

INSTANTIATE_TEST_SUITE_P(Workloads, OnlineIterationsOnWorkloads,
                         ::testing::Values(model_kind::mlp, model_kind::resnet, model_kind::densenet, model_kind::lstm,
                                           model_kind::transformer),
                         [](const ::testing::TestParamInfo<model_kind>& p) {
                           return std::string(workloads::models::to_string(p.param));
                         });

}  // namespace
}  // namespace sublinear::tracer
