// Tests for the sequence and attention kernels: LSTM cell, LayerNorm, attention,
// embedding, GELU, sequence pooling and step selection.
//
// Each op is checked three ways: forward values against a naive double-precision
// reference (on memory whose fresh allocations are NaN, so an output element a kernel
// forgets to write shows up), every backward output against central differences of the
// forward (tests/workloads/gradcheck.hpp), and the whole forward + backward computation
// bit for bit on buffers at different addresses and alignments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "workloads/kernels/attention.hpp"
#include "workloads/kernels/embedding.hpp"
#include "workloads/kernels/layernorm.hpp"
#include "workloads/kernels/lstm.hpp"
#include "workloads/kernels/sequence.hpp"
#include "sublinear/error.hpp"
#include "workloads/gradcheck.hpp"

namespace sublinear::workloads {
namespace {

using testkit::random_values;

std::size_t count(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

// Fresh allocations are filled with 0xFF bytes (a NaN pattern): a forward kernel must
// overwrite its whole output, or the reference comparison fails.
class poisoned_memory final : public memory {
 public:
  void* alloc(std::size_t bytes, device::host::stream* s) override {
    void* p = heap_.alloc(bytes, s);
    std::memset(p, 0xFF, bytes);
    return p;
  }
  void free(void* ptr, std::size_t bytes, device::host::stream* s) override { heap_.free(ptr, bytes, s); }

 private:
  testkit::heap_memory heap_;
};

// Runs `fn` against fresh heap memory whose i-th block sits (misalign + i * step) % 64
// bytes past a 64-byte boundary, after `spacer` bytes of unrelated allocation, and
// returns what it returns.
std::vector<float> run_at(device::host::device& dev, std::size_t misalign, std::size_t step, std::size_t spacer,
                          const std::function<std::vector<float>(context&)>& fn) {
  testkit::heap_memory mem(misalign, step);
  context ctx{dev, nullptr, mem};
  void* pad = mem.alloc(spacer, nullptr);
  auto out = fn(ctx);
  mem.free(pad, spacer, nullptr);
  return out;
}

::testing::AssertionResult bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " values";
  if (a.empty()) return ::testing::AssertionFailure() << "nothing was compared";
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "value " << i << " differs: " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

void append(std::vector<float>& to, const std::vector<float>& from) { to.insert(to.end(), from.begin(), from.end()); }

class part2_test : public testkit::workload_test {
 protected:
  // Uploads into the poisoned context (for forward reference checks).
  tensor poisoned_upload(const std::vector<float>& values, std::vector<std::int64_t> shape) {
    return testkit::upload(pctx_, values, std::move(shape));
  }
  std::vector<float> values(const std::vector<std::int64_t>& shape, std::uint64_t seed, float lo = -1.0f,
                            float hi = 1.0f) {
    return random_values(count(shape), seed, lo, hi);
  }
  void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol,
                       const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << "[" << i << "]";
    }
  }

  poisoned_memory poison_mem_;
  context pctx_{dev_, nullptr, poison_mem_};
};

// ===========================================================================================
// LayerNorm
// ===========================================================================================

using LayerNorm = part2_test;

struct layernorm_ref {
  std::vector<double> y, mean, rstd;
};

layernorm_ref layernorm_reference(const std::vector<float>& x, const std::vector<float>& g,
                                  const std::vector<float>& b, std::size_t d, double eps) {
  layernorm_ref r;
  const std::size_t rows = x.size() / d;
  for (std::size_t i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mu += x[i * d + j];
    mu /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) var += (x[i * d + j] - mu) * (x[i * d + j] - mu);
    var /= static_cast<double>(d);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (std::size_t j = 0; j < d; ++j) r.y.push_back((x[i * d + j] - mu) * rs * g[j] + b[j]);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
  }
  return r;
}

TEST_F(LayerNorm, ForwardMatchesNaiveReference) {
  const auto xv = values({3, 2, 8}, 1, -2.0f, 3.0f);
  const auto gv = values({8}, 2, 0.5f, 1.5f);
  const auto bv = values({8}, 3);
  tensor x = poisoned_upload(xv, {3, 2, 8});
  tensor g = poisoned_upload(gv, {8});
  tensor b = poisoned_upload(bv, {8});
  auto out = ops::layernorm_forward(pctx_, x, g, b, 1e-5f);
  EXPECT_EQ(out.y.shape, x.shape);
  EXPECT_EQ(out.mean.shape, (std::vector<std::int64_t>{6}));
  const auto ref = layernorm_reference(xv, gv, bv, 8, 1e-5);
  expect_near_all(testkit::download(pctx_, out.y), ref.y, 1e-5, "y");
  expect_near_all(testkit::download(pctx_, out.mean), ref.mean, 1e-6, "mean");
  expect_near_all(testkit::download(pctx_, out.rstd), ref.rstd, 1e-5, "rstd");
}

class LayerNormGradients : public part2_test {
 protected:
  void SetUp() override {
    x_ = random({4, 6}, 11, -2.0f, 2.0f);
    gamma_ = random({6}, 12, 0.5f, 1.5f);
    beta_ = random({6}, 13);
    w_ = random_values(24, 14);
  }
  double loss() {
    auto o = ops::layernorm_forward(ctx_, x_, gamma_, beta_);
    const double l = project(o.y, w_);
    release(o.y);
    release(o.mean);
    release(o.rstd);
    return l;
  }
  tensor x_, gamma_, beta_;
  std::vector<float> w_;
};

