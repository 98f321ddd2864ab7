// Offload end to end on the host device: every workload trains bit-identically to
// training without sublinear, within the budget in every planned iteration, with plans
// that offload (docs/runtime.md, "Offload execution"): the planners' own with
// SUBLINEAR_OFFLOAD=only and auto over a fast link, auto just above the least budget it
// meets over a slow link, and the recompute plan with every eviction turned into an
// offload (engine_options::amend_plan).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.hpp"
#include "runtime/host/host_runtime.hpp"
#include "workloads/host_session.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"

namespace sublinear::runtime {
namespace {

using workloads::models::model_kind;

constexpr int kIterations = 5;

workloads::models::model_config config_for(model_kind kind) {
  workloads::models::model_config c;
  c.kind = kind;
  if (kind == model_kind::mlp) {
    c.depth = 12;
    c.batch = 1024;
  }
  if (kind == model_kind::resnet) c.depth = 56;
  if (kind == model_kind::densenet) {
    c.depth = 31;
    c.batch = 32;
  }
  if (kind == model_kind::lstm) c.seq_len = 192;
  if (kind == model_kind::transformer) c.batch = 16;
  return workloads::models::with_defaults(c);
}

// automatic at 0.6x over a fast link; deep: automatic just above the least budget it
// meets (cells()), over a link ten times slower with 1 ms a copy, where plans mix
// recompute with offloads that stall.
enum class how { only, automatic, converted, deep, packed };

struct outcome {
  std::vector<std::vector<float>> params;
  std::vector<iteration_report> reports;
  std::size_t budget = 0;
  std::string plan_error;
  std::size_t planned_offloads = 0;
};

// Every eviction becomes an offload with its points (one per buffer).
void offload_everything(const policy::iteration&, policy::plan& p) {
  std::set<policy::buffer_id> seen;
  for (const policy::eviction& e : p.evictions) {
    if (!seen.insert(e.target).second) continue;
    p.offloads.push_back({e.target, e.evict_after, e.evict_after + 1, e.restore_before - 1, e.restore_before});
  }
  p.evictions.clear();
  p.retentions.clear();
  p.packs.clear();
}

outcome train(model_kind kind, const std::string& budget, how h) {
  workloads::host_session_options so;
  so.scaled_size_classes = true;
  workloads::host_session session(so);
  if (!budget.empty()) use_engine_allocator_settings(session.allocator());
  auto ctx = session.make_context();
  auto model = workloads::models::make_model(config_for(kind));
  model->init(ctx, 7);
  std::unique_ptr<host_runtime> rt;
  if (!budget.empty()) {
    engine_options o;
    o.config.budget = policy::parse_budget(budget);
    o.config.policy = "reforward";
    o.config.multi_pass = false;
    o.config.offload = h == how::only ? policy::offload_mode::only : policy::offload_mode::on;
    o.config.log = log_level::error;
    o.device_capacity = session.vmm().physical_capacity();
    if (h == how::converted) o.amend_plan = offload_everything;
    o.config.offload_packs = h == how::packed;
    host_runtime_options ro;
    ro.time_launches = false;  // costs from touched bytes: the same plan every run
    rt = std::make_unique<host_runtime>(session.device(), session.allocator(), o, ro);
    // A link fast against these costs, so that the planners choose offloads.
    if (h == how::deep) {
      rt->replay_device().set_link({2e8, 1e-3}, {2e8, 1e-3}, "test");
    } else if (h == how::packed) {
      // A copy costs far more than its bytes: one per small buffer never pays, one per
      // offloaded pack may (Note [Offload packs]).
      rt->replay_device().set_link({2e8, 1e-3}, {2e8, 1e-3}, "test");
    } else {
      rt->replay_device().set_link({2e9, 0.0}, {2e9, 0.0}, "test");
    }
  }
  workloads::training_options to;
  to.iterations = kIterations;
  to.seed = 7;
  to.on_iteration_end = [&](const workloads::iteration_figures&) {
    if (rt) rt->mark_iteration();
  };
  workloads::train(ctx, *model, to);
  outcome out;
  out.params = workloads::download_parameters(ctx, *model);
  if (rt) {
    out.reports = rt->get().iterations();
    out.budget = rt->get().budget();
    out.plan_error = rt->get().plan_error();
    out.planned_offloads = rt->get().planned_link().offloads;
  }
  model->release();
  return out;
}

struct cell {
  model_kind kind;
  how h;
  const char* budget;
};

const char* how_name(how h) {
  switch (h) {
    case how::only:
      return "only";
    case how::automatic:
      return "auto";
    case how::converted:
      return "converted";
    case how::deep:
      return "deep";
    case how::packed:
      return "packed";
  }
  return "?";
}

void PrintTo(const cell& c, std::ostream* os) { *os << workloads::models::to_string(c.kind) << " " << how_name(c.h); }

std::string cell_name(const ::testing::TestParamInfo<cell>& info) {
  return std::string(workloads::models::to_string(info.param.kind)) + "_" + how_name(info.param.h);
}

class OffloadEndToEnd : public ::testing::TestWithParam<cell> {};

TEST_P(OffloadEndToEnd, ParametersAreBitIdenticalAndPeakStaysWithinTheBudget) {
  const cell c = GetParam();
  static std::map<model_kind, std::vector<std::vector<float>>> baselines;
  if (!baselines.count(c.kind)) baselines[c.kind] = train(c.kind, "", how::only).params;
  const outcome run = train(c.kind, c.budget, c.h);
  if (!run.plan_error.empty()) GTEST_SKIP() << "infeasible cell: " << run.plan_error;
  ASSERT_EQ(run.params.size(), baselines[c.kind].size());
  for (std::size_t i = 0; i < run.params.size(); ++i)
    ASSERT_TRUE(run.params[i] == baselines[c.kind][i]) << "parameter tensor " << i << " differs";
  std::size_t fetches = 0;
  for (const auto& r : run.reports) {
    if (r.state == engine_state::trace) continue;
    EXPECT_FALSE(r.diverged) << "iteration " << r.index << ": " << r.divergence;
    EXPECT_LE(r.peak_mapped, run.budget) << "iteration " << r.index;
    EXPECT_EQ(r.validation_mismatches, 0u) << "iteration " << r.index;
    EXPECT_EQ(r.fetched_bytes, r.offloaded_bytes) << "iteration " << r.index << ": every copy out came back";
    fetches += r.fetches;
  }
  if (c.h == how::only || c.h == how::converted) {
    EXPECT_GT(run.planned_offloads, 0u) << "the plan offloads";
    EXPECT_GT(fetches, 0u);
  }
}

std::vector<cell> cells() {
  std::vector<cell> out;
  // Each model's deep budget: just above the least one `auto` meets over the slow link.
  const std::pair<model_kind, const char*> deep[] = {{model_kind::mlp, "0.55x"},
                                                     {model_kind::resnet, "0.36x"},
                                                     {model_kind::densenet, "0.32x"},
                                                     {model_kind::lstm, "0.33x"},
                                                     {model_kind::transformer, "0.5x"}};
  for (const auto& [k, deep_budget] : deep) {
    for (how h : {how::only, how::automatic, how::converted}) out.push_back({k, h, "0.6x"});
    out.push_back({k, how::deep, deep_budget});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, OffloadEndToEnd, ::testing::ValuesIn(cells()), cell_name);

// An LSTM's gates are a few KiB: over a link whose copies cost more than their bytes the
// plan offloads them in packs, one copy each way for all of a pack's members, and
// training stays bit-identical within the budget.
TEST(OffloadEndToEndPacks, AnLstmsSmallBuffersTravelInPacksAndTrainBitIdentically) {
  const std::vector<std::vector<float>> baseline = train(model_kind::lstm, "", how::only).params;
  const outcome run = train(model_kind::lstm, "0.5x", how::packed);
  ASSERT_TRUE(run.plan_error.empty()) << run.plan_error;
  ASSERT_EQ(run.params.size(), baseline.size());
  for (std::size_t i = 0; i < run.params.size(); ++i)
    ASSERT_TRUE(run.params[i] == baseline[i]) << "parameter tensor " << i << " differs";
  ASSERT_GT(run.planned_offloads, 0u) << "the plan offloads";
  std::size_t steady = 0;
  for (const auto& r : run.reports) {
    if (r.state == engine_state::trace) continue;
    EXPECT_FALSE(r.diverged) << "iteration " << r.index << ": " << r.divergence;
    EXPECT_LE(r.peak_mapped, run.budget) << "iteration " << r.index;
    EXPECT_EQ(r.fetched_bytes, r.offloaded_bytes) << "iteration " << r.index;
    EXPECT_EQ(r.fetches, r.offloads) << "iteration " << r.index << ": every buffer out came back";
    // Packs: fewer copies than buffers moved each way.
    EXPECT_LT(r.link_copies, r.offloads + r.fetches) << "iteration " << r.index;
    EXPECT_GT(r.link_copies, 0u) << "iteration " << r.index;
    ++steady;
  }
  EXPECT_GT(steady, 0u);
}

}  // namespace
}  // namespace sublinear::runtime
