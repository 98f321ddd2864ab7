// Offload execution (Note [Offload execution] in runtime/engine_swap.cpp) on the host
// device's copy engine: plans whose evictions are turned into offloads (engine_options::
// amend_plan) train bit-identically within the budget; copies the device refuses, a host
// pool over its budget, a divergence with copies in flight and a launch that writes an
// offloaded buffer before the plan fetches it are all handled; the host pool is the
// plan's host layout (Note [Host pool layout]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "policy/host_layout.hpp"
#include "runtime/host/host_runtime.hpp"
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


constexpr std::int64_t kFloats = 64 * 1024;  // 256 KiB activations: whole 64 KiB pages

// A chain: the forward allocates `layers` activations, the backward reads them in reverse
// (optionally rewriting each in place first: a write to a buffer the plan offloaded).
struct chain : test::accumulator_rig {
  bool rewrite_in_backward = false;
  std::int64_t floats = kFloats;  // each activation's

  void iteration(int layers, const std::function<void(int)>& during_backward = {}) {
    std::vector<float*> acts;
    auto* first = static_cast<float*>(alloc.allocate(floats * sizeof(float), nullptr));
    fill_params fp{first, floats, 0.5f};
    dev.launch(fill_kernel(), {}, nullptr, &fp);
    acts.push_back(first);
    for (int l = 1; l < layers; ++l) {
      auto* next = static_cast<float*>(alloc.allocate(floats * sizeof(float), nullptr));
      scale_params sp{next, acts.back(), floats, 0.5f + 0.01f * static_cast<float>(l)};
      dev.launch(scale_kernel(), {}, nullptr, &sp);
      acts.push_back(next);
    }
    for (int l = layers - 1; l >= 0; --l) {
      if (during_backward) during_backward(l);
      float* a = acts[static_cast<std::size_t>(l)];
      if (rewrite_in_backward) {
        scale_params sp{a, a, floats, 0.75f};
        dev.launch(scale_kernel(), {}, nullptr, &sp);
      }
      accumulate_params ap{acc, a, floats};
      dev.launch(accumulate_kernel(), {}, nullptr, &ap);
      alloc.deallocate(a);
    }
    dev.synchronize();
  }
};

// Every eviction of `p` becomes an offload with the same points: released one launch
// after its last forward use, fetched `lead` launches before its consumer (at most back
// to the release). The plan then recomputes nothing.
void offload_everything(const policy::iteration& g, policy::plan& p, std::size_t lead = 0, std::size_t late = 0) {
  std::set<policy::buffer_id> seen;
  for (policy::offload& o : p.offloads) {  // the planner's own (it sees the test's fast link)
    seen.insert(o.target);
    o.restore_before = static_cast<policy::launch_id>(std::min<std::size_t>(o.restore_before + late, g.launches.size()));
  }
  for (const policy::eviction& e : p.evictions) {
    if (!seen.insert(e.target).second) continue;
    policy::offload o;
    o.target = e.target;
    o.evict_after = e.evict_after;
    o.release_before = e.evict_after + 1;
    o.restore_before = static_cast<policy::launch_id>(
        std::min<std::size_t>(e.restore_before + late, g.launches.size()));
    const std::size_t fetch = o.restore_before - 1 >= lead ? o.restore_before - 1 - lead : 0;
    o.fetch_after = static_cast<policy::launch_id>(std::max<std::size_t>(fetch, o.release_before - 1));
    p.offloads.push_back(o);
  }
  p.evictions.clear();
  p.retentions.clear();
  p.packs.clear();
  p.recomputed_launches = 0;
  p.added_compute_s = 0.0;
}

engine_options offload_options(const std::string& budget) {
  return test::amended_plan_options(budget, [](const policy::iteration& g, policy::plan& p) { offload_everything(g, p); });
}

struct run {
  std::vector<float> without, with;
  std::vector<iteration_report> reports;
  std::string plan_error;
  engine::plan_link link;
  run_report report;
};

bool g_time_launches = false;