TEST_F(LayerNormGradients, InputGradientMatchesFiniteDifferences) {
  auto o = ops::layernorm_forward(ctx_, x_, gamma_, beta_);
  tensor dy = upload(w_, {4, 6});
  tensor dgamma = zeros({6}), dbeta = zeros({6});
  tensor dx = ops::layernorm_backward(ctx_, dy, x_, gamma_, o.mean, o.rstd, dgamma, dbeta);
  EXPECT_TRUE(gradcheck(x_, download(dx), [&] { return loss(); }, "dx"));
}

TEST_F(LayerNormGradients, GammaAndBetaGradientsMatchFiniteDifferences) {
  auto o = ops::layernorm_forward(ctx_, x_, gamma_, beta_);
  tensor dy = upload(w_, {4, 6});
  tensor dgamma = zeros({6}), dbeta = zeros({6});
  ops::layernorm_backward(ctx_, dy, x_, gamma_, o.mean, o.rstd, dgamma, dbeta);
  EXPECT_TRUE(gradcheck(gamma_, download(dgamma), [&] { return loss(); }, "dgamma"));
  EXPECT_TRUE(gradcheck(beta_, download(dbeta), [&] { return loss(); }, "dbeta"));
}

TEST_F(LayerNormGradients, ParameterGradientsAccumulateOntoExistingValues) {
  auto o = ops::layernorm_forward(ctx_, x_, gamma_, beta_);
  tensor dy = upload(w_, {4, 6});
  tensor dg0 = zeros({6}), db0 = zeros({6});
  ops::layernorm_backward(ctx_, dy, x_, gamma_, o.mean, o.rstd, dg0, db0);
  const auto start_g = random_values(6, 15), start_b = random_values(6, 16);
  tensor dg = upload(start_g, {6}), db = upload(start_b, {6});
  ops::layernorm_backward(ctx_, dy, x_, gamma_, o.mean, o.rstd, dg, db);
  const auto fresh_g = download(dg0), fresh_b = download(db0), got_g = download(dg), got_b = download(db);
  for (std::size_t j = 0; j < 6; ++j) {
    EXPECT_NEAR(got_g[j], start_g[j] + fresh_g[j], 1e-5) << j;
    EXPECT_NEAR(got_b[j], start_b[j] + fresh_b[j], 1e-5) << j;
  }
}

TEST_F(LayerNorm, ResultsAreBitIdenticalAtDifferentAddresses) {
  auto run = [](context& ctx) {
    tensor x = testkit::upload(ctx, random_values(5 * 37, 21, -3.0f, 3.0f), {5, 37});
    tensor g = testkit::upload(ctx, random_values(37, 22), {37});
    tensor b = testkit::upload(ctx, random_values(37, 23), {37});
    tensor dy = testkit::upload(ctx, random_values(5 * 37, 24), {5, 37});
    tensor dg = testkit::upload(ctx, std::vector<float>(37, 0.0f), {37});
    tensor db = testkit::upload(ctx, std::vector<float>(37, 0.0f), {37});
    auto o = ops::layernorm_forward(ctx, x, g, b);
    tensor dx = ops::layernorm_backward(ctx, dy, x, g, o.mean, o.rstd, dg, db);
    std::vector<float> all;
    for (const tensor* t : {&o.y, &o.mean, &o.rstd, &dx, &dg, &db}) append(all, testkit::download(ctx, *t));
    return all;
  };
  EXPECT_TRUE(bit_identical(run_at(dev_, 0, 0, 64, run), run_at(dev_, 4, 0, 1000, run)));
  EXPECT_TRUE(bit_identical(run_at(dev_, 0, 0, 64, run), run_at(dev_, 28, 12, 4096 + 12, run)));
}

TEST_F(LayerNorm, RejectsParametersOfTheWrongLength) {
  tensor x = random({2, 5}, 1), g = random({4}, 2), b = random({5}, 3);
  EXPECT_THROW(ops::layernorm_forward(ctx_, x, g, b), config_error);
}

// ===========================================================================================
// Embedding
// ===========================================================================================

using Embedding = part2_test;

TEST_F(Embedding, ForwardGathersRowsAddsPositionsAndZeroesPadding) {
  const std::vector<float> ids = {2, 0, 2, -1, 4, 7};  // -1 and 7 (>= vocab 5) are padding
  const auto table = values({5, 3}, 31), pos = values({4, 3}, 32);
  tensor tid = poisoned_upload(ids, {2, 3});
  tensor ttab = poisoned_upload(table, {5, 3});
  tensor tpos = poisoned_upload(pos, {4, 3});
  tensor plain = ops::embedding_forward(pctx_, tid, ttab);
  tensor with_pos = ops::embedding_forward(pctx_, tid, ttab, &tpos);
  EXPECT_EQ(plain.shape, (std::vector<std::int64_t>{2, 3, 3}));
  std::vector<double> want_plain, want_pos;
  for (std::size_t n = 0; n < ids.size(); ++n) {
    const bool pad = ids[n] < 0 || ids[n] >= 5;
    for (std::size_t j = 0; j < 3; ++j) {
      const double row = pad ? 0.0 : table[static_cast<std::size_t>(ids[n]) * 3 + j];
      want_plain.push_back(row);
      want_pos.push_back(row + pos[(n % 3) * 3 + j]);
    }
  }
  expect_near_all(testkit::download(pctx_, plain), want_plain, 0.0, "plain");
  expect_near_all(testkit::download(pctx_, with_pos), want_pos, 1e-7, "with positions");
}

class EmbeddingGradients : public part2_test {
 protected:
  void SetUp() override {
    ids_ = upload({3, 1, 3, 3, 0, -1}, {2, 3});  // repeated id 3, padding -1
    table_ = random({4, 5}, 41);
    pos_ = random({3, 5}, 42);
    w_ = random_values(30, 43);
  }
  double loss() {
    tensor y = ops::embedding_forward(ctx_, ids_, table_, &pos_);
    const double l = project(y, w_);
    release(y);
    return l;
  }
  tensor ids_, table_, pos_;
  std::vector<float> w_;
};

