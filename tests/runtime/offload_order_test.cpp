// The order of the copies the engine queues at one point (Note [Offload execution]) is
// the simulator's (Note [Link timeline]): each copy stream is a FIFO, so copies queued
// together run in that order, and the stalls the plan predicts hold only if the runtime
// queues them as the simulator modelled. Two offloads are copied out after the same
// launch and fetched after the same launch, listed in the plan in the opposite order of
// their deadlines (release_before, restore_before). The engine notes each copy in its
// timeline as it queues it on the copy stream, so the timeline's order is the stream's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "policy/simulator.hpp"
#include "runtime/host/host_runtime.hpp"
#include "chain_kernels.hpp"

namespace sublinear::runtime {
namespace {

using test::accumulate_kernel;
using test::accumulate_params;
using test::fill_kernel;
using test::fill_params;

constexpr std::int64_t kSmall = 64 * 1024;  // floats: 256 KiB, whole 64 KiB pages
constexpr std::int64_t kLarge = 128 * 1024;  // 512 KiB
constexpr std::size_t kSmallBytes = kSmall * sizeof(float);
constexpr std::size_t kLargeBytes = kLarge * sizeof(float);
constexpr int kPadding = 4;

// One iteration: fill S, fill L, kPadding launches touching neither, then S's consumer,
// then L's.
struct two_buffers : test::accumulator_rig {
  void iteration() {
    auto* s = static_cast<float*>(alloc.allocate(kSmallBytes, nullptr));
    auto* l = static_cast<float*>(alloc.allocate(kLargeBytes, nullptr));
    fill_params fs{s, kSmall, 0.25f};
    dev.launch(fill_kernel(), {}, nullptr, &fs);
    fill_params fl{l, kLarge, 0.75f};
    dev.launch(fill_kernel(), {}, nullptr, &fl);
    for (int k = 0; k < kPadding; ++k) {
      fill_params fp{scratch, 64, static_cast<float>(k)};
      dev.launch(fill_kernel(), {}, nullptr, &fp);
    }
    accumulate_params as{acc, s, kSmall};
    dev.launch(accumulate_kernel(), {}, nullptr, &as);
    alloc.deallocate(s);
    accumulate_params al{acc, l, kLarge};
    dev.launch(accumulate_kernel(), {}, nullptr, &al);
    alloc.deallocate(l);
    dev.synchronize();
  }
};

constexpr double kLinkBytesPerS = 4e9;

struct amended {
  policy::plan plan;
  policy::simulation simulated;
};

// The traced iteration's S and L (none if not found).
struct small_and_large {
  policy::buffer_id s = policy::none, l = policy::none;
};
small_and_large find_buffers(const policy::iteration& g) {
  small_and_large f;
  for (policy::buffer_id b = 0; b < g.buffers.size(); ++b) {
    if (g.buffers[b].persistent()) continue;
    if (g.buffers[b].size == kSmallBytes) f.s = b;
    if (g.buffers[b].size == kLargeBytes) f.l = b;
  }
  return f;
}

// Keeps the amended plan and simulates it over the link the engine is given.
void keep_simulated(const policy::iteration& g, const policy::plan& p, amended& out) {
  policy::link_model link;
  link.to_host = {kLinkBytesPerS, 0.0};
  link.to_device = {kLinkBytesPerS, 0.0};
  out.plan = p;
  out.simulated = policy::simulate(g, p, link);
}

// Trains five iterations without and with the engine under the amended plan.
struct outcome {
  std::vector<float> without, with;
  std::vector<iteration_report> reports;
  std::vector<timeline_event> timeline;
  std::string plan_error;
};
template <class Rig = two_buffers>
outcome train(const std::function<void(const policy::iteration&, policy::plan&)>& amend, double latency_s = 0.0) {
  // Over the traced peak: the plan is the amended one.
  const engine_options o = test::amended_plan_options("2x", amend);
  outcome r;
  {
    Rig c;
    for (int it = 0; it < 5; ++it) c.iteration();
    r.without = c.result();
  }
  Rig c;
  host_runtime rt(c.dev, c.alloc, o);
  rt.replay_device().set_link({kLinkBytesPerS, latency_s}, {kLinkBytesPerS, latency_s}, "test");
  for (int it = 0; it < 5; ++it) {
    c.iteration();
    rt.mark_iteration();
  }
  r.with = c.result();
  r.reports = rt.get().iterations();
  r.plan_error = rt.get().plan_error();
  r.timeline = rt.get().timeline();
  return r;
}

// Replaces the plan by two offloads, L listed first: both copied out after L's fill, S
// released first; both fetched after the last padding launch, S restored first.
void offload_both(const policy::iteration& g, policy::plan& p, amended& out) {
  const auto [s, l] = find_buffers(g);
  ASSERT_NE(s, policy::none);
  ASSERT_NE(l, policy::none);
  const policy::launch_id fill_l = g.buffers[l].users.front();
  const policy::launch_id use_s = g.buffers[s].users.back();
  const policy::launch_id use_l = g.buffers[l].users.back();
  ASSERT_EQ(use_s, fill_l + kPadding + 1);
  ASSERT_EQ(use_l, use_s + 1);
  const policy::launch_id fetch = use_s - 1;
  p.evictions.clear();
  p.retentions.clear();
  p.packs.clear();
  p.recomputed_launches = 0;
  p.added_compute_s = 0.0;
  p.offloads = {
      {l, fill_l, fill_l + 2, fetch, use_l},  // target, evict_after, release_before, fetch_after, restore_before
      {s, fill_l, fill_l + 1, fetch, use_s},
  };
  keep_simulated(g, p, out);
}

struct queued {
  std::vector<std::size_t> out, in;  // bytes of each copy, in the order the engine queued them
};

TEST(OffloadOrder, CopiesQueuedAtOneLaunchGoInTheSimulatorsDeadlineOrder) {
  amended a;
  const outcome r = train([&a](const policy::iteration& g, policy::plan& p) { offload_both(g, p, a); });
  std::vector<queued> by_iteration(1);
  for (const timeline_event& e : r.timeline) {
    if (e.what == timeline_event::kind::iteration) by_iteration.emplace_back();
    if (e.what == timeline_event::kind::offload) by_iteration.back().out.push_back(e.bytes);
    if (e.what == timeline_event::kind::fetch) by_iteration.back().in.push_back(e.bytes);
  }
  const std::vector<iteration_report>& reports = r.reports;
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.plan_error, "");
  ASSERT_EQ(a.plan.offloads.size(), 2u) << "the plan was amended";
  ASSERT_TRUE(a.simulated.valid) << a.simulated.error;