// The same training without and with the engine; `step(c, rt, it)` runs iteration `it`.
run train_both(engine_options o, int iterations, const std::function<void(chain&, host_runtime*, int)>& step,
               bool rewrite = false, std::int64_t floats = kFloats) {
  run out;
  for (bool with_engine : {false, true}) {
    chain c;
    c.rewrite_in_backward = rewrite;
    c.floats = floats;
    std::unique_ptr<host_runtime> rt;
    if (with_engine) {
      host_runtime_options ro;
      ro.time_launches = g_time_launches;  // off: costs from touched bytes, the same plan every run
      rt = std::make_unique<host_runtime>(c.dev, c.alloc, o, ro);
      // A fast link: these tests are about order and bytes, not the rate.
      rt->replay_device().set_link({4e9, 0.0}, {4e9, 0.0}, "test");
    }
    for (int it = 0; it < iterations; ++it) {
      step(c, rt.get(), it);
      if (rt) rt->mark_iteration();
    }
    if (rt) {
      out.reports = rt->get().iterations();
      out.plan_error = rt->get().plan_error();
      out.link = rt->get().planned_link();
      report_metadata meta;
      meta.model = "chain";
      out.report = make_report(rt->get(), o.config, meta);
    }
    (with_engine ? out.with : out.without) = c.result();
  }
  return out;
}

void plain_steps(chain& c, host_runtime*, int) { c.iteration(16); }

TEST(Offload, EveryEvictionOffloadedTrainsBitIdenticallyWithinTheBudget) {
  const run r = train_both(offload_options("0.5x"), 6, plain_steps);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  EXPECT_GT(r.link.offloads, 0u);
  EXPECT_EQ(r.link.source, "test");
  ASSERT_EQ(r.reports.size(), 6u);
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    SCOPED_TRACE(it.index);
    EXPECT_FALSE(it.diverged) << it.divergence;
    EXPECT_LE(it.peak_mapped, it.budget);
    EXPECT_EQ(it.offloads, r.link.offloads) << "every planned offload was copied out";
    EXPECT_EQ(it.fetches, it.offloads) << "and back";
    EXPECT_EQ(it.fetched_bytes, it.offloaded_bytes);
    EXPECT_EQ(it.recomputed_launches, 0u) << "nothing left to recompute";
    EXPECT_EQ(it.safety_fetches, 0u);
    EXPECT_EQ(it.failed_copies, 0u);
    EXPECT_GT(it.link_busy_s, 0.0) << "the copies ran on the copy engine";
  }
}

TEST(Offload, FetchesIssuedAheadOfTheirConsumerStillTrainBitIdentically) {
  engine_options o = offload_options("0.6x");
  o.amend_plan = [](const policy::iteration& g, policy::plan& p) { offload_everything(g, p, 2); };
  const run r = train_both(o, 6, plain_steps);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    EXPECT_GT(it.fetches, 0u) << it.index;
    EXPECT_FALSE(it.diverged) << it.index << ": " << it.divergence;
  }
}

// A plan may queue a copy to host launches after its buffer's last use (Note [Copies out
// by deadline] in policy/offload_placement.cpp): here every copy out two launches late.
TEST(Offload, CopiesQueuedLaunchesAfterTheLastUseTrainBitIdentically) {
  std::size_t deferred = 0;
  engine_options o = offload_options("0.6x");
  o.amend_plan = [&deferred](const policy::iteration& g, policy::plan& p) {
    offload_everything(g, p);
    for (policy::offload& off : p.offloads) {
      const policy::launch_id rel = std::min<policy::launch_id>(off.release_before + 2, off.fetch_after + 1);
      if (rel - 1 > off.evict_after) ++deferred;
      off.release_before = rel;
      off.evict_after = rel - 1;
    }
  };
  const run r = train_both(o, 6, plain_steps);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_GT(deferred, 0u);
  EXPECT_EQ(r.with, r.without);
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    SCOPED_TRACE(it.index);
    EXPECT_FALSE(it.diverged) << it.divergence;
    EXPECT_EQ(it.offloads, r.link.offloads) << "every planned offload was copied out";
    EXPECT_EQ(it.fetches, it.offloads) << "and back";
    EXPECT_EQ(it.safety_fetches, 0u);
    EXPECT_EQ(it.failed_copies, 0u);
  }
}