TEST_F(EmbeddingGradients, TableAndPositionGradientsMatchFiniteDifferences) {
  tensor dy = upload(w_, {2, 3, 5});
  tensor dtable = zeros({4, 5}), dpos = zeros({3, 5});
  ops::embedding_backward(ctx_, dy, ids_, dtable, &dpos);
  EXPECT_TRUE(gradcheck(table_, download(dtable), [&] { return loss(); }, "dtable"));
  EXPECT_TRUE(gradcheck(pos_, download(dpos), [&] { return loss(); }, "dpositions"));
}

TEST_F(EmbeddingGradients, RepeatedIdsSumInTokenOrderOntoExistingValues) {
  tensor dy = upload(w_, {2, 3, 5});
  const auto start = random_values(20, 44);
  tensor dtable = upload(start, {4, 5});
  ops::embedding_backward(ctx_, dy, ids_, dtable);
  const auto got = download(dtable);
  // Row 3 receives tokens 0, 2 and 3 in that order; row 2 receives nothing.
  for (std::size_t j = 0; j < 5; ++j) {
    float want = start[15 + j];
    for (std::size_t n : {0u, 2u, 3u}) want += w_[n * 5 + j];
    EXPECT_EQ(got[15 + j], want) << j;
    EXPECT_EQ(got[10 + j], start[10 + j]) << j;
  }
}

TEST_F(Embedding, ResultsAreBitIdenticalAtDifferentAddresses) {
  auto run = [](context& ctx) {
    std::vector<float> idv(4 * 9);
    for (std::size_t n = 0; n < idv.size(); ++n) idv[n] = static_cast<float>((n * 7) % 11);
    tensor ids = testkit::upload(ctx, idv, {4, 9});
    tensor table = testkit::upload(ctx, random_values(11 * 13, 51), {11, 13});
    tensor pos = testkit::upload(ctx, random_values(9 * 13, 52), {9, 13});
    tensor dy = testkit::upload(ctx, random_values(4 * 9 * 13, 53), {4, 9, 13});
    tensor dtable = testkit::upload(ctx, std::vector<float>(11 * 13, 0.0f), {11, 13});
    tensor dpos = testkit::upload(ctx, std::vector<float>(9 * 13, 0.0f), {9, 13});
    tensor y = ops::embedding_forward(ctx, ids, table, &pos);
    ops::embedding_backward(ctx, dy, ids, dtable, &dpos);
    std::vector<float> all = testkit::download(ctx, y);
    append(all, testkit::download(ctx, dtable));
    append(all, testkit::download(ctx, dpos));
    return all;
  };
  EXPECT_TRUE(bit_identical(run_at(dev_, 0, 0, 64, run), run_at(dev_, 12, 20, 333, run)));
}

// ===========================================================================================
// GELU and sequence pooling (the Transformer's feed-forward activation and classifier
// input) and step selection (the LSTM's per-step input and last-token pooling)
// ===========================================================================================

using AttentionBlockGelu = part2_test;
using AttentionBlockSequenceMean = part2_test;
using LstmSequenceSelect = part2_test;

TEST_F(AttentionBlockGelu, ForwardMatchesNaiveReference) {
  const auto xv = values({7, 9}, 61, -4.0f, 4.0f);
  tensor x = poisoned_upload(xv, {7, 9});
  tensor y = ops::gelu_forward(pctx_, x);
  std::vector<double> want;
  for (float v : xv) want.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  expect_near_all(testkit::download(pctx_, y), want, 1e-6, "gelu");
}

TEST_F(AttentionBlockGelu, BackwardMatchesFiniteDifferences) {
  tensor x = random({5, 8}, 62, -3.0f, 3.0f);
  const auto w = random_values(40, 63);
  tensor dx = ops::gelu_backward(ctx_, upload(w, {5, 8}), x);
  EXPECT_TRUE(gradcheck(x, download(dx), [&] {
    tensor y = ops::gelu_forward(ctx_, x);
    const double l = project(y, w);
    release(y);
    return l;
  }));
}

TEST_F(AttentionBlockSequenceMean, ForwardMatchesNaiveReference) {
  const auto xv = values({2, 5, 3}, 71);
  tensor y = ops::sequence_mean_forward(pctx_, poisoned_upload(xv, {2, 5, 3}));
  EXPECT_EQ(y.shape, (std::vector<std::int64_t>{2, 3}));
  std::vector<double> want;
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t j = 0; j < 3; ++j) {
      double s = 0;
      for (std::size_t t = 0; t < 5; ++t) s += xv[(b * 5 + t) * 3 + j];
      want.push_back(s / 5);
    }
  }
  expect_near_all(testkit::download(pctx_, y), want, 1e-6, "mean");
}

TEST_F(AttentionBlockSequenceMean, BackwardMatchesFiniteDifferences) {
  tensor x = random({2, 4, 3}, 72);
  const auto w = random_values(6, 73);
  tensor dx = ops::sequence_mean_backward(ctx_, upload(w, {2, 3}), 4);
  EXPECT_EQ(dx.shape, x.shape);
  EXPECT_TRUE(gradcheck(x, download(dx), [&] {
    tensor y = ops::sequence_mean_forward(ctx_, x);
    const double l = project(y, w);
    release(y);
    return l;
  }));
}

