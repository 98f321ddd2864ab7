// Tests for the workload models and the kernels they add (kernels/model_extras.hpp).
//
// The channel-copy kernel is checked like every library kernel: forward values against a
// direct computation, its backward (a channel copy the other way) against central
// differences. Each model is then checked whole: its gradients against central
// differences of its loss (so every layer's backward is wired to the right forward),
// two runs bit for bit, and every parameter tensor actually trained.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "workloads/host_session.hpp"
#include "workloads/kernels/elementwise.hpp"
#include "workloads/kernels/model_extras.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/models/resnet.hpp"
#include "workloads/training.hpp"
#include "sublinear/error.hpp"
#include "workloads/gradcheck.hpp"

namespace sublinear::workloads {
namespace {

using models::model_kind;
using testkit::random_values;

// ---- channel_copy / channel_concat --------------------------------------------------------

class channel_copy_test : public testkit::workload_test {};

TEST_F(channel_copy_test, ConcatPlacesEachInputInItsChannelWindow) {
  const std::int64_t n = 2, h = 2, w = 3, hw = h * w;
  const auto va = random_values(static_cast<std::size_t>(n * 1 * hw), 1);
  const auto vb = random_values(static_cast<std::size_t>(n * 2 * hw), 2);
  tensor a = upload(va, {n, 1, h, w});
  tensor b = upload(vb, {n, 2, h, w});
  const tensor inputs[] = {a, b};
  tensor cat = ops::channel_concat(ctx_, inputs);
  ASSERT_EQ(cat.shape, (std::vector<std::int64_t>{n, 3, h, w}));
  const auto got = download(cat);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t s = 0; s < hw; ++s) {
      EXPECT_EQ(got[static_cast<std::size_t>((i * 3 + 0) * hw + s)], va[static_cast<std::size_t>(i * hw + s)]);
      for (std::int64_t c = 0; c < 2; ++c) {
        EXPECT_EQ(got[static_cast<std::size_t>((i * 3 + 1 + c) * hw + s)],
                  vb[static_cast<std::size_t>((i * 2 + c) * hw + s)]);
      }
    }
  }
  release(cat);
  release(b);
  release(a);
}

TEST_F(channel_copy_test, AccumulateAddsToTheWindowAndLeavesTheRestAlone) {
  const std::vector<float> ones(2 * 3 * 4, 1.0f);
  tensor dst = upload(ones, {2, 3, 2, 2});
  const auto vs = random_values(2 * 2 * 4, 3);
  tensor src = upload(vs, {2, 2, 2, 2});
  ops::channel_copy(ctx_, dst, 1, src, 1, 1, true);  // dst[:, 1] += src[:, 1]
  const auto got = download(dst);
  for (std::int64_t n = 0; n < 2; ++n) {
    for (std::int64_t c = 0; c < 3; ++c) {
      for (std::int64_t s = 0; s < 4; ++s) {
        const float expected = c == 1 ? 1.0f + vs[static_cast<std::size_t>((n * 2 + 1) * 4 + s)] : 1.0f;
        EXPECT_EQ(got[static_cast<std::size_t>((n * 3 + c) * 4 + s)], expected) << n << "," << c << "," << s;
      }
    }
  }
  release(src);
  release(dst);
}

TEST_F(channel_copy_test, ConcatGradientMatchesFiniteDifferences) {
  const std::int64_t n = 2, h = 3, w = 3;
  tensor a = random({n, 2, h, w}, 11);
  tensor b = random({n, 3, h, w}, 12);
  const auto proj = random_values(static_cast<std::size_t>(n * 5 * h * w), 13);
  const auto loss = [&] {
    const tensor inputs[] = {a, b};
    tensor cat = ops::channel_concat(ctx_, inputs);
    const double l = project(cat, proj);
    release(cat);
    return l;
  };
  // Backward of the concatenation: each input's gradient is its window of dL/dcat.
  tensor dcat = upload(proj, {n, 5, h, w});
  tensor da = zeros({n, 2, h, w});
  tensor db = zeros({n, 3, h, w});
  ops::channel_copy(ctx_, da, 0, dcat, 0, 2, false);
  ops::channel_copy(ctx_, db, 0, dcat, 2, 3, true);  // into zeros: adding equals writing
  EXPECT_TRUE(gradcheck(a, download(da), loss, "a"));
  EXPECT_TRUE(gradcheck(b, download(db), loss, "b"));
  EXPECT_EQ(mem_.live(), 5u);
  for (tensor* t : {&db, &da, &dcat, &b, &a}) release(*t);
}