TEST(Offload, ACopyTheDeviceRefusesIsMadeSynchronouslyAndTrainingStaysExact) {
  const run r = train_both(offload_options("0.5x"), 6, [](chain& c, host_runtime* rt, int it) {
    if (rt && it == 3) rt->replay_device().fail_next_copies(1, 1);  // one each way
    c.iteration(16);
  });
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.reports.size(), 6u);
  EXPECT_EQ(r.reports[3].failed_copies, 2u);
  EXPECT_LE(r.reports[3].peak_mapped, r.reports[3].budget) << "a synchronous copy keeps the plan's memory";
  EXPECT_EQ(r.reports[4].failed_copies, 0u);
}

TEST(Offload, AHostPoolOverTheHostBudgetMakesThePlanRecomputeAndSaysWhy) {
  engine_options o = offload_options("0.5x");
  o.config.host_budget = 64 * 1024;  // one activation is 256 KiB
  const run r = train_both(o, 5, plain_steps);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  EXPECT_EQ(r.link.offloads, 0u);
  EXPECT_NE(r.link.refused.find("SUBLINEAR_HOST_BUDGET"), std::string::npos) << r.link.refused;
  EXPECT_EQ(r.report.plan.offload_error, r.link.refused) << "the report says why";
  std::size_t evictions = 0;
  for (const auto& it : r.reports) {
    EXPECT_EQ(it.offloads, 0u) << it.index;
    EXPECT_LE(it.host_held_bytes, o.config.host_budget) << it.index << ": Note [Host budget]";
    evictions += it.evictions;
  }
  EXPECT_GT(evictions, 0u) << "the budget is met by recompute instead";
}

// The engine's pool is the plan's host layout (Note [Host pool layout]): for the planner's
// own offloads it is the simulator's host_bytes, for offloads amended in afterwards the
// same function's pool over them.
TEST(Offload, TheEnginesHostPoolIsThePlansHostLayout) {
  engine_options own = offload_options("0.5x");
  own.config.offload = policy::offload_mode::only;
  policy::plan planned;
  own.amend_plan = [&planned](const policy::iteration&, policy::plan& p) { planned = p; };
  const run r = train_both(own, 4, plain_steps);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_GT(planned.offloads.size(), 0u);
  EXPECT_GT(planned.host_bytes, 0u);
  EXPECT_EQ(r.link.host_bytes, planned.host_bytes);
  EXPECT_EQ(r.report.plan.host_bytes, planned.host_bytes) << "the report shows the same pool";
  for (const auto& it : r.reports) {
    if (it.state != engine_state::steady) continue;
    EXPECT_GE(it.host_held_bytes, planned.host_bytes) << "the pool is held";
  }

  engine_options amended = offload_options("0.5x");
  policy::host_layout layout;
  amended.amend_plan = [&layout](const policy::iteration& g, policy::plan& p) {
    offload_everything(g, p);
    layout = policy::lay_out_host_pool(g, p.offloads);
  };
  const run e = train_both(amended, 4, plain_steps);
  ASSERT_EQ(e.plan_error, "");
  EXPECT_EQ(e.with, e.without);
  EXPECT_GT(e.link.offloads, 0u);
  EXPECT_EQ(e.link.host_bytes, layout.pool_bytes);
  EXPECT_GE(layout.pool_bytes, layout.most_held);
}

TEST(Offload, ADivergenceWithCopiesInFlightBringsEverythingBackAndTrainsExactly) {
  const run r = train_both(offload_options("0.5x"), 8, [](chain& c, host_runtime*, int it) {
    // Iteration 4 launches one kernel the trace never saw, halfway through the backward,
    // when the forward's copies to host memory and the first fetches are in flight.
    c.iteration(16, [&](int l) {
      if (it != 4 || l != 8) return;
      fill_params fp{c.scratch, 64, 2.0f};
      c.dev.launch(fill_kernel(), {}, nullptr, &fp);
    });
  });
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.reports.size(), 8u);
  EXPECT_TRUE(r.reports[4].diverged);
  EXPECT_GT(r.reports[4].offloads, 0u) << "the divergence came after copies out";
  EXPECT_EQ(r.reports[5].state, engine_state::trace) << "and the next iteration is traced again";
  EXPECT_GT(r.reports[7].fetches, 0u) << "the new plan offloads again";
}