TEST_F(LstmSequenceSelect, ForwardCopiesOneStep) {
  const auto xv = values({3, 4, 2}, 81);
  tensor y = ops::sequence_select_forward(pctx_, poisoned_upload(xv, {3, 4, 2}), 2);
  std::vector<double> want;
  for (std::size_t b = 0; b < 3; ++b) {
    for (std::size_t j = 0; j < 2; ++j) want.push_back(xv[(b * 4 + 2) * 2 + j]);
  }
  expect_near_all(testkit::download(pctx_, y), want, 0.0, "select");
}

TEST_F(LstmSequenceSelect, BackwardAccumulatesEveryStepsGradient) {
  tensor x = random({2, 3, 4}, 82);
  const auto w0 = random_values(8, 83), w2 = random_values(8, 84);
  tensor dx = zeros({2, 3, 4});
  ops::sequence_select_backward(ctx_, upload(w0, {2, 4}), dx, 0);
  ops::sequence_select_backward(ctx_, upload(w2, {2, 4}), dx, 2);
  ops::sequence_select_backward(ctx_, upload(w2, {2, 4}), dx, 2);  // a step used twice
  EXPECT_TRUE(gradcheck(x, download(dx), [&] {
    tensor y0 = ops::sequence_select_forward(ctx_, x, 0);
    tensor y2 = ops::sequence_select_forward(ctx_, x, 2);
    const double l = project(y0, w0) + 2.0 * project(y2, w2);
    release(y0);
    release(y2);
    return l;
  }));
}

TEST_F(LstmSequenceSelect, RejectsAStepOutsideTheSequence) {
  tensor x = random({2, 3, 4}, 85);
  EXPECT_THROW(ops::sequence_select_forward(ctx_, x, 3), config_error);
  EXPECT_THROW(ops::sequence_select_forward(ctx_, x, -1), config_error);
}

// ===========================================================================================
// LSTM cell
// ===========================================================================================

using LstmCell = part2_test;

constexpr std::int64_t kB = 3, kI = 5, kH = 4;

struct lstm_ref {
  std::vector<double> h, c, gates;
};

double sigmoid_ref(double z) { return 1.0 / (1.0 + std::exp(-z)); }

lstm_ref lstm_reference(const std::vector<float>& x, const std::vector<float>& h0, const std::vector<float>& c0,
                        const std::vector<float>& wih, const std::vector<float>& whh,
                        const std::vector<float>& bias, std::size_t batch, std::size_t in, std::size_t hid) {
  lstm_ref r;
  for (std::size_t b = 0; b < batch; ++b) {
    std::vector<double> pre(4 * hid);
    for (std::size_t row = 0; row < 4 * hid; ++row) {
      double s = bias[row];
      for (std::size_t k = 0; k < in; ++k) s += static_cast<double>(wih[row * in + k]) * x[b * in + k];
      for (std::size_t k = 0; k < hid; ++k) s += static_cast<double>(whh[row * hid + k]) * h0[b * hid + k];
      pre[row] = s;
    }
    std::vector<double> act(4 * hid);
    for (std::size_t u = 0; u < hid; ++u) {
      act[u] = sigmoid_ref(pre[u]);
      act[hid + u] = sigmoid_ref(pre[hid + u]);
      act[2 * hid + u] = std::tanh(pre[2 * hid + u]);
      act[3 * hid + u] = sigmoid_ref(pre[3 * hid + u]);
    }
    for (std::size_t u = 0; u < hid; ++u) {
      const double c = act[hid + u] * c0[b * hid + u] + act[u] * act[2 * hid + u];
      r.c.push_back(c);
      r.h.push_back(act[3 * hid + u] * std::tanh(c));
    }
    r.gates.insert(r.gates.end(), act.begin(), act.end());
  }
  return r;
}

TEST_F(LstmCell, ForwardMatchesNaiveReference) {
  const auto x = values({kB, kI}, 91), h0 = values({kB, kH}, 92), c0 = values({kB, kH}, 93);
  const auto wih = values({4 * kH, kI}, 94), whh = values({4 * kH, kH}, 95), bias = values({4 * kH}, 96);
  auto out = ops::lstm_cell_forward(pctx_, poisoned_upload(x, {kB, kI}), poisoned_upload(h0, {kB, kH}),
                                    poisoned_upload(c0, {kB, kH}), poisoned_upload(wih, {4 * kH, kI}),
                                    poisoned_upload(whh, {4 * kH, kH}), poisoned_upload(bias, {4 * kH}));
  const auto ref = lstm_reference(x, h0, c0, wih, whh, bias, kB, kI, kH);
  expect_near_all(testkit::download(pctx_, out.h), ref.h, 1e-5, "h");
  expect_near_all(testkit::download(pctx_, out.c), ref.c, 1e-5, "c");
  expect_near_all(testkit::download(pctx_, out.gates), ref.gates, 1e-5, "gates");
}

// Two unrolled steps: L = w_h1 . h1 + w_c1 . c1 + w_h2 . h2 + w_c2 . c2 with step 2
// reading step 1's state, so the chain through dh_prev / dc_prev and the weight
// gradients' accumulation over steps are both exercised.
class LstmCellGradients : public part2_test {
 protected:
  void SetUp() override {
    x1_ = random({kB, kI}, 101);
    x2_ = random({kB, kI}, 102);
    h0_ = random({kB, kH}, 103);
    c0_ = random({kB, kH}, 104);
    wih_ = random({4 * kH, kI}, 105, -0.7f, 0.7f);
    whh_ = random({4 * kH, kH}, 106, -0.7f, 0.7f);
    bias_ = random({4 * kH}, 107);
    for (int i = 0; i < 4; ++i) w_.push_back(random_values(kB * kH, 108 + static_cast<std::uint64_t>(i)));
  }