TEST_F(channel_copy_test, RejectsAWindowOutsideEitherTensor) {
  tensor dst = zeros({1, 2, 2, 2});
  tensor src = zeros({1, 3, 2, 2});
  EXPECT_THROW(ops::channel_copy(ctx_, dst, 1, src, 0, 2, false), config_error);
  EXPECT_THROW(ops::channel_copy(ctx_, dst, 0, src, 2, 2, false), config_error);
  EXPECT_NO_THROW(ops::channel_copy(ctx_, dst, 0, src, 1, 2, false));
  release(src);
  release(dst);
}

TEST_F(channel_copy_test, ConcatRejectsInputsOfDifferentSpatialSize) {
  tensor a = zeros({1, 1, 2, 2});
  tensor b = zeros({1, 1, 3, 3});
  const tensor inputs[] = {a, b};
  EXPECT_THROW((void)ops::channel_concat(ctx_, inputs), config_error);
  EXPECT_EQ(mem_.live(), 2u);  // nothing allocated by the failed call
  release(b);
  release(a);
}

TEST_F(channel_copy_test, ScaleMultipliesInPlaceAndItsGradientIsTheFactor) {
  const auto vx = random_values(10, 21);
  tensor x = upload(vx, {10});
  ops::scale(ctx_, x, -0.25f);
  const auto got = download(x);
  for (std::size_t i = 0; i < vx.size(); ++i) EXPECT_EQ(got[i], vx[i] * -0.25f);
  const auto proj = random_values(10, 22);
  const auto loss = [&] {
    tensor y = ops::copy(ctx_, x);
    ops::scale(ctx_, y, 3.0f);
    const double l = project(y, proj);
    release(y);
    return l;
  };
  std::vector<float> analytic(proj.size());
  for (std::size_t i = 0; i < proj.size(); ++i) analytic[i] = 3.0f * proj[i];
  EXPECT_TRUE(gradcheck(x, analytic, loss));
  release(x);
}

// ---- whole models -------------------------------------------------------------------------

std::vector<std::vector<float>> download_all(context& ctx, const std::vector<tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const tensor& t : ts) {
    out.emplace_back(static_cast<std::size_t>(t.numel()));
    ctx.dev.memcpy_async(out.back().data(), t.data, t.bytes(), ctx.stream);
  }
  ctx.dev.synchronize();
  return out;
}