// An allocation the plan never saw, in the middle of the backward, with fetches issued
// four launches ahead: the pressure valve gives back fetched buffers not needed yet (to
// be fetched again at their restore point), and counts each as a pressure eviction.
TEST(Offload, ThePressureValveGivesBackFetchedBuffersAndCountsEach) {
  engine_options o = offload_options("0.6x");
  o.amend_plan = [](const policy::iteration& g, policy::plan& p) { offload_everything(g, p, 4); };
  std::uint64_t calls = 0;
  std::size_t extra_bytes = 0;
  const run r = train_both(o, 6, [&](chain& c, host_runtime* rt, int it) {
    c.iteration(16, [&](int l) {
      if (rt == nullptr || it != 4 || l != 10) return;
      c.dev.synchronize();  // frees landed and the cache given back: the room is what the budget leaves
      c.alloc.reclaim();
      const auto before = c.alloc.get_stats();
      // Room under the budget, and two and a half activations more: no one buffer frees it.
      const std::size_t room = before.budget - (before.allocated - before.evicted);
      extra_bytes = room + 5 * kFloats * sizeof(float) / 2;
      void* extra = c.alloc.allocate(extra_bytes, nullptr, /*evictable=*/true);
      calls = c.alloc.get_stats().pressure_calls - before.pressure_calls;
      c.alloc.deallocate(extra);
    });
  });
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.reports.size(), 6u);
  EXPECT_GT(extra_bytes, 0u);
  EXPECT_GE(calls, 1u);
  const iteration_report& squeezed = r.reports[4];
  EXPECT_FALSE(squeezed.diverged) << squeezed.divergence;
  EXPECT_LE(squeezed.peak_mapped, squeezed.budget);
  EXPECT_GE(squeezed.pressure_evictions, 2u) << "each buffer given back counts";
  EXPECT_GT(squeezed.fetches, r.link.offloads) << "what was given back is fetched again";
  EXPECT_EQ(r.reports[5].pressure_evictions, 0u);
}

// Under an absolute budget a diverged iteration keeps the budget: what does not fit is
// offloaded as in a traced iteration (Note [Offloading the traced iteration]), instead of
// the budget being lifted. Iteration 4 allocates an extra activation-sized buffer in the
// middle of the backward, where the plan has no room for it.
TEST(Offload, ADivergedIterationUnderAnAbsoluteBudgetKeepsItByOffloading) {
  const run r = train_both(offload_options("3MiB"), 8, [](chain& c, host_runtime*, int it) {
    c.iteration(16, [&](int l) {
      if (it != 4 || l != 10) return;
      auto* extra = static_cast<float*>(c.alloc.allocate(kFloats * sizeof(float), nullptr));
      fill_params fp{extra, kFloats, 2.0f};
      c.dev.launch(fill_kernel(), {}, nullptr, &fp);
      c.alloc.deallocate(extra);
    });
  });
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.reports.size(), 8u);
  const iteration_report& d = r.reports[4];
  EXPECT_TRUE(d.diverged);
  EXPECT_EQ(d.budget, std::size_t{3} << 20) << "the budget was not lifted";
  EXPECT_LE(d.peak_mapped, d.budget);
  for (const auto& it : r.reports) EXPECT_LE(it.peak_mapped, std::size_t{3} << 20) << it.index;
}

TEST(Offload, ALaunchWritingAnOffloadedBufferBeforeThePlanFetchesItGetsItsBytesFirst) {
  // The plan fetches one launch late: the backward's in-place rewrite of each activation
  // comes before its restore point. The safety net brings the bytes back first.
  engine_options o = offload_options("0.65x");
  o.amend_plan = [](const policy::iteration& g, policy::plan& p) { offload_everything(g, p, 0, 1); };
  const run r = train_both(o, 6, plain_steps, /*rewrite=*/true);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  std::size_t safety = 0;
  for (const auto& it : r.reports) {
    safety += it.safety_fetches;
    if (it.state != engine_state::trace) {
      EXPECT_FALSE(it.diverged) << it.index;
    }
  }
  EXPECT_GT(safety, 0u);
}

