// A recipe's temporary that the plan offloads over the recipe (Note [Offloaded recipe
// inputs] in policy/solver_offload.cpp, Note [Recipe scratch] in
// runtime/engine_regenerate.cpp): the runtime brings it back first only where the recipe
// reads it on entry. Each layer of a chain writes its activation and a side output (as
// BatchNorm its saved statistics); the plan drops every other activation, recomputed by
// its layer's launch, which writes that layer's side output again as a temporary, and
// sends that side output to host memory over the recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <memory>
#include <vector>

#include "policy/recipe.hpp"
#include "runtime/host/host_runtime.hpp"
#include "chain_kernels.hpp"

namespace sublinear::runtime {
namespace {

constexpr std::int64_t kFloats = 64 * 1024;  // 256 KiB: whole 64 KiB pages
constexpr int kLayers = 12;

struct side_params {
  float* out;
  float* side;
  const float* in;
  std::int64_t n;
  float factor;
  std::int32_t update;  // 1: the side output is updated in place (read, then written)
};
void side_body(const device::host::launch_config&, const side_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) {
    p.out[i] = p.in[i] * p.factor + 1.0f;
    p.side[i] = p.update != 0 ? p.side[i] * 0.5f + p.in[i] : p.in[i] * 0.25f;
  }
}
const device::host::kernel& side_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<side_params, side_body>(
      "test_side_output", {SUBLINEAR_PARAM(side_params, out), SUBLINEAR_PARAM(side_params, side),
                           SUBLINEAR_PARAM(side_params, in), SUBLINEAR_PARAM(side_params, n),
                           SUBLINEAR_PARAM(side_params, factor), SUBLINEAR_PARAM(side_params, update)});
  return k;
}

struct side_chain : test::accumulator_rig {
  bool update = false;

  void iteration() {
    std::vector<float*> acts, sides;
    auto* first = static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr));
    test::fill_params fp{first, kFloats, 0.5f};
    dev.launch(test::fill_kernel(), {}, nullptr, &fp);
    acts.push_back(first);
    for (int l = 1; l < kLayers; ++l) {
      auto* next = static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr));
      auto* side = static_cast<float*>(alloc.allocate(kFloats * sizeof(float), nullptr));
      if (update) {
        test::fill_params sf{side, kFloats, 0.25f};
        dev.launch(test::fill_kernel(), {}, nullptr, &sf);
      }
      side_params sp{next, side, acts.back(), kFloats, 0.5f + 0.01f * static_cast<float>(l), update ? 1 : 0};
      dev.launch(side_kernel(), {}, nullptr, &sp);
      acts.push_back(next);
      sides.push_back(side);
    }
    // Backward: each layer's activation, then its side output.
    for (int l = kLayers - 1; l >= 0; --l) {
      test::accumulate_params aa{acc, acts[static_cast<std::size_t>(l)], kFloats};
      dev.launch(test::accumulate_kernel(), {}, nullptr, &aa);
      alloc.deallocate(acts[static_cast<std::size_t>(l)]);
      if (l == 0) continue;
      float* side = sides[static_cast<std::size_t>(l - 1)];
      test::accumulate_params as{acc, side, kFloats};
      dev.launch(test::accumulate_kernel(), {}, nullptr, &as);
      alloc.deallocate(side);
    }
    dev.synchronize();
  }
};

// The plan the test runs instead of the planner's: every other layer's activation dropped
// (recomputed by its layer's launch just before the backward reads it), and that layer's
// side output, the recipe's temporary, offloaded over the recipe: out after the layer's
// launch, fetched at the recipe's restore point, back for its own backward read.
struct amended {
  std::size_t offloaded_temporaries = 0;
  std::vector<bool> reads_on_entry;  // per offloaded temporary, policy::reads_on_entry
};

