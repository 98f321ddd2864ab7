// The offload search's jobs on worker threads (Note [Parallel offload starts] in
// policy/solver_offload_starts.cpp): the plan is the same for every thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "policy/planner.hpp"
#include "policy/simulator.hpp"
#include "policy/solvers.hpp"
#include "policy/testing/synthetic.hpp"
#include "policy_support.hpp"

namespace sublinear::policy {
namespace {

planner::options on_threads(const link_model& link, std::size_t threads, std::size_t host_budget = 0) {
  planner::options o;
  o.offload = offload_mode::on;
  o.link = link;
  o.host_budget = host_budget;
  o.threads = threads;
  return o;
}

offload_settings settings_on(const link_model& link, std::size_t threads) {
  offload_settings o;
  o.mode = offload_mode::on;
  o.link = link;
  o.threads = threads;
  return o;
}

// A ResNet-like graph of `blocks` blocks of 1 MiB activations, a link that copies one in
// a millisecond, and a budget `part`/`parts` of the way from the least the candidates
// allow to the unplanned peak (test::budget_at).
struct resnet_case {
  iteration it;
  link_model link;
  std::size_t peak = 0;
  std::size_t budget = 0;
};
resnet_case resnet_at(std::size_t blocks, std::size_t part, std::size_t parts) {
  const std::size_t q = std::size_t{1} << 20;
  resnet_case r{synthetic::build(synthetic::resnet(blocks, q, q)), test::link_at(static_cast<double>(q) / 1e-3)};
  r.peak = simulate(r.it, plan{}).peak;
  r.budget = test::budget_at(r.it, part, parts);
  return r;
}

// Every field of the plan the runtime acts on, and the figures it reports.
void expect_same_plan(const plan& x, const plan& y) {
  ASSERT_EQ(x.evictions.size(), y.evictions.size());
  for (std::size_t i = 0; i < x.evictions.size(); ++i) {
    const eviction& a = x.evictions[i];
    const eviction& b = y.evictions[i];
    EXPECT_EQ(a.target, b.target);
    EXPECT_EQ(a.evict_after, b.evict_after);
    EXPECT_EQ(a.restore_before, b.restore_before);
    EXPECT_EQ(a.recipe, b.recipe);
    EXPECT_EQ(a.temporaries, b.temporaries);
    EXPECT_EQ(a.also_regenerates, b.also_regenerates);
  }
  ASSERT_EQ(x.offloads.size(), y.offloads.size());
  for (std::size_t i = 0; i < x.offloads.size(); ++i) {
    EXPECT_EQ(x.offloads[i].target, y.offloads[i].target);
    EXPECT_EQ(x.offloads[i].evict_after, y.offloads[i].evict_after);
    EXPECT_EQ(x.offloads[i].release_before, y.offloads[i].release_before);
    EXPECT_EQ(x.offloads[i].fetch_after, y.offloads[i].fetch_after);
    EXPECT_EQ(x.offloads[i].restore_before, y.offloads[i].restore_before);
  }
  EXPECT_EQ(x.packs.size(), y.packs.size());
  EXPECT_EQ(x.retentions.size(), y.retentions.size());
  EXPECT_EQ(x.predicted_peak, y.predicted_peak);
  EXPECT_EQ(x.added_compute_s, y.added_compute_s);
  EXPECT_EQ(x.predicted_stall_s, y.predicted_stall_s);
}

// Random DAGs, random links and host budgets, every budget from the least to the peak:
// one thread, two and eight give the same plan (or the same refusal).
TEST(OffloadThreads, ThePlanIsTheSameOnOneThreadAndOnMany) {
  std::size_t compared = 0, offloading = 0;
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    const std::size_t quantum = 64 * 1024;
    const iteration it = test::page_dag(seed, 8 + seed % 5);
    link_model link = test::link_at(static_cast<double>(quantum) / (1e-4 * static_cast<double>(1 + seed * 20)));
    link.to_host.latency_s = link.to_device.latency_s = 1e-6;
    const std::size_t host_budget = seed % 3 == 0 ? quantum * (2 + seed % 4) : 0;
    for (std::size_t budget : test::budgets_for(it, 5)) {
      for (const char* name : {"greedy", "reforward"}) {
        SCOPED_TRACE(std::string(name) + " seed " + std::to_string(seed) + " budget " + std::to_string(budget));
        const auto planner = make_planner(name);
        std::optional<plan> one;
        std::string refused_one;
        try {
          one = planner->make_plan(it, budget, on_threads(link, 1, host_budget));
        } catch (const infeasible_budget& e) {
          refused_one = e.what();
        }
        for (std::size_t threads : {2u, 8u}) {
          try {
            const plan many = planner->make_plan(it, budget, on_threads(link, threads, host_budget));
            ASSERT_TRUE(one.has_value()) << "refused on one thread only: " << refused_one;
            expect_same_plan(*one, many);
            ++compared;
            offloading += many.offloads.empty() ? 0 : 1;
          } catch (const infeasible_budget& e) {
            EXPECT_EQ(refused_one, e.what());
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 40u);
  EXPECT_GT(offloading, 10u);  // the searches' starts chose offloads, not only the recompute plan
}

// A graph with hundreds of candidates, where the starts run hundreds of simulations each:
// the same plan on one thread and on four.
TEST(OffloadThreads, LargeGraphPlansTheSameOnFourThreads) {
  const auto [it, link, peak, budget] = resnet_at(60, 1, 10);
  for (const char* name : {"greedy", "reforward"}) {
    SCOPED_TRACE(name);
    const auto planner = make_planner(name);
    const plan one = planner->make_plan(it, budget, on_threads(link, 1));
    const plan four = planner->make_plan(it, budget, on_threads(link, 4));
    EXPECT_FALSE(one.offloads.empty());
    expect_same_plan(one, four);
  }
}

// The recompute searches (the budget's own and the larger budgets' seeds) are jobs too:
// with one thread every one runs on the calling thread with the caller's context; with
// four, the same budgets are searched, on whichever thread, and the plan is the same.
TEST(OffloadThreads, TheRecomputeSearchesAreJobsOnAnyThread) {
  const auto [it, link, peak, budget] = resnet_at(24, 1, 4);
  struct call {
    std::size_t budget;
    bool caller;  // on the calling thread, with the caller's context
  };
  std::vector<call> one_calls, four_calls;
  std::optional<planner::context::evaluation> one, four;
  const std::thread::id me = std::this_thread::get_id();
  for (std::size_t threads : {1u, 4u}) {
    planner::context ctx(it, true, true, settings_on(link, threads));
    std::mutex m;
    std::vector<call>& calls = threads == 1 ? one_calls : four_calls;
    const recompute_search search = [&](planner::context& c, std::size_t b) {
      {
        const std::lock_guard<std::mutex> lock(m);
        calls.push_back({b, &c == &ctx && std::this_thread::get_id() == me});
      }
      return solve_greedy(c, b);
    };
    (threads == 1 ? one : four) = with_offload(ctx, budget, search);
  }
  // The budget itself and 5%, 30% and 100% above it, while under the unplanned peak.
  std::vector<std::size_t> expected{budget};
  for (double step : {0.05, 0.3, 1.0}) {
    const auto b = static_cast<std::size_t>(static_cast<double>(budget) * (1.0 + step));
    if (b < peak) expected.push_back(b);
  }
  ASSERT_GE(expected.size(), 3u);
  const auto budgets = [](std::vector<call> calls) {
    std::vector<std::size_t> out;
    for (const call& c : calls) out.push_back(c.budget);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(budgets(one_calls), expected);
  EXPECT_EQ(budgets(four_calls), expected);
  for (const call& c : one_calls) EXPECT_TRUE(c.caller) << c.budget;
  ASSERT_TRUE(one.has_value());
  ASSERT_TRUE(four.has_value());
  expect_same_plan(one->result, four->result);
}

// A recompute search that fails on a worker fails the planning on the calling thread:
// the exception comes back, and nothing waits for a seed that will not come.
TEST(OffloadThreads, AFailingRecomputeSearchIsRethrownOnTheCaller) {
  const auto [it, link, peak, budget] = resnet_at(12, 1, 4);
  for (std::size_t threads : {1u, 2u, 4u}) {
    SCOPED_TRACE(threads);
    planner::context ctx(it, true, true, settings_on(link, threads));
    const recompute_search search = [&](planner::context& c, std::size_t b) {
      if (b > budget) throw std::runtime_error("seed search failed");
      return solve_greedy(c, b);
    };
    EXPECT_THROW((void)with_offload(ctx, budget, search), std::runtime_error);
  }
}

}  // namespace
}  // namespace sublinear::policy
