// Note [Retention]: keeping small freed buffers alive so recipes read them in place.
#include "policy/retention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "policy/planner.hpp"
#include "policy/recipe.hpp"
#include "policy/simulator.hpp"
#include "policy/testing/synthetic.hpp"

namespace sublinear::policy {
namespace {

constexpr std::size_t kPage = std::size_t{64} << 10;

// A dense block: layer k concatenates every earlier feature (a cheap copy whose backward
// needs no input) into cat_k, and an expensive layer turns cat_k into feature k, saving
// cat_k for its backward. The features die when the forward is done with them; the
// concatenations, k features each, are what the backward holds.
iteration dense_block(std::size_t layers) {
  synthetic::network net;
  net.granularity = kPage;
  net.input_bytes = kPage;
  synthetic::layer stem;  // the block's input: replayable, unlike the upload of the batch
  stem.inputs = {0};
  stem.output_bytes = kPage;
  net.layers.push_back(stem);
  std::vector<std::uint32_t> features{1};
  for (std::size_t k = 1; k <= layers; ++k) {
    synthetic::layer cat;
    cat.inputs = features;
    cat.output_bytes = k * kPage;
    cat.cost_s = 1e-5 * static_cast<double>(k);
    cat.saves_inputs = false;
    cat.kernel = "concat";
    net.layers.push_back(cat);
    synthetic::layer conv;
    conv.inputs = {static_cast<std::uint32_t>(net.layers.size())};
    conv.output_bytes = kPage;
    conv.cost_s = 1e-3;
    conv.kernel = "conv";
    net.layers.push_back(conv);
    features.push_back(static_cast<std::uint32_t>(net.layers.size()));
  }
  // The block's exit (the last concatenation) and two layers after it: the features are
  // dead before the live bytes peak, as they are when a network has more blocks.
  synthetic::layer exit;
  exit.inputs = features;
  exit.output_bytes = layers * kPage;
  exit.saves_inputs = false;
  net.layers.push_back(exit);
  for (int i = 0; i < 2; ++i) {
    synthetic::layer after;
    after.inputs = {static_cast<std::uint32_t>(net.layers.size())};
    after.output_bytes = layers * kPage;
    net.layers.push_back(after);
  }
  return synthetic::build(net);
}

TEST(Retention, OptionsAreTheSmallFreedInputsOfWhatWritesACandidate) {
  const iteration it = dense_block(12);
  const dataflow df(it);
  const candidate_set cs(df);
  const std::vector<retention> options = retention_options(cs);
  ASSERT_FALSE(options.empty());
  for (const retention& r : options) {
    const buffer& b = it.buffers[r.buffer];
    EXPECT_LE(b.free_at, cs.turning_point()) << "buffer " << r.buffer << " lives past the turning point anyway";
    EXPECT_GT(r.release_before, b.free_at);
    EXPECT_EQ(b.size, kPage) << "only features (a page each) are small next to what they feed";
  }
  const iteration kept = with_retentions(it, options);
  for (const retention& r : options) EXPECT_EQ(kept.buffers[r.buffer].free_at, r.release_before);
}

TEST(Retention, ADenseBlockFitsFarSmallerBudgetsWhenItsFeaturesAreKept) {
  const iteration it = dense_block(12);
  const std::size_t peak = simulate(it, plan{}).peak;
  const auto pl = make_planner("reforward");
  planner::options without;
  without.retention = false;
  std::size_t smallest_without = 0;
  try {
    (void)pl->make_plan(it, 1, without);
  } catch (const infeasible_budget& e) {
    smallest_without = e.smallest_feasible();
  }
  std::size_t smallest_with = 0;
  try {
    (void)pl->make_plan(it, 1);
  } catch (const infeasible_budget& e) {
    smallest_with = e.smallest_feasible();
  }
  ASSERT_GT(smallest_without, 0u);
  EXPECT_LT(smallest_with, smallest_without * 3 / 4) << "peak " << peak;

  // At a budget only retention meets: the plan keeps features, every one a recipe reads,
  // and it is valid on the iteration as traced once its retentions are applied.
  const std::size_t budget = (smallest_with + smallest_without) / 2;
  EXPECT_THROW((void)pl->make_plan(it, budget, without), infeasible_budget);
  const plan p = pl->make_plan(it, budget);
  ASSERT_FALSE(p.retentions.empty());
  const simulation s = simulate(it, p);
  ASSERT_TRUE(s.valid) << s.error;
  EXPECT_LE(s.peak, budget);
  for (const retention& r : p.retentions) {
    launch_id last_reader = 0;
    for (const eviction& e : p.evictions)
      for (launch_id l : e.recipe)
        if (std::binary_search(it.launches[l].touched.begin(), it.launches[l].touched.end(), r.buffer))
          last_reader = std::max(last_reader, e.restore_before);
    EXPECT_EQ(r.release_before, last_reader + 1) << "retention of buffer " << r.buffer << " is not trimmed";
  }
  // The runtime's simulator is built on the iteration: without the retentions applied it
  // must refuse the plan rather than measure the traced lifetimes.
  EXPECT_FALSE(simulator(it).run(p).valid);
  EXPECT_TRUE(simulator(with_retentions(it, p.retentions)).run(p).valid);
}

TEST(Retention, TrimmingNeverKeepsABufferLongerThanThePlanWasMadeWith) {
  // A recipe that runs after a retention's release found the buffer freed and rebuilds
  // it in scratch; trimming must not stretch the retention to cover it, or the buffer
  // holds bytes the plan never counted.
  const iteration it = dense_block(4);
  const dataflow df(it);
  buffer_id feature = none;  // a freed buffer with a writer: the block's first feature
  for (buffer_id b = 0; b < it.buffers.size() && feature == none; ++b)
    if (!it.buffers[b].persistent() && it.buffers[b].alloc_at > 0 && it.buffers[b].free_at != none &&
        it.buffers[b].free_at + 8 < it.launches.size() && !df.writers_in(b, 0, it.launches.size()).empty())
      feature = b;
  ASSERT_NE(feature, none);
  const launch_id writer = df.writers_in(feature, 0, it.launches.size()).front();
  const launch_id release = it.buffers[feature].free_at + 4;
  plan p;
  p.retentions = {{feature, release}};
  eviction early;  // reads the retained copy: its restore point is before the release
  early.target = feature;
  early.recipe = {writer};
  early.restore_before = release - 2;
  eviction late = early;  // rebuilds it: the buffer was already released
  late.restore_before = release + 2;
  p.evictions = {early, late};
  trim_retentions(p, it);
  ASSERT_EQ(p.retentions.size(), 1u);
  EXPECT_EQ(p.retentions[0].release_before, release - 1);
  p.evictions = {late};
  p.retentions = {{feature, release}};
  trim_retentions(p, it);
  EXPECT_TRUE(p.retentions.empty());
}

TEST(Retention, APlanThatNeedsNoneHasNone) {
  // A chain frees nothing a candidate's writer reads: no option, no retention.
  const iteration it = synthetic::build(synthetic::chain(16, kPage, kPage));
  const std::size_t peak = simulate(it, plan{}).peak;
  const plan p = make_planner("chain")->make_plan(it, peak / 2);
  EXPECT_TRUE(p.retentions.empty());
}

TEST(Retention, MalformedRetentionsAreRefusedByName) {
  const iteration it = dense_block(4);
  buffer_id freed = none;
  for (buffer_id b = 0; b < it.buffers.size() && freed == none; ++b)
    if (!it.buffers[b].persistent() && it.buffers[b].free_at + 1 < it.launches.size()) freed = b;
  ASSERT_NE(freed, none);
  const launch_id n = static_cast<launch_id>(it.launches.size());
  EXPECT_NE(check_retentions(it, std::vector<retention>{{freed, it.buffers[freed].free_at}}).find("after its free"),
            std::string::npos);
  EXPECT_NE(check_retentions(it, std::vector<retention>{{freed, n + 1}}).find("at most"), std::string::npos);
  EXPECT_NE(check_retentions(it, std::vector<retention>{{freed, n}, {freed, n}}).find("twice"), std::string::npos);
  EXPECT_NE(check_retentions(it, std::vector<retention>{{static_cast<buffer_id>(it.buffers.size()), n}}).find("no such"),
            std::string::npos);
  EXPECT_THROW((void)with_retentions(it, std::vector<retention>{{freed, 0}}), std::invalid_argument);
  plan p;
  p.retentions = {{freed, 0}};
  EXPECT_FALSE(simulate(it, p).valid);
}

}  // namespace
}  // namespace sublinear::policy