// The planner's own offloads (SUBLINEAR_OFFLOAD=only), and its predicted iteration time
// beside the measured one. The figure is recorded and printed, not checked: times on a
// shared machine are not a test's to judge (benchmarks/offload_pairs.py reports them).
TEST(Offload, ThePlannersOwnOffloadsRunAndItsPredictedTimeIsReportedBesideTheMeasuredOne) {
  engine_options o = offload_options("0.5x");
  o.amend_plan = nullptr;
  o.config.offload = policy::offload_mode::only;
  g_time_launches = true;  // measured launch times, so that the prediction is in seconds
  const run r = train_both(o, 6, plain_steps);
  g_time_launches = false;
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  EXPECT_GT(r.link.offloads, 0u) << "no recompute: the plan offloads";
  EXPECT_GT(r.link.predicted_device_s, 0.0) << "the simulator predicts the plan's iteration";
  std::vector<double> walls;
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    EXPECT_EQ(it.recomputed_launches, 0u) << it.index;
    EXPECT_LE(it.peak_mapped, it.budget) << it.index;
    walls.push_back(it.wall_s);
  }
  ASSERT_FALSE(walls.empty());
  std::sort(walls.begin(), walls.end());
  const double measured = walls[walls.size() / 2];
  ::testing::Test::RecordProperty("predicted_iteration_s", std::to_string(r.link.predicted_device_s));
  ::testing::Test::RecordProperty("measured_iteration_s", std::to_string(measured));
  std::printf("predicted iteration %.4f s (traced launch costs, stalls), measured %.4f s (median of %zu)\n",
              r.link.predicted_device_s, measured, walls.size());
}

TEST(Offload, ReportsShowTheCopiesTheLinkAndTheCopyStream) {
  const run r = train_both(offload_options("0.5x"), 5, plain_steps);
  ASSERT_EQ(r.plan_error, "");
  const run_report back = parse_report(to_json(r.report));
  EXPECT_EQ(back.plan.offloads, r.link.offloads);
  EXPECT_EQ(back.plan.link_source, "test");
  EXPECT_DOUBLE_EQ(back.plan.link_to_host_bytes_per_s, 4e9);
  ASSERT_EQ(back.iterations.size(), r.reports.size());
  for (std::size_t i = 0; i < back.iterations.size(); ++i) {
    EXPECT_EQ(back.iterations[i].fetched_bytes, r.reports[i].fetched_bytes) << i;
    EXPECT_EQ(back.iterations[i].link_busy_s, r.reports[i].link_busy_s) << i;
  }
  std::size_t offload_events = 0, fetch_events = 0;
  for (const auto& e : back.timeline) {
    offload_events += e.event.what == timeline_event::kind::offload ? 1 : 0;
    fetch_events += e.event.what == timeline_event::kind::fetch ? 1 : 0;
  }
  EXPECT_GT(offload_events, 0u);
  EXPECT_EQ(offload_events, fetch_events);
  EXPECT_NE(render_chrome_trace(back).find("\"copy stream\""), std::string::npos);
  const std::string text = render_text(back);
  EXPECT_NE(text.find("offload copies"), std::string::npos) << text;
  EXPECT_NE(render_memory_plot(back).find("offloaded"), std::string::npos) << "the plot marks offloaded bytes";
}

// ---- offloaded packs (Note [Offload packs]) ------------------------------------------------

constexpr std::int64_t kSmallFloats = 2048;  // 8 KiB activations: eight to a 64 KiB page

// The planner's own plan, with packs as SUBLINEAR_PACKS gives them: over the test's link,
// whose copies are free, small buffers offloaded alone would each hold a page, so the
// plan offloads them in packs. `late` moves every restore point that many launches later
// (a pack's members stay together), so that the backward's rewrites come first; with
// `fetch_late` the fetch moves as far, so that the backward reads a member first.
engine_options pack_options(std::size_t late = 0, std::string_view budget = "0.6x", bool fetch_late = false) {
  engine_options o =
      test::amended_plan_options(budget, [late, fetch_late](const policy::iteration& g, policy::plan& p) {
        for (policy::offload& off : p.offloads) {
          const auto n = g.launches.size();
          off.restore_before = static_cast<policy::launch_id>(std::min<std::size_t>(off.restore_before + late, n));
          if (fetch_late) off.fetch_after = std::max(off.fetch_after, off.restore_before - 1);
        }
      });
  o.config.policy = "reforward";
  o.config.offload_packs = true;
  return o;
}