  double loss() {
    auto s1 = ops::lstm_cell_forward(ctx_, x1_, h0_, c0_, wih_, whh_, bias_);
    auto s2 = ops::lstm_cell_forward(ctx_, x2_, s1.h, s1.c, wih_, whh_, bias_);
    const double l = project(s1.h, w_[0]) + project(s1.c, w_[1]) + project(s2.h, w_[2]) + project(s2.c, w_[3]);
    for (tensor* t : {&s1.h, &s1.c, &s1.gates, &s2.h, &s2.c, &s2.gates}) release(*t);
    return l;
  }

  // Backward through both steps; fills the gradient members.
  void backward() {
    auto s1 = ops::lstm_cell_forward(ctx_, x1_, h0_, c0_, wih_, whh_, bias_);
    auto s2 = ops::lstm_cell_forward(ctx_, x2_, s1.h, s1.c, wih_, whh_, bias_);
    dwih_ = zeros({4 * kH, kI});
    dwhh_ = zeros({4 * kH, kH});
    dbias_ = zeros({4 * kH});
    tensor dh2 = upload(w_[2], {kB, kH}), dc2 = upload(w_[3], {kB, kH});
    auto g2 = ops::lstm_cell_backward(ctx_, dh2, &dc2, x2_, s1.h, s1.c, s2.c, s2.gates, wih_, whh_, dwih_, dwhh_,
                                      dbias_);
    // Step 1's outputs also feed the loss directly.
    auto add = [&](const tensor& t, const std::vector<float>& w) {
      auto v = download(t);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] += w[i];
      return upload(v, t.shape);
    };
    tensor dh1 = add(g2.dh_prev, w_[0]), dc1 = add(g2.dc_prev, w_[1]);
    auto g1 = ops::lstm_cell_backward(ctx_, dh1, &dc1, x1_, h0_, c0_, s1.c, s1.gates, wih_, whh_, dwih_, dwhh_,
                                      dbias_);
    dx1_ = download(g1.dx);
    dx2_ = download(g2.dx);
    dh0_ = download(g1.dh_prev);
    dc0_ = download(g1.dc_prev);
  }

  tensor x1_, x2_, h0_, c0_, wih_, whh_, bias_;
  tensor dwih_, dwhh_, dbias_;
  std::vector<std::vector<float>> w_;
  std::vector<float> dx1_, dx2_, dh0_, dc0_;
};

TEST_F(LstmCellGradients, InputAndStateGradientsMatchFiniteDifferences) {
  backward();
  auto l = [&] { return loss(); };
  EXPECT_TRUE(gradcheck(x1_, dx1_, l, "dx step 1"));
  EXPECT_TRUE(gradcheck(x2_, dx2_, l, "dx step 2"));
  EXPECT_TRUE(gradcheck(h0_, dh0_, l, "dh_prev"));
  EXPECT_TRUE(gradcheck(c0_, dc0_, l, "dc_prev"));
}

TEST_F(LstmCellGradients, WeightGradientsAccumulatedOverStepsMatchFiniteDifferences) {
  backward();
  auto l = [&] { return loss(); };
  EXPECT_TRUE(gradcheck(wih_, download(dwih_), l, "dW_ih"));
  EXPECT_TRUE(gradcheck(whh_, download(dwhh_), l, "dW_hh"));
  EXPECT_TRUE(gradcheck(bias_, download(dbias_), l, "dbias"));
}

TEST_F(LstmCellGradients, MissingCellGradientMeansZero) {
  auto s = ops::lstm_cell_forward(ctx_, x1_, h0_, c0_, wih_, whh_, bias_);
  tensor dh = upload(w_[0], {kB, kH}), dc = zeros({kB, kH});
  tensor a_wih = zeros({4 * kH, kI}), a_whh = zeros({4 * kH, kH}), a_b = zeros({4 * kH});
  tensor b_wih = zeros({4 * kH, kI}), b_whh = zeros({4 * kH, kH}), b_b = zeros({4 * kH});
  auto with_zero = ops::lstm_cell_backward(ctx_, dh, &dc, x1_, h0_, c0_, s.c, s.gates, wih_, whh_, a_wih, a_whh, a_b);
  auto with_null =
      ops::lstm_cell_backward(ctx_, dh, nullptr, x1_, h0_, c0_, s.c, s.gates, wih_, whh_, b_wih, b_whh, b_b);
  EXPECT_TRUE(bit_identical(download(with_zero.dx), download(with_null.dx)));
  EXPECT_TRUE(bit_identical(download(with_zero.dc_prev), download(with_null.dc_prev)));
  EXPECT_TRUE(bit_identical(download(a_wih), download(b_wih)));
}

TEST_F(LstmCellGradients, BackwardFreesItsTemporaryAndReturnsThreeTensors) {
  auto s = ops::lstm_cell_forward(ctx_, x1_, h0_, c0_, wih_, whh_, bias_);
  tensor dh = upload(w_[0], {kB, kH});
  dwih_ = zeros({4 * kH, kI});
  dwhh_ = zeros({4 * kH, kH});
  dbias_ = zeros({4 * kH});
  const std::size_t live = mem_.live(), allocs = mem_.allocs();
  auto g = ops::lstm_cell_backward(ctx_, dh, nullptr, x1_, h0_, c0_, s.c, s.gates, wih_, whh_, dwih_, dwhh_, dbias_);
  EXPECT_EQ(mem_.live(), live + 3);
  EXPECT_EQ(mem_.allocs(), allocs + 4);  // dx, dh_prev, dc_prev and the dgates temporary
  EXPECT_EQ(mem_.bad_frees(), 0u);
}