  // The simulator's order: by when each copy starts on its direction of the link.
  const auto order = [&](auto start) {
    std::vector<std::size_t> idx{0, 1};
    std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) {
      return start(a.simulated.copies[x]) < start(a.simulated.copies[y]);
    });
    std::vector<std::size_t> bytes;
    for (std::size_t j : idx) bytes.push_back(j == 0 ? kLargeBytes : kSmallBytes);
    return bytes;
  };
  const std::vector<std::size_t> simulated_out = order([](const policy::offload_times& t) { return t.to_host_start; });
  const std::vector<std::size_t> simulated_in = order([](const policy::offload_times& t) { return t.to_device_start; });
  const std::vector<std::size_t> deadline_order{kSmallBytes, kLargeBytes};  // S's deadlines are the earlier
  EXPECT_EQ(simulated_out, deadline_order) << "the simulator copies out by release_before, not plan order";
  EXPECT_EQ(simulated_in, deadline_order) << "and fetches by restore_before";

  std::size_t planned = 0;
  for (std::size_t i = 0; i < reports.size() && i < by_iteration.size(); ++i) {
    if (reports[i].state == engine_state::trace) continue;
    SCOPED_TRACE(i);
    ++planned;
    EXPECT_FALSE(reports[i].diverged) << reports[i].divergence;
    EXPECT_EQ(reports[i].offloads, 2u);
    EXPECT_EQ(reports[i].fetches, 2u);
    EXPECT_EQ(by_iteration[i].out, simulated_out) << "the copy stream gets the copies out in the simulator's order";
    EXPECT_EQ(by_iteration[i].in, simulated_in) << "and the fetches";
  }
  EXPECT_GE(planned, 2u);
}


