// Tests for the training loop (workloads/training.hpp), the host session and
// the C-entry-point memory it runs on, and the figures document `sublinear demo --json`
// writes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "allocator/default_allocator.hpp"
#include "workloads/host_session.hpp"
#include "workloads/memory.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"
#include "sublinear/error.hpp"

namespace sublinear::workloads {
namespace {

using models::model_kind;

const auto kEveryModel = ::testing::Values(model_kind::mlp, model_kind::resnet, model_kind::densenet,
                                           model_kind::lstm, model_kind::transformer);
std::string kind_name(const ::testing::TestParamInfo<model_kind>& info) {
  return std::string(models::to_string(info.param));
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (std::size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size() || std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

// Remembers which stream every launch of a kernel went to.
class stream_recorder final : public device::host::launch_hook {
 public:
  void on_enter(const device::host::launch_record& rec) override {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[rec.fn->name].insert(rec.on);
  }
  void on_exit(const device::host::launch_record& /*rec*/) override {}
  std::set<device::host::stream*> streams_of(const std::string& kernel) {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_[kernel];
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::set<device::host::stream*>> streams_;
};

class training_test : public ::testing::TestWithParam<model_kind> {
 protected:
  static std::vector<std::vector<float>> train_fresh(model_kind kind, int streams, std::uint64_t* hash = nullptr) {
    host_session session;
    context ctx = session.make_context();
    auto m = models::make_small_model(kind);
    training_options o;
    o.iterations = 3;
    o.streams = streams;
    const auto f = train(ctx, *m, o);
    if (hash != nullptr) *hash = f.params_hash;
    return download_parameters(ctx, *m);
  }
};

// The allocator's `allocated` statistic is back to the persistent bytes after every
// iteration: the loop and the model free everything an iteration allocates.
TEST_P(training_test, EveryIterationFreesWhatItAllocates) {
  host_session session;
  context ctx = session.make_context();
  auto m = models::make_small_model(GetParam());
  training_options o;
  o.iterations = 3;
  const auto f = train(ctx, *m, o);
  ASSERT_GT(f.persistent_bytes, 0u);
  ASSERT_EQ(f.iterations.size(), 3u);
  for (const auto& it : f.iterations) {
    EXPECT_EQ(it.end_allocated_bytes, f.persistent_bytes) << "iteration " << it.index;
    EXPECT_GT(it.peak_allocated_bytes, f.persistent_bytes) << "iteration " << it.index;
  }
  EXPECT_EQ(session.allocator().get_stats().allocated, f.persistent_bytes);
  m.reset();
  EXPECT_EQ(session.allocator().get_stats().allocated, 0u);
  EXPECT_TRUE(session.allocator().validate());
}

TEST_P(training_test, TwoStreamRunGivesBitIdenticalParametersToOneStream) {
  std::uint64_t one_hash = 0, two_hash = 0;
  const auto one = train_fresh(GetParam(), 1, &one_hash);
  const auto two = train_fresh(GetParam(), 2, &two_hash);
  EXPECT_TRUE(same_bits(one, two));
  EXPECT_EQ(one_hash, two_hash);
}

INSTANTIATE_TEST_SUITE_P(every_model, training_test, kEveryModel, kind_name);

TEST(training, TwoStreamRunPutsTheOptimizerStepOnASecondStream) {
  host_session session;
  stream_recorder recorder;
  session.device().add_hook(&recorder);
  context ctx = session.make_context();
  auto m = models::make_small_model(model_kind::resnet);
  training_options o;
  o.iterations = 2;
  o.streams = 2;
  train(ctx, *m, o);
  session.device().remove_hook(&recorder);
  const auto optimizer = recorder.streams_of("sgd_momentum_step_f32");
  const auto forward = recorder.streams_of("batchnorm_fwd_train_f32");
  ASSERT_EQ(optimizer.size(), 1u);
  ASSERT_EQ(forward.size(), 1u);
  EXPECT_NE(*optimizer.begin(), *forward.begin());
}

// Backward is wired right if a few steps on one batch bring its loss down clearly.
TEST(training, LossDecreasesOnAFixedBatch) {
  for (auto kind : {model_kind::mlp, model_kind::resnet, model_kind::densenet, model_kind::lstm,
                    model_kind::transformer}) {
    host_session session;
    context ctx = session.make_context();
    auto m = models::make_small_model(kind);
    training_options o;
    o.iterations = 25;
    o.distinct_batches = 1;
    const auto f = train(ctx, *m, o);
    EXPECT_LT(f.iterations.back().loss, 0.8f * f.iterations.front().loss)
        << m->name() << ": loss " << f.iterations.front().loss << " -> " << f.iterations.back().loss;
  }
}

TEST(training, IterationHookSeesEveryIterationOnceInOrderWithItsFigures) {
  host_session session;
  context ctx = session.make_context();
  auto m = models::make_small_model(model_kind::mlp);
  std::vector<iteration_figures> seen;
  training_options o;
  o.iterations = 4;
  o.on_iteration_end = [&](const iteration_figures& f) {
    // Called after the iteration's work has completed: nothing of it is still allocated.
    EXPECT_EQ(session.allocator().get_stats().allocated, f.end_allocated_bytes);
    seen.push_back(f);
  };
  const auto f = train(ctx, *m, o);
  ASSERT_EQ(seen.size(), 4u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].index, static_cast<std::int64_t>(i));
    EXPECT_EQ(seen[i].peak_allocated_bytes, f.iterations[i].peak_allocated_bytes);
  }
}

TEST(training, FeatureMapBytesArePeakAllocatedMinusPersistent) {
  host_session session;
  context ctx = session.make_context();
  auto m = models::make_small_model(model_kind::densenet);
  training_options o;
  o.iterations = 2;
  const auto f = train(ctx, *m, o);
  for (const auto& it : f.iterations) {
    EXPECT_EQ(it.feature_map_bytes, it.peak_allocated_bytes - f.persistent_bytes);
    EXPECT_GE(it.peak_mapped_bytes, it.peak_allocated_bytes);
  }
  EXPECT_EQ(f.feature_map_bytes(), f.peak_allocated_bytes() - f.persistent_bytes);
}

std::size_t feature_maps(const models::model_config& c) {
  host_session session;
  context ctx = session.make_context();
  auto m = models::make_model(c);
  training_options o;
  o.iterations = 1;
  return train(ctx, *m, o).feature_map_bytes();
}

TEST(training, FeatureMapMemoryGrowsWithResNetDepth) {
  const auto shallow = feature_maps({model_kind::resnet, 8, 0, 2});
  const auto deep = feature_maps({model_kind::resnet, 20, 0, 2});
  EXPECT_GT(deep, shallow + shallow / 2);
}

TEST(training, FeatureMapMemoryGrowsWithLstmLength) {
  const auto short_run = feature_maps({model_kind::lstm, 0, 8, 2});
  const auto long_run = feature_maps({model_kind::lstm, 0, 32, 2});
  EXPECT_GT(long_run, 3 * short_run);
}

TEST(training, SeedsChooseTheRun) {
  const auto run = [](std::uint64_t seed) {
    host_session session;
    context ctx = session.make_context();
    auto m = models::make_small_model(model_kind::mlp);
    training_options o;
    o.iterations = 2;
    o.seed = seed;
    return train(ctx, *m, o).params_hash;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(training, BudgetTooSmallForTheModelFailsWithOutOfMemory) {
  host_session_options so;
  so.budget = std::size_t{1} << 20;  // ResNet-20's activations alone are larger
  host_session session(so);
  context ctx = session.make_context();
  auto m = models::make_model({model_kind::resnet, 20, 0, 0});
  training_options o;
  o.iterations = 1;
  EXPECT_THROW(train(ctx, *m, o), out_of_memory);
}

TEST(training, RejectsInvalidOptions) {
  host_session session;
  context ctx = session.make_context();
  auto m = models::make_small_model(model_kind::mlp);
  training_options o;
  o.iterations = 0;
  EXPECT_THROW(train(ctx, *m, o), config_error);
  o.iterations = 1;
  o.streams = 3;
  EXPECT_THROW(train(ctx, *m, o), config_error);
  o.streams = 1;
  o.distinct_batches = -1;
  EXPECT_THROW(train(ctx, *m, o), config_error);
  EXPECT_FALSE(m->initialized());
}

TEST(training, MedianIterationTimeLeavesOutTheFirst) {
  training_figures f;
  for (double s : {9.0, 1.0, 3.0, 2.0}) f.iterations.push_back(iteration_figures{0, s, 0, 0, 0, 0, 0.0f});
  EXPECT_EQ(f.iteration_seconds(), 2.0);
  f.iterations.resize(1);
  EXPECT_EQ(f.iteration_seconds(), 9.0);
}

// ---- host session and memory ------------------------------------------------------------

TEST(host_session, InstallsItsAllocatorAsTheDefaultForItsLifetime) {
  allocator::caching_allocator* before = allocator::default_allocator();
  {
    host_session session;
    EXPECT_EQ(allocator::default_allocator(), &session.allocator());
    void* p = session.memory().alloc(1000, nullptr);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(session.allocator().find(p).has_value());
    session.memory().free(p, 1000, nullptr);
  }
  EXPECT_EQ(allocator::default_allocator(), before);
}

// Sessions that leave the default slot alone train side by side on two threads (the paired
// timing of remat_sweeps): each serves its own allocator, reports its own figures, and
// trains the parameters a default session trains.
TEST(host_session, SessionsWithoutTheDefaultTrainSideBySideWithTheirOwnFigures) {
  std::uint64_t installed_hash = 0;
  std::vector<std::vector<float>> installed;
  training_figures installed_figures;
  {
    host_session session;
    context ctx = session.make_context();
    auto m = models::make_small_model(model_kind::resnet);
    training_options o;
    o.iterations = 3;
    installed_figures = train(ctx, *m, o);
    installed_hash = installed_figures.params_hash;
    installed = download_parameters(ctx, *m);
  }
  allocator::caching_allocator* before = allocator::default_allocator();
  struct side {
    std::vector<std::vector<float>> params;
    training_figures figures;
    std::size_t allocated = 0;        // the allocator's own statistic after training
    std::size_t memory_allocated = 1; // what memory().stats() reports then
    bool default_untouched = false;
  } sides[2];
  const auto run = [&](side& out, model_kind kind) {
    host_session_options so;
    so.install_default = false;
    host_session session(so);
    out.default_untouched = allocator::default_allocator() == before;
    context ctx = session.make_context();
    auto m = models::make_small_model(kind);
    training_options o;
    o.iterations = 3;
    out.figures = train(ctx, *m, o);
    out.params = download_parameters(ctx, *m);
    out.allocated = session.allocator().get_stats().allocated;
    out.memory_allocated = session.memory().stats().allocated;
  };
  std::thread other([&] { run(sides[1], model_kind::transformer); });
  run(sides[0], model_kind::resnet);
  other.join();
  EXPECT_EQ(allocator::default_allocator(), before);
  for (const side& s : sides) {
    EXPECT_TRUE(s.default_untouched);
    EXPECT_EQ(s.memory_allocated, s.allocated);
    EXPECT_EQ(s.allocated, s.figures.persistent_bytes);  // every iteration freed its own
    ASSERT_EQ(s.figures.iterations.size(), 3u);
    EXPECT_GT(s.figures.persistent_bytes, 0u);
    EXPECT_GT(s.figures.feature_map_bytes(), 0u);
  }
  EXPECT_TRUE(same_bits(sides[0].params, installed));
  EXPECT_EQ(sides[0].figures.params_hash, installed_hash);
  // Its own allocator's figures, not the other session's: the same model's as a default
  // session's.
  EXPECT_EQ(sides[0].figures.persistent_bytes, installed_figures.persistent_bytes);
  EXPECT_EQ(sides[0].figures.feature_map_bytes(), installed_figures.feature_map_bytes());
  EXPECT_EQ(sides[0].figures.peak_mapped_bytes(), installed_figures.peak_mapped_bytes());
}

TEST(host_session, BudgetOptionReachesTheAllocator) {
  host_session_options so;
  so.budget = std::size_t{8} << 20;
  host_session session(so);
  EXPECT_EQ(session.allocator().budget(), so.budget);
}

TEST(c_api_memory, WithoutAnInstalledAllocatorThrowsConfigError) {
  allocator::caching_allocator* previous = allocator::set_default_allocator(nullptr);
  c_api_memory mem;
  EXPECT_THROW(mem.alloc(64, nullptr), config_error);
  allocator::set_default_allocator(previous);
}

TEST(c_api_memory, AllocationPastTheBudgetThrowsOutOfMemoryWithFigures) {
  host_session_options so;
  so.budget = std::size_t{4} << 20;
  host_session session(so);
  try {
    (void)session.memory().alloc(std::size_t{64} << 20, nullptr);
    FAIL() << "no out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.details().requested, std::size_t{64} << 20);
    EXPECT_EQ(e.details().budget, so.budget);
  }
}

// ---- the figures document ------------------------------------------------------------

// The text of a member's value after `from`, up to the end of its line (a trailing comma
// dropped), and where it ends; "" and npos if absent. `indent` tells a top-level member
// (two spaces) from a per-iteration one (six).
std::pair<std::string, std::size_t> value_after(const std::string& json, const std::string& key, std::size_t from,
                                                const std::string& indent) {
  const std::string needle = "\n" + indent + "\"" + key + "\": ";
  const std::size_t at = json.find(needle, from);
  if (at == std::string::npos) return {"", std::string::npos};
  const std::size_t begin = at + needle.size();
  std::size_t end = json.find('\n', begin);
  std::string v = json.substr(begin, end - begin);
  if (!v.empty() && v.back() == ',') v.pop_back();
  return {v, end};
}

std::string member(const std::string& json, const std::string& key) {
  return value_after(json, key, 0, "  ").first;
}

TEST(figures_json, HasTheDocumentedKeysWithTheRunsFigures) {
  host_session session;
  context ctx = session.make_context();
  models::model_config c{model_kind::resnet, 8, 0, 2};
  auto m = models::make_model(c);
  training_options o;
  o.iterations = 2;
  const auto f = train(ctx, *m, o);
  std::ostringstream out;
  const report_run runs[] = {{"baseline_", &f, {}}};
  write_figures_json(out, c, runs);
  const std::string json = out.str();

  EXPECT_EQ(member(json, "model"), "\"resnet-8\"");
  EXPECT_EQ(member(json, "kind"), "\"resnet\"");
  EXPECT_EQ(member(json, "depth"), "8");
  EXPECT_EQ(member(json, "batch"), "2");
  EXPECT_EQ(member(json, "iterations"), "2");
  EXPECT_EQ(member(json, "baseline_peak_bytes"), std::to_string(f.peak_mapped_bytes()));
  EXPECT_EQ(member(json, "baseline_feature_map_bytes"), std::to_string(f.feature_map_bytes()));
  EXPECT_EQ(member(json, "baseline_allocated_peak_bytes"), std::to_string(f.peak_allocated_bytes()));
  EXPECT_EQ(member(json, "baseline_persistent_bytes"), std::to_string(f.persistent_bytes));
  EXPECT_EQ(std::stod(member(json, "baseline_iter_s")), f.iteration_seconds());
  EXPECT_FALSE(member(json, "baseline_final_loss").empty());
  EXPECT_EQ(member(json, "baseline_params_hash").size(), 18u);  // 16 hex digits, quoted
  EXPECT_EQ(member(json, "seq_len"), "");                      // resnet has none
  // One object per iteration, each with the run's figures.
  std::vector<std::string> iterations, peaks;
  for (std::size_t at = json.find("\"per_iteration\": ["); at != std::string::npos;) {
    auto [number, end] = value_after(json, "iteration", at, "      ");
    if (end == std::string::npos) break;
    iterations.push_back(number);
    auto [peak, peak_end] = value_after(json, "baseline_peak_bytes", end, "      ");
    peaks.push_back(peak);
    at = peak_end;
  }
  ASSERT_EQ(iterations, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(peaks[1], std::to_string(f.iterations[1].peak_mapped_bytes));
}

TEST(figures_json, WritesEveryRunUnderItsPrefixAndTheExtraKeys) {
  training_figures a, b;
  a.model = b.model = "lstm-4";
  a.iterations = {iteration_figures{0, 0.5, 4096, 2048, 1024, 2048, 2.5f}};
  b.iterations = {iteration_figures{0, 0.75, 2048, 1536, 512, 1024, 2.5f}};
  b.persistent_bytes = 1024;
  std::ostringstream out;
  const report_run runs[] = {{"baseline_", &a, {}}, {"", &b, {{"evictions", "3"}}}};
  const std::pair<std::string, std::string> extra[] = {{"params_bit_identical", "true"}};
  write_figures_json(out, models::model_config{model_kind::lstm, 0, 4, 1}, runs, extra);
  const std::string json = out.str();
  EXPECT_EQ(member(json, "baseline_peak_bytes"), "4096");
  EXPECT_EQ(member(json, "peak_bytes"), "2048");
  EXPECT_EQ(member(json, "iter_s"), "0.75");
  EXPECT_EQ(member(json, "evictions"), "3");
  EXPECT_EQ(member(json, "seq_len"), "4");
  EXPECT_NE(json.find("\"params_bit_identical\": true"), std::string::npos);
  EXPECT_NE(json.find("\"baseline_loss\": 2.5,\n      \"iter_s\": 0.75"), std::string::npos) << json;
}

TEST(figures_json, RejectsRunsOfDifferentLengths) {
  training_figures a, b;
  a.iterations.resize(2);
  b.iterations.resize(3);
  std::ostringstream out;
  const report_run runs[] = {{"baseline_", &a, {}}, {"", &b, {}}};
  EXPECT_THROW(write_figures_json(out, models::model_config{}, runs), config_error);
}

TEST(figures_json, EscapesStrings) { EXPECT_EQ(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\""); }

}  // namespace
}  // namespace sublinear::workloads