TEST_F(LstmCell, ResultsAreBitIdenticalAtDifferentAddresses) {
  auto run = [](context& ctx) {
    const std::int64_t b = 3, in = 19, hid = 13;
    tensor x = testkit::upload(ctx, random_values(b * in, 111), {b, in});
    tensor h0 = testkit::upload(ctx, random_values(b * hid, 112), {b, hid});
    tensor c0 = testkit::upload(ctx, random_values(b * hid, 113), {b, hid});
    tensor wih = testkit::upload(ctx, random_values(4 * hid * in, 114), {4 * hid, in});
    tensor whh = testkit::upload(ctx, random_values(4 * hid * hid, 115), {4 * hid, hid});
    tensor bias = testkit::upload(ctx, random_values(4 * hid, 116), {4 * hid});
    tensor dh = testkit::upload(ctx, random_values(b * hid, 117), {b, hid});
    tensor dc = testkit::upload(ctx, random_values(b * hid, 118), {b, hid});
    tensor dwih = testkit::upload(ctx, std::vector<float>(4 * hid * in, 0.0f), {4 * hid, in});
    tensor dwhh = testkit::upload(ctx, std::vector<float>(4 * hid * hid, 0.0f), {4 * hid, hid});
    tensor db = testkit::upload(ctx, std::vector<float>(4 * hid, 0.0f), {4 * hid});
    auto s = ops::lstm_cell_forward(ctx, x, h0, c0, wih, whh, bias);
    auto g = ops::lstm_cell_backward(ctx, dh, &dc, x, h0, c0, s.c, s.gates, wih, whh, dwih, dwhh, db);
    std::vector<float> all;
    for (const tensor* t : {&s.h, &s.c, &s.gates, &g.dx, &g.dh_prev, &g.dc_prev, &dwih, &dwhh, &db}) {
      append(all, testkit::download(ctx, *t));
    }
    return all;
  };
  EXPECT_TRUE(bit_identical(run_at(dev_, 0, 0, 64, run), run_at(dev_, 4, 0, 777, run)));
  EXPECT_TRUE(bit_identical(run_at(dev_, 0, 0, 64, run), run_at(dev_, 60, 36, 8192 + 20, run)));
}

TEST_F(LstmCell, RejectsMismatchedWeightShapes) {
  tensor x = random({2, 3}, 1), h = random({2, 4}, 2), c = random({2, 4}, 3);
  tensor wih = random({16, 4}, 4), whh = random({16, 4}, 5), b = random({16}, 6);
  EXPECT_THROW(ops::lstm_cell_forward(ctx_, x, h, c, wih, whh, b), config_error);
}

// ===========================================================================================
// Attention
// ===========================================================================================

using Attention = part2_test;

// Reference over [B, S, heads * d] q, k, v with row stride `ld` and column offsets.
struct attention_ref {
  std::vector<double> out, probs;
};

attention_ref attention_reference(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, std::size_t batch, std::size_t seq,
                                  std::size_t heads, std::size_t d, bool causal) {
  const std::size_t m = heads * d;
  attention_ref r;
  r.out.assign(batch * seq * m, 0.0);
  r.probs.assign(batch * heads * seq * seq, 0.0);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t i = 0; i < seq; ++i) {
        std::vector<double> s(seq, -INFINITY);
        double mx = -INFINITY;
        for (std::size_t j = 0; j < seq; ++j) {
          if (causal && j > i) continue;
          double acc = 0;
          for (std::size_t c = 0; c < d; ++c) {
            acc += static_cast<double>(q[(b * seq + i) * m + h * d + c]) * k[(b * seq + j) * m + h * d + c];
          }
          s[j] = acc / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (std::size_t j = 0; j < seq; ++j) sum += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx);
        for (std::size_t j = 0; j < seq; ++j) {
          const double p = std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx) / sum;
          r.probs[((b * heads + h) * seq + i) * seq + j] = p;
          for (std::size_t c = 0; c < d; ++c) r.out[(b * seq + i) * m + h * d + c] += p * v[(b * seq + j) * m + h * d + c];
        }
      }
    }
  }
  return r;
}

// Splits a packed [B, S, 3M] host buffer into Q, K, V [B, S, M].
std::vector<std::vector<float>> unpack(const std::vector<float>& qkv, std::size_t tokens, std::size_t m) {
  std::vector<std::vector<float>> parts(3, std::vector<float>(tokens * m));
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t p = 0; p < 3; ++p) {
      for (std::size_t c = 0; c < m; ++c) parts[p][t * m + c] = qkv[t * 3 * m + p * m + c];
    }
  }
  return parts;
}

TEST_F(Attention, ForwardMatchesNaiveReference) {
  for (bool causal : {false, true}) {
    const auto q = values({2, 5, 6}, 121), k = values({2, 5, 6}, 122), v = values({2, 5, 6}, 123);
    auto out = ops::attention_forward(pctx_, poisoned_upload(q, {2, 5, 6}), poisoned_upload(k, {2, 5, 6}),
                                      poisoned_upload(v, {2, 5, 6}), 3, causal);
    EXPECT_EQ(out.probs.shape, (std::vector<std::int64_t>{2, 3, 5, 5}));
    const auto ref = attention_reference(q, k, v, 2, 5, 3, 2, causal);
    expect_near_all(testkit::download(pctx_, out.out), ref.out, 1e-5, causal ? "causal out" : "out");
    expect_near_all(testkit::download(pctx_, out.probs), ref.probs, 1e-6, causal ? "causal probs" : "probs");
  }
}