// Makes `target`, produced by launch `made` alone, the plan's one eviction, its producer
// replayed before launch `back`.
void evict_only(policy::plan& p, policy::buffer_id target, policy::launch_id made, policy::launch_id back) {
  p.evictions.clear();
  p.retentions.clear();
  p.packs.clear();
  policy::eviction ev;
  ev.target = target;
  ev.evict_after = made;
  ev.restore_before = back;
  ev.recipe = {made};
  p.evictions = {ev};
}

// Replaces the plan by an eviction of S (its fill replayed) and an offload of L, both
// restoring before S's consumer: the simulator runs the recipe, then waits for the fetch.
void recompute_and_offload(const policy::iteration& g, policy::plan& p, amended& out) {
  const auto [s, l] = find_buffers(g);
  ASSERT_NE(s, policy::none);
  ASSERT_NE(l, policy::none);
  const policy::launch_id fill_s = g.buffers[s].users.front();
  const policy::launch_id fill_l = g.buffers[l].users.front();
  const policy::launch_id use_s = g.buffers[s].users.back();
  evict_only(p, s, fill_s, use_s);
  p.offloads = {{l, fill_l, fill_l + 1, use_s - 1, use_s}};
  keep_simulated(g, p, out);
}

// Before a launch, the simulator runs the recipes restoring there and then waits for the
// fetches restoring there; the engine queues them in that order, so the stream's wait for
// a fetch does not hold up the recipes queued with it.
TEST(OffloadOrder, RecipesRestoringAtALaunchAreQueuedBeforeItsFetchWait) {
  amended a;
  const outcome r = train([&a](const policy::iteration& g, policy::plan& p) { recompute_and_offload(g, p, a); });
  const std::vector<iteration_report>& reports = r.reports;
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.plan_error, "");
  ASSERT_EQ(a.plan.offloads.size(), 1u) << "the plan was amended";
  ASSERT_TRUE(a.simulated.valid) << a.simulated.error;
  EXPECT_EQ(a.simulated.recomputed_launches, 1u);

  // Per iteration: when the recipe was queued (its event's end) and when the stream was
  // made to wait for the fetch (the fetch event's end).
  std::size_t index = 0, checked = 0;
  double recipe_queued = -1.0, fetch_waited = -1.0;
  for (const timeline_event& e : r.timeline) {
    if (e.what == timeline_event::kind::regenerate) recipe_queued = e.end_s;
    if (e.what == timeline_event::kind::fetch) fetch_waited = e.end_s;
    if (e.what != timeline_event::kind::iteration) continue;
    if (index < reports.size() && reports[index].state != engine_state::trace) {
      SCOPED_TRACE(index);
      EXPECT_FALSE(reports[index].diverged) << reports[index].divergence;
      EXPECT_EQ(reports[index].recomputed_launches, 1u);
      EXPECT_EQ(reports[index].fetches, 1u);
      ASSERT_GE(recipe_queued, 0.0);
      ASSERT_GE(fetch_waited, 0.0);
      EXPECT_LE(recipe_queued, fetch_waited) << "the fetch wait came before the recipe";
      ++checked;
    }
    ++index;
    recipe_queued = fetch_waited = -1.0;
  }
  EXPECT_GE(checked, 2u);
}