void small_steps(chain& c, host_runtime*, int) { c.iteration(64); }

// Whether the planned iterations moved some buffers in packs: fewer copies than buffers.
void expect_packed_copies(const run& r) {
  std::size_t planned = 0;
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace || it.diverged || it.failed_copies > 0 || it.safety_fetches > 0) continue;
    EXPECT_EQ(it.fetches, it.offloads) << it.index;
    EXPECT_GT(it.link_copies, 0u) << it.index;
    EXPECT_LT(it.link_copies, it.offloads + it.fetches) << it.index << ": a pack's members move in one copy";
    ++planned;
  }
  EXPECT_GT(planned, 0u);
}

TEST(OffloadPacks, APacksMembersMoveInOneCopyEachWayAndTrainBitIdentically) {
  const run r = train_both(pack_options(), 6, small_steps, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_GT(r.link.offloads, 0u);
  expect_packed_copies(r);
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    EXPECT_LE(it.peak_mapped, it.budget) << it.index;
    EXPECT_EQ(it.safety_fetches, 0u) << it.index;
  }
}

TEST(OffloadPacks, ThePlansVmmCallsCountEachPackOnceAsASteadyIterationMapsItBack) {
  const run r = train_both(pack_options(), 6, small_steps, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  expect_packed_copies(r);
  const std::size_t predicted = r.report.plan.predicted_vmm_calls;
  ASSERT_GT(predicted, 0u);
  std::size_t steady = 0;
  for (const auto& it : r.reports) {
    if (it.state != engine_state::steady || it.diverged) continue;
    SCOPED_TRACE(it.index);
    // Two map, set access and unmap cycles per map-back (Note [Predicted iteration time]);
    // one that finds room under the budget takes one, and each block the pressure valve
    // evicts may be mapped back once more. How many find room depends on when deferred
    // unmaps complete (thread timing; on a loaded machine up to three here), so a tenth
    // of the prediction is allowed too. Counting a pack's members as map-backs of their
    // own predicts a third more calls than these iterations make.
    const std::size_t slack = 2 * 3 * (1 + it.pressure_evictions) + predicted / 10;
    EXPECT_LE(predicted, it.vmm_calls + slack);
    EXPECT_LE(it.vmm_calls, predicted + slack);
    ++steady;
  }
  EXPECT_GT(steady, 0u);
}

TEST(OffloadPacks, APacksCopyTheDeviceRefusesFallsBackToItsMembersAndStaysExact) {
  const run r = train_both(pack_options(), 6, [](chain& c, host_runtime* rt, int it) {
    if (rt && it == 3) rt->replay_device().fail_next_copies(1, 1);  // the first copy each way
    c.iteration(64);
  }, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.reports.size(), 6u);
  EXPECT_GE(r.reports[3].failed_copies, 1u);
  EXPECT_LE(r.reports[3].peak_mapped, r.reports[3].budget);
  expect_packed_copies(r);
}

TEST(OffloadPacks, ALaunchReadingAMemberBeforeItsPackIsBackGetsItsBytesFirst) {
  // Every pack is fetched and needed two launches after its first member's consumer: the
  // safety net fetches that member on its own first, and the pack's other members after
  // it in one copy. The same plan on time moves each pack in one copy each way: its
  // copies out are the same, so what the late plan moves back takes fewer copies than
  // buffers.
  const run on_time = train_both(pack_options(0), 6, small_steps, false, kSmallFloats);
  const run r = train_both(pack_options(2, "0.6x", true), 6, small_steps, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(on_time.reports.size(), r.reports.size());
  std::size_t safety = 0, checked = 0;
  for (std::size_t i = 0; i < r.reports.size(); ++i) {
    const auto& it = r.reports[i];
    const auto& clean = on_time.reports[i];
    if (it.state == engine_state::trace) continue;
    EXPECT_FALSE(it.diverged) << it.index;
    safety += it.safety_fetches;
    if (clean.state == engine_state::trace || clean.safety_fetches > 0 || clean.offloads != it.offloads) continue;
    ASSERT_EQ(clean.link_copies % 2, 0u) << it.index;
    const std::size_t copies_in = it.link_copies - clean.link_copies / 2;
    EXPECT_GE(copies_in, it.safety_fetches) << it.index;
    EXPECT_LT(copies_in, it.fetches) << it.index << ": the members not fetched early come back together";
    ++checked;
  }
  EXPECT_GT(safety, 0u);
  EXPECT_GT(checked, 0u);
}

// Under an absolute budget below what the blocks under a page allow, a diverged iteration
// (an allocation the trace never saw, early in the backward) runs out of blocks to
// offload; it then keeps the traced iteration's own peak as its budget, never more, and
// the plan's buffers on the host come back only as launches touch them.
TEST(OffloadPacks, ADivergedIterationOfSmallBuffersMapsNoMoreThanTheTracedPeak) {
  engine_options o = pack_options(0, "500KiB");
  o.amend_plan = nullptr;
  const run r = train_both(o, 6, [](chain& c, host_runtime*, int it) {
    c.iteration(64, [&](int l) {
      if (it != 4 || l != 62) return;
      auto* extra = static_cast<float*>(c.alloc.allocate(kSmallFloats * sizeof(float), nullptr));
      fill_params fp{extra, kSmallFloats, 2.0f};
      c.dev.launch(fill_kernel(), {}, nullptr, &fp);
      c.alloc.deallocate(extra);
    });
  }, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.reports.size(), 6u);
  const std::size_t traced = r.reports[0].peak_mapped;
  EXPECT_GT(traced, std::size_t{500} << 10) << "the traced iteration does not fit the budget";
  EXPECT_LE(r.reports[3].peak_mapped, r.reports[3].budget);
  const iteration_report& d = r.reports[4];
  EXPECT_TRUE(d.diverged);
  EXPECT_GT(d.offloads, 0u);
  EXPECT_LE(d.peak_mapped, traced) << "a diverged iteration maps no more than the traced one";
  EXPECT_LE(d.budget, traced);
}

TEST(OffloadPacks, ADivergenceWithAPackInFlightBringsItBackAndTrainsExactly) {
  const run r = train_both(pack_options(), 8, [](chain& c, host_runtime*, int it) {
    c.iteration(64, [&](int l) {
      if (it != 4 || l != 32) return;
      fill_params fp{c.scratch, 64, 2.0f};
      c.dev.launch(fill_kernel(), {}, nullptr, &fp);
    });
  }, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(r.reports.size(), 8u);
  EXPECT_TRUE(r.reports[4].diverged);
  EXPECT_GT(r.reports[4].link_copies, 0u) << "the divergence came after packs went out";
  EXPECT_GT(r.reports[7].link_copies, 0u) << "the new plan offloads again";
}

// Passes every allocation callback on to `next`, but gives the first member at a nonzero
// offset of an offloaded pack (keys in `offloaded`) no slot while `armed`: that member
// gets pages of its own, as the allocator gives a member whose slot it refuses (Note
// [Pack segments]).
class place_one_apart final : public allocator::allocation_observer {
 public:
  allocator::allocation_observer* next = nullptr;
  std::set<std::uint64_t> offloaded;  // pack indices + 1, as the engine's slot keys end
  bool armed = false;
  int placed_apart = 0;

  bool place_evictable(std::size_t size, allocator::stream_handle s) override { return next->place_evictable(size, s); }
  std::optional<allocator::pack_slot> pack_slot_for(std::size_t size, allocator::stream_handle s) override {
    std::optional<allocator::pack_slot> slot = next->pack_slot_for(size, s);
    if (armed && slot && slot->offset > 0 && offloaded.count(slot->key & 0xffffffffu) != 0) {
      armed = false;
      ++placed_apart;
      return std::nullopt;
    }
    return slot;
  }
  void on_allocate(void* p, std::size_t size, allocator::stream_handle s, bool evictable) override {
    next->on_allocate(p, size, s, evictable);
  }
  void on_free(void* p, std::size_t size, allocator::stream_handle s) override { next->on_free(p, size, s); }
  bool defer_free(void* p, std::size_t size, allocator::stream_handle s) override { return next->defer_free(p, size, s); }
};

TEST(OffloadPacks, AMemberPlacedApartCopiesOnItsOwnAndTheRestOfItsPackInRuns) {
  // In iteration 3 one member of an offloaded pack sits on pages of its own: it moves in a
  // copy of its own each way, and the members before and after it in the pack in one copy
  // per run, so the iteration makes at most two more copies each way than a clean one.
  place_one_apart apart;
  engine_options o = pack_options();
  o.amend_plan = [amend = o.amend_plan, &apart](const policy::iteration& g, policy::plan& p) {
    amend(g, p);
    apart.offloaded.clear();
    for (std::size_t j = 0; j < p.packs.size(); ++j)
      if (p.packs[j].offloaded && p.packs[j].members.size() >= 3) apart.offloaded.insert(j + 1);
  };
  const run r = train_both(o, 6, [&apart](chain& c, host_runtime* rt, int it) {
    if (rt && it == 0) apart.next = c.alloc.set_observer(&apart);
    apart.armed = rt != nullptr && it == 3;
    c.iteration(64);
  }, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  ASSERT_EQ(apart.placed_apart, 1) << "no offloaded pack of three or more members";
  ASSERT_EQ(r.reports.size(), 6u);
  const iteration_report& moved = r.reports[3];
  const iteration_report& clean = r.reports[4];
  ASSERT_EQ(clean.state, engine_state::steady);
  for (const iteration_report* it : {&moved, &clean}) {
    SCOPED_TRACE(it->index);
    EXPECT_FALSE(it->diverged);
    EXPECT_EQ(it->failed_copies, 0u);
    EXPECT_EQ(it->safety_fetches, 0u);
    EXPECT_EQ(it->fetches, it->offloads);
    EXPECT_LE(it->peak_mapped, it->budget);
  }
  EXPECT_EQ(moved.offloads, clean.offloads);
  EXPECT_EQ(moved.offloaded_bytes, clean.offloaded_bytes) << "the runs move the members' bytes and no more";
  EXPECT_GT(moved.link_copies, clean.link_copies);
  EXPECT_LE(moved.link_copies, clean.link_copies + 4) << "the pack's other members move in runs, not one by one";
}

TEST(OffloadPacks, ARiderListedBeforeItsCarrierStillMovesInItsCarriersCopy) {
  // The planner's plan with its offloads listed in reverse, so each pack's riders come
  // before its carrier (its first member, whose copies move the pack): the copies queued
  // at a launch still put the carrier first, and every iteration moves its packs in as
  // many copies as the plan in its own order does.
  engine_options reversed = pack_options();
  reversed.amend_plan = [amend = reversed.amend_plan](const policy::iteration& g, policy::plan& p) {
    amend(g, p);
    std::reverse(p.offloads.begin(), p.offloads.end());
  };
  const run ordered = train_both(pack_options(), 6, small_steps, false, kSmallFloats);
  const run r = train_both(reversed, 6, small_steps, false, kSmallFloats);
  ASSERT_EQ(r.plan_error, "");
  ASSERT_EQ(ordered.plan_error, "");
  EXPECT_EQ(r.with, r.without);
  expect_packed_copies(r);
  ASSERT_EQ(r.reports.size(), ordered.reports.size());
  std::size_t compared = 0;
  for (std::size_t k = 0; k < r.reports.size(); ++k) {
    const iteration_report& it = r.reports[k];
    if (it.state == engine_state::trace) continue;
    SCOPED_TRACE(it.index);
    EXPECT_FALSE(it.diverged);
    EXPECT_EQ(it.failed_copies, 0u);
    EXPECT_EQ(it.safety_fetches, 0u);
    EXPECT_LE(it.peak_mapped, it.budget);
    EXPECT_EQ(it.offloads, ordered.reports[k].offloads);
    EXPECT_EQ(it.link_copies, ordered.reports[k].link_copies) << "a rider copied on its own";
    compared += it.offloads > 0 ? 1 : 0;
  }
  EXPECT_GT(compared, 0u);
}

}  // namespace
}  // namespace sublinear::runtime