TEST_F(Attention, PackedFormMatchesSeparateTensorsBitForBit) {
  const auto qkv = values({2, 4, 24}, 131);
  const auto parts = unpack(qkv, 8, 8);
  tensor packed = upload(qkv, {2, 4, 24});
  tensor q = upload(parts[0], {2, 4, 8}), k = upload(parts[1], {2, 4, 8}), v = upload(parts[2], {2, 4, 8});
  auto a = ops::attention_forward_packed(ctx_, packed, 2);
  auto b = ops::attention_forward(ctx_, q, k, v, 2);
  EXPECT_TRUE(bit_identical(download(a.out), download(b.out)));
  EXPECT_TRUE(bit_identical(download(a.probs), download(b.probs)));
  tensor dout = random({2, 4, 8}, 132);
  tensor dqkv = ops::attention_backward_packed(ctx_, dout, packed, a.probs, 2);
  auto g = ops::attention_backward(ctx_, dout, q, k, v, b.probs, 2);
  const auto dparts = unpack(download(dqkv), 8, 8);
  EXPECT_TRUE(bit_identical(dparts[0], download(g.dq)));
  EXPECT_TRUE(bit_identical(dparts[1], download(g.dk)));
  EXPECT_TRUE(bit_identical(dparts[2], download(g.dv)));
}

class AttentionGradients : public part2_test {
 protected:
  void SetUp() override {
    q_ = random({2, 4, 6}, 141, -1.5f, 1.5f);
    k_ = random({2, 4, 6}, 142, -1.5f, 1.5f);
    v_ = random({2, 4, 6}, 143);
    w_ = random_values(48, 144);
  }
  void check(bool causal) {
    auto fwd = ops::attention_forward(ctx_, q_, k_, v_, 2, causal);
    tensor dout = upload(w_, {2, 4, 6});
    auto g = ops::attention_backward(ctx_, dout, q_, k_, v_, fwd.probs, 2);
    auto l = [&] {
      auto o = ops::attention_forward(ctx_, q_, k_, v_, 2, causal);
      const double r = project(o.out, w_);
      release(o.out);
      release(o.probs);
      return r;
    };
    EXPECT_TRUE(gradcheck(q_, download(g.dq), l, "dq"));
    EXPECT_TRUE(gradcheck(k_, download(g.dk), l, "dk"));
    EXPECT_TRUE(gradcheck(v_, download(g.dv), l, "dv"));
  }
  tensor q_, k_, v_;
  std::vector<float> w_;
};

TEST_F(AttentionGradients, QueryKeyValueGradientsMatchFiniteDifferences) { check(false); }

TEST_F(AttentionGradients, CausalGradientsMatchFiniteDifferences) { check(true); }

TEST_F(AttentionGradients, PackedGradientMatchesFiniteDifferences) {
  tensor qkv = random({2, 3, 12}, 151, -1.5f, 1.5f);
  const auto w = random_values(24, 152);
  auto fwd = ops::attention_forward_packed(ctx_, qkv, 2, true);
  tensor dqkv = ops::attention_backward_packed(ctx_, upload(w, {2, 3, 4}), qkv, fwd.probs, 2);
  EXPECT_EQ(dqkv.shape, qkv.shape);
  EXPECT_TRUE(gradcheck(qkv, download(dqkv), [&] {
    auto o = ops::attention_forward_packed(ctx_, qkv, 2, true);
    const double r = project(o.out, w);
    release(o.out);
    release(o.probs);
    return r;
  }, "dqkv"));
}

TEST_F(Attention, BackwardOverwritesFreshGradientMemory) {
  // Gradients land in NaN-poisoned allocations: every element must be written.
  tensor qkv = poisoned_upload(values({1, 3, 12}, 161), {1, 3, 12});
  auto fwd = ops::attention_forward_packed(pctx_, qkv, 1, true);
  tensor dqkv = ops::attention_backward_packed(pctx_, poisoned_upload(values({1, 3, 4}, 162), {1, 3, 4}), qkv,
                                               fwd.probs, 1);
  for (float g : testkit::download(pctx_, dqkv)) ASSERT_TRUE(std::isfinite(g));
}

TEST_F(Attention, ResultsAreBitIdenticalAtDifferentAddresses) {
  auto run = [](context& ctx) {
    tensor qkv = testkit::upload(ctx, random_values(2 * 7 * 45, 171), {2, 7, 45});
    tensor dout = testkit::upload(ctx, random_values(2 * 7 * 15, 172), {2, 7, 15});
    auto o = ops::attention_forward_packed(ctx, qkv, 3);
    tensor d = ops::attention_backward_packed(ctx, dout, qkv, o.probs, 3);
    std::vector<float> all = testkit::download(ctx, o.out);
    append(all, testkit::download(ctx, o.probs));
    append(all, testkit::download(ctx, d));
    return all;
  };
  EXPECT_TRUE(bit_identical(run_at(dev_, 0, 0, 64, run), run_at(dev_, 4, 0, 100, run)));
  EXPECT_TRUE(bit_identical(run_at(dev_, 0, 0, 64, run), run_at(dev_, 36, 8, 5000, run)));
}

TEST_F(Attention, RejectsAWidthNotDivisibleIntoHeads) {
  tensor qkv = random({1, 2, 12}, 1);
  EXPECT_THROW(ops::attention_forward_packed(ctx_, qkv, 3), config_error);  // 12 is not 3 parts x 3 heads x a head size
  tensor q = random({1, 2, 6}, 2);
  EXPECT_THROW(ops::attention_forward(ctx_, q, q, q, 4), config_error);
}

// ===========================================================================================
// Every op in one chain, on a stream's worker thread
// ===========================================================================================