// One iteration: fill L, D = scale(L), fill M, kLongPadding launches touching none of
// them, then M's consumer, D's, L's. The padding is longer than the engine's prefetch
// window (engine_options::prefetch_launches), so D's recipe comes into the window after
// the fetches are queued.
constexpr int kLongPadding = 12;
struct derived_buffer : test::accumulator_rig {
  void iteration() {
    auto* l = static_cast<float*>(alloc.allocate(kSmallBytes, nullptr));
    auto* d = static_cast<float*>(alloc.allocate(kSmallBytes, nullptr));
    auto* m = static_cast<float*>(alloc.allocate(kSmallBytes, nullptr));
    fill_params fl{l, kSmall, 0.75f};
    dev.launch(fill_kernel(), {}, nullptr, &fl);
    test::scale_params sd{d, l, kSmall, 2.0f};
    dev.launch(test::scale_kernel(), {}, nullptr, &sd);
    fill_params fm{m, kSmall, 0.25f};
    dev.launch(fill_kernel(), {}, nullptr, &fm);
    for (int k = 0; k < kLongPadding; ++k) {
      fill_params fp{scratch, 64, static_cast<float>(k)};
      dev.launch(fill_kernel(), {}, nullptr, &fp);
    }
    for (float* x : {m, d, l}) {
      accumulate_params a{acc, x, kSmall};
      dev.launch(accumulate_kernel(), {}, nullptr, &a);
      alloc.deallocate(x);
    }
    dev.synchronize();
  }
};

// D is dropped and rebuilt from L by its recipe at D's consumer; L and M are offloaded and
// fetched together, M first, both due before M's consumer, so L is back before D's recipe
// (Note [Offloaded recipe inputs]). Each copy takes 50 ms, so L's bytes land long after
// its fetch is queued.
void recompute_from_an_offloaded_input(const policy::iteration& g, policy::plan& p, amended& out) {
  std::vector<policy::buffer_id> act;  // L, D, M in allocation order
  for (policy::buffer_id b = 0; b < g.buffers.size(); ++b) {
    if (!g.buffers[b].persistent() && g.buffers[b].size == kSmallBytes) act.push_back(b);
  }
  ASSERT_EQ(act.size(), 3u);
  const policy::buffer_id l = act[0], d = act[1], m = act[2];
  const policy::launch_id make_d = g.buffers[d].users.front();
  const policy::launch_id fill_m = g.buffers[m].users.front();
  const policy::launch_id use_m = g.buffers[m].users.back();
  const policy::launch_id use_d = g.buffers[d].users.back();
  ASSERT_EQ(use_d, use_m + 1);
  evict_only(p, d, make_d, use_d);
  const policy::launch_id fetch = fill_m + 1;
  p.offloads = {{m, fill_m, fill_m + 1, fetch, use_m}, {l, make_d, fill_m + 1, fetch, use_m}};
  keep_simulated(g, p, out);
}

// The engine may run a recipe ahead of its restore point when memory allows (Note
// [Prefetch]); a recipe that reads an offloaded buffer whose bytes are still on their
// way must wait for its restore point, or it rebuilds from pages the copy has not filled.
TEST(OffloadOrder, NoRecipeRunsAheadOfTheFetchOfAnInputItReads) {
  amended a;
  const outcome r = train<derived_buffer>(
      [&a](const policy::iteration& g, policy::plan& p) { recompute_from_an_offloaded_input(g, p, a); }, 0.05);
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.plan_error, "");
  ASSERT_EQ(a.plan.offloads.size(), 2u) << "the plan was amended";
  std::size_t planned = 0;
  for (const iteration_report& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    SCOPED_TRACE(it.index);
    ++planned;
    EXPECT_FALSE(it.diverged) << it.divergence;
    EXPECT_EQ(it.validation_mismatches, 0u) << "D was rebuilt from L's pages before L's bytes landed";
    EXPECT_EQ(it.recomputed_launches, 1u);
    EXPECT_EQ(it.fetches, 2u);
    EXPECT_EQ(it.safety_fetches, 0u) << "the recipe ran at its restore point, L already back";
  }
  EXPECT_GE(planned, 3u);
}

}  // namespace
}  // namespace sublinear::runtime