void drop_and_offload(const policy::iteration& g, policy::plan& p, amended& out) {
  p = policy::plan{};
  std::size_t layer = 0;
  for (policy::launch_id l = 0; l < g.launches.size(); ++l) {
    const policy::launch& L = g.launches[l];
    if (L.written.size() != 2 || ++layer % 2 != 0) continue;  // every other layer's launch
    // The activation was allocated before the side output.
    policy::buffer_id a = L.written[0], s = L.written[1];
    if (g.buffers[a].alloc_index > g.buffers[s].alloc_index) std::swap(a, s);
    const auto& au = g.buffers[a].users;
    const auto& su = g.buffers[s].users;
    if (au.size() < 3 || su.back() != au.back() + 1) continue;  // the last layer has no reader
    policy::eviction e;
    e.target = a;
    e.evict_after = au[au.size() - 2];
    e.restore_before = au.back();
    const policy::buffer_id targets[] = {a};
    const policy::recipe_result r = policy::build_recipe(g, targets, e.restore_before);
    if (!r.ok) continue;
    e.recipe = r.launches;
    e.temporaries = r.temporaries;
    if (std::find(e.temporaries.begin(), e.temporaries.end(), s) == e.temporaries.end()) continue;
    policy::offload o;
    o.target = s;
    o.evict_after = l;
    o.release_before = l + 1;
    o.fetch_after = e.restore_before;
    o.restore_before = su.back();
    p.evictions.push_back(std::move(e));
    p.offloads.push_back(o);
    ++out.offloaded_temporaries;
    out.reads_on_entry.push_back(policy::reads_on_entry(g, r.launches, s));
  }
}

struct run {
  std::vector<float> without, with;
  std::vector<iteration_report> reports;
  std::string plan_error;
  amended plan;
};

run train_both(bool update) {
  run out;
  engine_options o = test::amended_plan_options("0.8x", [&out](const policy::iteration& g, policy::plan& p) {
    drop_and_offload(g, p, out.plan);
  });
  for (bool with_engine : {false, true}) {
    side_chain c;
    c.update = update;
    std::unique_ptr<host_runtime> rt;
    if (with_engine) {
      rt = std::make_unique<host_runtime>(c.dev, c.alloc, o, host_runtime_options{});
      rt->replay_device().set_link({4e9, 0.0}, {4e9, 0.0}, "test");
    }
    for (int it = 0; it < 6; ++it) {
      c.iteration();
      if (rt) rt->mark_iteration();
    }
    if (rt) {
      out.reports = rt->get().iterations();
      out.plan_error = rt->get().plan_error();
    }
    (with_engine ? out.with : out.without) = c.result();
  }
  return out;
}

// Safety fetches over the planned iterations, which all replayed and moved copies.
std::size_t planned_safety_fetches(const run& r) {
  std::size_t safety = 0, planned = 0;
  for (const auto& it : r.reports) {
    if (it.state == engine_state::trace) continue;
    EXPECT_FALSE(it.diverged) << it.index;
    EXPECT_GT(it.recomputed_launches, 0u) << it.index;
    EXPECT_GT(it.offloads, 0u) << it.index;
    safety += it.safety_fetches;
    ++planned;
  }
  EXPECT_GT(planned, 0u);
  return safety;
}

// Trains with the side outputs updated in place or written first; returns the safety
// fetches of the planned iterations, the training having stayed exact.
std::size_t safety_fetches_when(bool update) {
  const run r = train_both(update);
  EXPECT_EQ(r.plan_error, "");
  EXPECT_GT(r.plan.offloaded_temporaries, 0u);
  for (bool reads : r.plan.reads_on_entry) EXPECT_EQ(reads, update);
  EXPECT_EQ(r.with, r.without);
  return planned_safety_fetches(r);
}

TEST(OffloadTemporaries, ATemporaryTheRecipeWritesFirstStaysOnTheHostOverTheRecipe) {
  EXPECT_EQ(safety_fetches_when(false), 0u) << "the recipe needs none of the side output's bytes";
}

TEST(OffloadTemporaries, ATemporaryTheRecipeReadsOnEntryComesBackBeforeIt) {
  EXPECT_GT(safety_fetches_when(true), 0u) << "the scratch starts from the side output's bytes";
}

}  // namespace
}  // namespace sublinear::runtime