// ids -> embedding (+ positions) -> LayerNorm -> GELU -> packed attention (causal) ->
// an LSTM over the sequence (select per step) and mean pooling, then the whole backward.
// Returns every output and gradient.
std::vector<float> sequence_chain(context& ctx) {
  const std::int64_t b = 2, s = 5, vocab = 7, width = 12, heads = 2, model = 4, hid = 3;
  auto up = [&](const std::vector<std::int64_t>& shape, std::uint64_t seed) {
    return testkit::upload(ctx, random_values(count(shape), seed), shape);
  };
  auto zero = [&](const std::vector<std::int64_t>& shape) {
    return testkit::upload(ctx, std::vector<float>(count(shape), 0.0f), shape);
  };
  tensor ids = testkit::upload(ctx, {1, 3, 3, 6, 0, 2, 5, -1, 4, 3}, {b, s});
  tensor table = up({vocab, width}, 201), pos = up({s, width}, 202);
  tensor gamma = up({width}, 203), beta = up({width}, 204);
  tensor wih = up({4 * hid, model}, 205), whh = up({4 * hid, hid}, 206), bias = up({4 * hid}, 207);

  tensor emb = ops::embedding_forward(ctx, ids, table, &pos);
  auto ln = ops::layernorm_forward(ctx, emb, gamma, beta);
  tensor act = ops::gelu_forward(ctx, ln.y);
  auto att = ops::attention_forward_packed(ctx, act, heads, true);
  tensor pooled = ops::sequence_mean_forward(ctx, att.out);
  std::vector<ops::lstm_cell_output> steps;
  std::vector<tensor> xs;
  tensor h = zero({b, hid}), c = zero({b, hid});
  for (std::int64_t t = 0; t < s; ++t) {
    xs.push_back(ops::sequence_select_forward(ctx, att.out, t));
    steps.push_back(ops::lstm_cell_forward(ctx, xs.back(), t == 0 ? h : steps.back().h,
                                           t == 0 ? c : steps.back().c, wih, whh, bias));
  }

  tensor dwih = zero({4 * hid, model}), dwhh = zero({4 * hid, hid}), dbias = zero({4 * hid});
  tensor datt = zero({b, s, model});
  tensor dh = up({b, hid}, 208);
  tensor dc;
  for (std::int64_t t = s - 1; t >= 0; --t) {
    const auto& st = steps[static_cast<std::size_t>(t)];
    const tensor& hp = t == 0 ? h : steps[static_cast<std::size_t>(t - 1)].h;
    const tensor& cp = t == 0 ? c : steps[static_cast<std::size_t>(t - 1)].c;
    auto g = ops::lstm_cell_backward(ctx, dh, dc.data != nullptr ? &dc : nullptr, xs[static_cast<std::size_t>(t)],
                                     hp, cp, st.c, st.gates, wih, whh, dwih, dwhh, dbias);
    ops::sequence_select_backward(ctx, g.dx, datt, t);
    dh = g.dh_prev;
    dc = g.dc_prev;
  }
  tensor dmean = ops::sequence_mean_backward(ctx, up({b, model}, 209), s);
  auto both = testkit::download(ctx, datt);
  const auto from_mean = testkit::download(ctx, dmean);
  for (std::size_t i = 0; i < both.size(); ++i) both[i] += from_mean[i];
  tensor dout = testkit::upload(ctx, both, {b, s, model});
  tensor dact = ops::attention_backward_packed(ctx, dout, act, att.probs, heads);
  tensor dln = ops::gelu_backward(ctx, dact, ln.y);
  tensor dgamma = zero({width}), dbeta = zero({width});
  tensor demb = ops::layernorm_backward(ctx, dln, emb, gamma, ln.mean, ln.rstd, dgamma, dbeta);
  tensor dtable = zero({vocab, width}), dpos = zero({s, width});
  ops::embedding_backward(ctx, demb, ids, dtable, &dpos);

  std::vector<float> all;
  for (const tensor* t : {&att.out, &att.probs, &pooled, &steps.back().h, &steps.back().c, &dwih, &dwhh, &dbias,
                          &dact, &dgamma, &dbeta, &dtable, &dpos}) {
    append(all, testkit::download(ctx, *t));
  }
  return all;
}

// Heap memory whose frees are stream-ordered, as a caching allocator's are: a block goes
// back to the heap only when the stream reaches the free, so an op may release a
// temporary while kernels that use it are still queued.
class stream_ordered_memory final : public memory {
 public:
  stream_ordered_memory(device::host::device& dev, std::size_t misalign, std::size_t step)
      : dev_(dev), heap_(misalign, step) {}
  void* alloc(std::size_t bytes, device::host::stream* s) override { return heap_.alloc(bytes, s); }
  void free(void* ptr, std::size_t bytes, device::host::stream* s) override {
    dev_.host_func(s, [this, ptr, bytes, s] { heap_.free(ptr, bytes, s); });
  }

 private:
  device::host::device& dev_;
  testkit::heap_memory heap_;
};

TEST(AttentionAndLstmChain, RunsOnAStreamWorkerWithTheSameBits) {
  testkit::heap_memory sync_mem;
  device::host::device sync_dev(device::host::device_options{true});
  context sync_ctx{sync_dev, nullptr, sync_mem};
  const auto reference = sequence_chain(sync_ctx);

  device::host::device async_dev;
  stream_ordered_memory async_mem(async_dev, 8, 4);
  device::host::stream* stream = async_dev.create_stream();
  context async_ctx{async_dev, stream, async_mem};
  const auto on_worker = sequence_chain(async_ctx);
  async_dev.synchronize();
  async_dev.destroy_stream(stream);
  EXPECT_TRUE(bit_identical(reference, on_worker));
  for (float v : reference) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace sublinear::workloads