::testing::AssertionResult bit_identical(const std::vector<std::vector<float>>& a,
                                         const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " tensors";
  if (a.empty()) return ::testing::AssertionFailure() << "no tensors compared";
  for (std::size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size() ||
        std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "tensor " << t << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

class model_test : public ::testing::TestWithParam<model_kind> {
 protected:
  // Trains a fresh small model in its own session and returns its parameters.
  static std::vector<std::vector<float>> train_fresh(model_kind kind, std::int64_t iterations) {
    host_session session;
    context ctx = session.make_context();
    auto m = models::make_small_model(kind);
    training_options o;
    o.iterations = iterations;
    train(ctx, *m, o);
    return download_parameters(ctx, *m);
  }
};

TEST_P(model_test, TwoRunsGiveBitIdenticalParameters) {
  EXPECT_TRUE(bit_identical(train_fresh(GetParam(), 3), train_fresh(GetParam(), 3)));
}

TEST_P(model_test, TrainingChangesEveryParameterTensor) {
  host_session session;
  context ctx = session.make_context();
  auto m = models::make_small_model(GetParam());
  m->init(ctx, 1);
  const auto before = download_parameters(ctx, *m);
  training_options o;
  o.iterations = 3;
  train(ctx, *m, o);
  const auto after = download_parameters(ctx, *m);
  ASSERT_EQ(before.size(), after.size());
  ASSERT_FALSE(before.empty());
  for (std::size_t t = 0; t < before.size(); ++t) {
    EXPECT_NE(std::memcmp(before[t].data(), after[t].data(), before[t].size() * sizeof(float)), 0)
        << m->name() << ": parameter tensor " << t << " did not change (no gradient reached it?)";
  }
}

// The loss is a function of every parameter; with the learning rate at 0 a step leaves the
// parameters alone, so each step evaluates the loss (and its gradients) at one point.
TEST_P(model_test, GradientsMatchFiniteDifferencesOfTheLoss) {
  host_session session;
  context ctx = session.make_context();
  auto m = models::make_small_model(GetParam(), 0.0f);
  training_options o;
  o.iterations = 1;
  o.distinct_batches = 1;  // every evaluation sees batch 0 (and step 0's dropout masks)
  const auto loss = [&] { return static_cast<double>(train(ctx, *m, o).iterations.front().loss); };
  loss();
  const auto grads = download_all(ctx, m->gradients());
  const auto params = m->parameters();
  ASSERT_EQ(grads.size(), params.size());
  testkit::gradcheck_options opt;
  opt.max_elements = 6;
  opt.eps = 1e-3f;
  opt.atol = 1.5e-3;
  opt.rtol = 3e-2;
  for (std::size_t t = 0; t < params.size(); ++t) {
    EXPECT_TRUE(testkit::gradcheck(ctx, params[t], grads[t], loss, m->name() + " parameter " + std::to_string(t), opt));
  }
}

std::string kind_name(const ::testing::TestParamInfo<model_kind>& p) { return std::string(models::to_string(p.param)); }

INSTANTIATE_TEST_SUITE_P(every_model, model_test,
                         ::testing::Values(model_kind::mlp, model_kind::resnet, model_kind::densenet, model_kind::lstm,
                                           model_kind::transformer),
                         kind_name);

// ---- the registry ---------------------------------------------------------------------------

TEST(model_registry, ParsesEveryKindByItsName) {
  for (auto kind : {model_kind::mlp, model_kind::resnet, model_kind::densenet, model_kind::lstm,
                    model_kind::transformer}) {
    EXPECT_EQ(models::parse_model_kind(models::to_string(kind)), kind);
  }
  EXPECT_FALSE(models::parse_model_kind("vgg").has_value());
}

TEST(model_registry, DefaultsFillOnlyTheSizesAKindUses) {
  models::model_config c;
  c.kind = model_kind::lstm;
  const auto d = models::with_defaults(c);
  EXPECT_EQ(d.depth, 0);
  EXPECT_GT(d.seq_len, 0);
  EXPECT_GT(d.batch, 0);
}

TEST(model_registry, ResNetDepthIsTwoPlusTwicePerBlock) {
  models::resnet_config c;
  c.depth = 1202;
  const models::resnet r(c);
  EXPECT_EQ(r.blocks(), 600);
  const auto s = r.stage_blocks();
  EXPECT_EQ(s[0] + s[1] + s[2], 600);
  EXPECT_EQ(r.name(), "resnet-1202");
}

// A bad size is an error that says what would be right, before anything is allocated.
TEST(model_registry, RejectsSizesWithWhatWouldBeRight) {
  const auto message = [](models::model_config c) -> std::string {
    try {
      (void)models::make_model(c);
    } catch (const config_error& e) {
      return e.what();
    }
    return "";
  };
  models::model_config odd{model_kind::resnet, 57, 0, 0};
  EXPECT_NE(message(odd).find("even"), std::string::npos) << message(odd);
  models::model_config dense{model_kind::densenet, 20, 0, 0};
  EXPECT_NE(message(dense).find("3L + 4"), std::string::npos) << message(dense);
  models::model_config lstm_depth{model_kind::lstm, 4, 0, 0};
  EXPECT_NE(message(lstm_depth).find("sequence length"), std::string::npos) << message(lstm_depth);
  models::model_config mlp_seq{model_kind::mlp, 0, 16, 0};
  EXPECT_NE(message(mlp_seq).find("sequence length"), std::string::npos) << message(mlp_seq);
  models::model_config fine{model_kind::resnet, 20, 0, 2};
  EXPECT_EQ(message(fine), "");
}

}  // namespace
}  // namespace sublinear::workloads
