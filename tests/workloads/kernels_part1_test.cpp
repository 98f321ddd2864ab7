// Tests of the workload kernel library, part 1: GEMM, linear, convolution, BatchNorm, ReLU,
// residual add, pooling, softmax cross-entropy, dropout, optimizers, fill and copies.
// Every backward op is checked against central differences of its forward op (see
// Note [Gradient check] in gradcheck.hpp), and every check is also shown to reject the
// negated gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "workloads/kernels/activation.hpp"
#include "workloads/kernels/batchnorm.hpp"
#include "workloads/kernels/conv2d.hpp"
#include "workloads/kernels/dropout.hpp"
#include "workloads/kernels/elementwise.hpp"
#include "workloads/kernels/gemm.hpp"
#include "workloads/kernels/linear.hpp"
#include "workloads/kernels/loss.hpp"
#include "workloads/kernels/optimizer.hpp"
#include "workloads/kernels/pooling.hpp"
#include "sublinear/error.hpp"
#include "workloads/gradcheck.hpp"

namespace sublinear::workloads {
namespace {

using testkit::random_away_from_zero;
using testkit::random_values;

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class kernels_part1 : public testkit::workload_test {};

// ---- GEMM ------------------------------------------------------------------------------------

struct gemm_case {
  ops::transpose ta, tb;
  const char* name;
};

// C = alpha op(A) op(B) + beta C in double, row-major, same argument convention as ops::gemm.
std::vector<double> naive_gemm(const ops::gemm_args& g, const std::vector<float>& a, const std::vector<float>& b,
                               const std::vector<float>& c) {
  std::vector<double> out(c.begin(), c.end());
  const bool ta = g.trans_a == ops::transpose::trans, tb = g.trans_b == ops::transpose::trans;
  for (std::int64_t i = 0; i < g.m; ++i) {
    for (std::int64_t j = 0; j < g.n; ++j) {
      double acc = 0.0;
      for (std::int64_t k = 0; k < g.k; ++k) {
        const double av = ta ? a[static_cast<std::size_t>(k * g.lda + i)] : a[static_cast<std::size_t>(i * g.lda + k)];
        const double bv = tb ? b[static_cast<std::size_t>(j * g.ldb + k)] : b[static_cast<std::size_t>(k * g.ldb + j)];
        acc += av * bv;
      }
      auto& cv = out[static_cast<std::size_t>(i * g.ldc + j)];
      cv = g.alpha * acc + (g.beta == 0.0f ? 0.0 : g.beta * cv);
    }
  }
  return out;
}

TEST_F(kernels_part1, GemmMatchesNaiveProductForEveryTransposeAndAlphaBeta) {
  // Sizes cross every blocking edge (MC 64, KC 256, NC 512, MR 4, NR 8) and leading
  // dimensions exceed the row widths.
  const std::int64_t m = 70, n = 523, k = 300;
  const gemm_case cases[] = {{ops::transpose::none, ops::transpose::none, "nn"},
                             {ops::transpose::none, ops::transpose::trans, "nt"},
                             {ops::transpose::trans, ops::transpose::none, "tn"}};
  const std::pair<float, float> scalars[] = {{1.0f, 0.0f}, {0.5f, -2.0f}, {-1.5f, 1.0f}};
  for (const auto& cs : cases) {
    for (const auto& [alpha, beta] : scalars) {
      ops::gemm_args g;
      g.trans_a = cs.ta;
      g.trans_b = cs.tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.alpha = alpha;
      g.beta = beta;
      g.lda = (cs.ta == ops::transpose::trans ? m : k) + 3;
      g.ldb = (cs.tb == ops::transpose::trans ? k : n) + 5;
      g.ldc = n + 2;
      const auto a_rows = cs.ta == ops::transpose::trans ? k : m;
      const auto b_rows = cs.tb == ops::transpose::trans ? n : k;
      auto a = random_values(static_cast<std::size_t>(a_rows * g.lda), 11);
      auto b = random_values(static_cast<std::size_t>(b_rows * g.ldb), 12);
      auto c = random_values(static_cast<std::size_t>(m * g.ldc), 13);
      if (beta == 0.0f) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
      tensor da = upload(a, {a_rows, g.lda}), db = upload(b, {b_rows, g.ldb}), dc = upload(c, {m, g.ldc});
      g.a = da.data;
      g.b = db.data;
      g.c = dc.data;
      ops::gemm(ctx_, g);
      const auto got = download(dc);
      const auto want = naive_gemm(g, a, b, c);
      std::size_t bad = 0;
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < g.ldc; ++j) {
          const auto at = static_cast<std::size_t>(i * g.ldc + j);
          if (j >= n) {  // past the row: untouched
            if (!bit_identical({got[at]}, {c[at]})) ++bad;
            continue;
          }
          if (!(std::fabs(got[at] - want[at]) <= 1e-4 * (1.0 + std::fabs(want[at])) * std::sqrt(double(k)))) ++bad;
        }
      }
      EXPECT_EQ(bad, 0u) << cs.name << " alpha " << alpha << " beta " << beta;
      release(da);
      release(db);
      release(dc);
    }
  }
}

TEST_F(kernels_part1, GemmBatchesRunInOrderSoZeroStrideCAccumulates) {
  const std::int64_t batch = 3, m = 5, n = 6, k = 7;
  auto a = random_values(static_cast<std::size_t>(batch * m * k), 21);
  auto b = random_values(static_cast<std::size_t>(batch * k * n), 22);
  auto c0 = random_values(static_cast<std::size_t>(m * n), 23);
  tensor da = upload(a, {batch, m, k}), db = upload(b, {batch, k, n}), dc = upload(c0, {m, n});
  ops::gemm_args g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = da.data;
  g.lda = k;
  g.b = db.data;
  g.ldb = n;
  g.c = dc.data;
  g.ldc = n;
  g.beta = 1.0f;
  g.batch = batch;
  g.stride_a = m * k;
  g.stride_b = k * n;
  g.stride_c = 0;
  ops::gemm(ctx_, g);
  const auto got = download(dc);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double want = c0[static_cast<std::size_t>(i * n + j)];
      for (std::int64_t bi = 0; bi < batch; ++bi) {
        for (std::int64_t kk = 0; kk < k; ++kk) {
          want += double(a[static_cast<std::size_t>(bi * m * k + i * k + kk)]) *
                  b[static_cast<std::size_t>(bi * k * n + kk * n + j)];
        }
      }
      EXPECT_NEAR(got[static_cast<std::size_t>(i * n + j)], want, 1e-4) << i << "," << j;
    }
  }
}

TEST_F(kernels_part1, GemmRejectsTransposingBothOperands) {
  ops::gemm_args g;
  g.trans_a = g.trans_b = ops::transpose::trans;
  g.m = g.n = g.k = 1;
  g.lda = g.ldb = g.ldc = 1;
  EXPECT_THROW(ops::gemm(ctx_, g), config_error);
}

TEST_F(kernels_part1, GemmIsBitIdenticalAtEveryBufferOffset) {
  // The same problem placed at 0..3 floats past an aligned address: vector loop peeling
  // must not change any bit.
  const std::int64_t m = 67, n = 133, k = 261;
  const auto a = random_values(static_cast<std::size_t>(m * k), 31);
  const auto b = random_values(static_cast<std::size_t>(k * n), 32);
  std::vector<float> reference;
  for (std::int64_t shift = 0; shift < 4; ++shift) {
    tensor da = zeros({m * k + 4}), db = zeros({k * n + 4}), dc = zeros({m * n + 4});
    ctx_.dev.memcpy_async(da.data + shift, a.data(), a.size() * sizeof(float), nullptr);
    ctx_.dev.memcpy_async(db.data + (3 - shift), b.data(), b.size() * sizeof(float), nullptr);
    ops::gemm_args g;
    g.trans_b = ops::transpose::none;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = da.data + shift;
    g.lda = k;
    g.b = db.data + (3 - shift);
    g.ldb = n;
    g.c = dc.data + ((shift + 1) % 4);
    g.ldc = n;
    ops::gemm(ctx_, g);
    auto all = download(dc);
    std::vector<float> got(all.begin() + (shift + 1) % 4, all.begin() + (shift + 1) % 4 + m * n);
    if (shift == 0) {
      reference = got;
    } else {
      EXPECT_TRUE(bit_identical(got, reference)) << "shift " << shift;
    }
  }
}

// ---- linear ----------------------------------------------------------------------------------

TEST_F(kernels_part1, LinearGradientsMatchFiniteDifferencesAndAccumulate) {
  tensor x = random({3, 2, 5}, 41);  // leading dims flatten to 6 rows
  tensor w = random({4, 5}, 42);
  tensor b = random({4}, 43);
  const auto wy = random_values(3 * 2 * 4, 44);
  auto loss = [&] {
    tensor y = ops::linear_forward(ctx_, x, w, &b);
    EXPECT_EQ(y.shape, (std::vector<std::int64_t>{3, 2, 4}));
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor dy = upload(wy, {3, 2, 4});
  const auto dw0 = random_values(20, 45), db0 = random_values(4, 46);
  tensor dw = upload(dw0, {4, 5}), db = upload(db0, {4});
  tensor dx = ops::linear_backward(ctx_, x, w, dy, dw, &db);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
  EXPECT_TRUE(gradcheck(w, minus(download(dw), dw0), loss, "dW"));
  EXPECT_TRUE(gradcheck(b, minus(download(db), db0), loss, "db"));
}

TEST_F(kernels_part1, LinearBackwardWithoutDxOnlyAccumulatesParameterGradients) {
  tensor x = random({2, 3}, 51), w = random({2, 3}, 52), dy = random({2, 2}, 53);
  tensor dw = zeros({2, 3});
  const auto before = mem_.allocs();
  tensor dx = ops::linear_backward(ctx_, x, w, dy, dw, nullptr, /*need_dx=*/false);
  EXPECT_EQ(dx.data, nullptr);
  EXPECT_EQ(mem_.allocs(), before);
  const auto got = download(dw);
  const auto xs = download(x), dys = download(dy);
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(got[o * 3 + i], dys[o] * xs[i] + dys[2 + o] * xs[3 + i], 1e-6);
    }
  }
}

// ---- convolution -----------------------------------------------------------------------------

std::vector<double> naive_conv(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                               std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t wd, std::int64_t oc,
                               std::int64_t kh, std::int64_t kw, const ops::conv2d_options& o) {
  const std::int64_t oh = (h + 2 * o.pad_h - kh) / o.stride_h + 1, ow = (wd + 2 * o.pad_w - kw) / o.stride_w + 1;
  std::vector<double> y(static_cast<std::size_t>(n * oc * oh * ow));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t f = 0; f < oc; ++f)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double acc = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(f)];
          for (std::int64_t ci = 0; ci < c; ++ci)
            for (std::int64_t ky = 0; ky < kh; ++ky)
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t iy = oy * o.stride_h - o.pad_h + ky, ix = ox * o.stride_w - o.pad_w + kx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += double(x[static_cast<std::size_t>(((b * c + ci) * h + iy) * wd + ix)]) *
                       w[static_cast<std::size_t>(((f * c + ci) * kh + ky) * kw + kx)];
              }
          y[static_cast<std::size_t>(((b * oc + f) * oh + oy) * ow + ox)] = acc;
        }
  return y;
}

TEST_F(kernels_part1, Conv2dForwardMatchesDirectConvolution) {
  const auto opt = ops::conv2d_options{2, 1, 1, 2};  // stride 2x1, padding 1x2
  tensor x = random({2, 3, 7, 6}, 61), w = random({4, 3, 3, 2}, 62), b = random({4}, 63);
  tensor y = ops::conv2d_forward(ctx_, x, w, &b, opt);
  EXPECT_EQ(y.shape, ops::conv2d_output_shape(x, w, opt));
  EXPECT_EQ(y.shape, (std::vector<std::int64_t>{2, 4, 4, 9}));
  const auto want = naive_conv(download(x), download(w), download(b), 2, 3, 7, 6, 4, 3, 2, opt);
  const auto got = download(y);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

// The lowering has three paths (Note [Lowering at memory speed]): a "same" convolution
// (stride 1, as many output columns as input columns) copied plane by plane, stride 1
// copied row by row, and larger strides gathered. Every geometry below is checked against
// the direct definition, forward and both gradients, including padding wider than the
// image and kernels that see no input column at all on some offsets.
TEST_F(kernels_part1, Conv2dLoweringMatchesTheDirectDefinitionOnEveryPath) {
  struct geometry {
    std::int64_t n, c, h, w, oc, kh, kw;
    ops::conv2d_options opt;
  };
  const geometry cases[] = {
      {2, 3, 6, 5, 4, 3, 3, ops::conv2d_options::square(1, 1)},  // same: 3x3, pad 1
      {2, 2, 4, 4, 3, 1, 1, ops::conv2d_options::square(1, 0)},  // same: 1x1
      {1, 2, 5, 6, 2, 3, 3, ops::conv2d_options{1, 1, 0, 1}},    // same width, not height
      {1, 2, 6, 5, 2, 5, 3, ops::conv2d_options{1, 1, 2, 1}},    // same, taller kernel
      {2, 2, 1, 1, 3, 3, 3, ops::conv2d_options::square(1, 1)},  // same, a 1x1 image
      {1, 2, 5, 4, 2, 3, 3, ops::conv2d_options::square(1, 0)},  // stride 1, no padding
      {1, 2, 4, 3, 2, 3, 3, ops::conv2d_options::square(1, 2)},  // stride 1, wider output
      {2, 3, 7, 7, 2, 3, 3, ops::conv2d_options::square(2, 1)},  // stride 2
      {1, 2, 5, 7, 2, 2, 3, ops::conv2d_options{1, 2, 0, 1}},    // stride 1 x 2
  };
  for (const geometry& g : cases) {
    const std::string where = "x " + std::to_string(g.n) + "x" + std::to_string(g.c) + "x" + std::to_string(g.h) +
                              "x" + std::to_string(g.w) + ", kernel " + std::to_string(g.kh) + "x" +
                              std::to_string(g.kw) + ", stride " + std::to_string(g.opt.stride_h) + "x" +
                              std::to_string(g.opt.stride_w) + ", pad " + std::to_string(g.opt.pad_h) + "x" +
                              std::to_string(g.opt.pad_w);
    SCOPED_TRACE(where);
    tensor x = random({g.n, g.c, g.h, g.w}, 101), w = random({g.oc, g.c, g.kh, g.kw}, 102);
    const auto out = ops::conv2d_output_shape(x, w, g.opt);
    const std::int64_t oh = out[2], ow = out[3];
    const auto xs = download(x), ws = download(w);
    tensor y = ops::conv2d_forward(ctx_, x, w, nullptr, g.opt);
    const auto want = naive_conv(xs, ws, {}, g.n, g.c, g.h, g.w, g.oc, g.kh, g.kw, g.opt);
    const auto got = download(y);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "y " << i;

    const auto dys = random_values(static_cast<std::size_t>(g.n * g.oc * oh * ow), 103);
    tensor dy = upload(dys, out);
    tensor dw = zeros({g.oc, g.c, g.kh, g.kw});
    tensor dx = ops::conv2d_backward(ctx_, x, w, dy, g.opt, dw, nullptr);
    std::vector<double> want_dx(xs.size(), 0.0), want_dw(ws.size(), 0.0);
    for (std::int64_t b = 0; b < g.n; ++b)
      for (std::int64_t f = 0; f < g.oc; ++f)
        for (std::int64_t oy = 0; oy < oh; ++oy)
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const double d = dys[static_cast<std::size_t>(((b * g.oc + f) * oh + oy) * ow + ox)];
            for (std::int64_t ci = 0; ci < g.c; ++ci)
              for (std::int64_t ky = 0; ky < g.kh; ++ky)
                for (std::int64_t kx = 0; kx < g.kw; ++kx) {
                  const std::int64_t iy = oy * g.opt.stride_h - g.opt.pad_h + ky;
                  const std::int64_t ix = ox * g.opt.stride_w - g.opt.pad_w + kx;
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  const auto xi = static_cast<std::size_t>(((b * g.c + ci) * g.h + iy) * g.w + ix);
                  const auto wi = static_cast<std::size_t>(((f * g.c + ci) * g.kh + ky) * g.kw + kx);
                  want_dx[xi] += d * ws[wi];
                  want_dw[wi] += d * xs[xi];
                }
          }
    const auto got_dx = download(dx), got_dw = download(dw);
    for (std::size_t i = 0; i < want_dx.size(); ++i) EXPECT_NEAR(got_dx[i], want_dx[i], 1e-5) << "dx " << i;
    for (std::size_t i = 0; i < want_dw.size(); ++i) EXPECT_NEAR(got_dw[i], want_dw[i], 1e-5) << "dW " << i;
    release(y);
    release(dy);
    release(dw);
    release(dx);
    release(x);
    release(w);
  }
}

TEST_F(kernels_part1, Conv2dGradientsMatchFiniteDifferencesWithStrideAndPadding) {
  const auto opt = ops::conv2d_options::square(2, 1);
  tensor x = random({2, 3, 5, 5}, 71), w = random({4, 3, 3, 3}, 72), b = random({4}, 73);
  const auto out = ops::conv2d_output_shape(x, w, opt);
  const auto wy = random_values(static_cast<std::size_t>(out[0] * out[1] * out[2] * out[3]), 74);
  auto loss = [&] {
    tensor y = ops::conv2d_forward(ctx_, x, w, &b, opt);
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor dy = upload(wy, out);
  const auto dw0 = random_values(4 * 27, 75), db0 = random_values(4, 76);
  tensor dw = upload(dw0, {4, 3, 3, 3}), db = upload(db0, {4});
  tensor dx = ops::conv2d_backward(ctx_, x, w, dy, opt, dw, &db);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
  EXPECT_TRUE(gradcheck(w, minus(download(dw), dw0), loss, "dW"));
  EXPECT_TRUE(gradcheck(b, minus(download(db), db0), loss, "db"));
}

TEST_F(kernels_part1, Conv2dGradientsMatchFiniteDifferencesWithRectangularKernelAndNoBias) {
  const auto opt = ops::conv2d_options{1, 1, 0, 0};
  tensor x = random({1, 2, 4, 5}, 81), w = random({3, 2, 2, 3}, 82);
  const auto out = ops::conv2d_output_shape(x, w, opt);
  const auto wy = random_values(static_cast<std::size_t>(out[0] * out[1] * out[2] * out[3]), 83);
  auto loss = [&] {
    tensor y = ops::conv2d_forward(ctx_, x, w, nullptr, opt);
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor dy = upload(wy, out);
  tensor dw = zeros({3, 2, 2, 3});
  tensor dx = ops::conv2d_backward(ctx_, x, w, dy, opt, dw, nullptr);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
  EXPECT_TRUE(gradcheck(w, download(dw), loss, "dW"));
}

TEST_F(kernels_part1, Conv2dAllocatesAWorkspaceAroundEachPassAndFreesIt) {
  const auto opt = ops::conv2d_options::square(1, 1);
  tensor x = random({2, 3, 6, 6}, 91), w = random({4, 3, 3, 3}, 92);
  const std::size_t ws = ops::conv2d_workspace_bytes(x, w, opt);
  EXPECT_EQ(ws, std::size_t{27} * 36 * sizeof(float)) << "one sample's lowering (Note [Convolution workspace])";

  mem_.clear_events();
  tensor y = ops::conv2d_forward(ctx_, x, w, nullptr, opt);
  auto ev = mem_.events();
  ASSERT_EQ(ev.size(), 3u);  // y, workspace, workspace freed
  EXPECT_TRUE(ev[0].alloc && ev[0].ptr == y.data);
  EXPECT_TRUE(ev[1].alloc && ev[1].bytes == ws);
  EXPECT_TRUE(!ev[2].alloc && ev[2].ptr == ev[1].ptr && ev[2].bytes == ws);

  tensor dw = zeros({4, 3, 3, 3});
  mem_.clear_events();
  tensor dx = ops::conv2d_backward(ctx_, x, w, y, opt, dw, nullptr);
  ev = mem_.events();
  ASSERT_EQ(ev.size(), 5u);  // wgrad workspace, freed; dx; dgrad workspace, freed
  EXPECT_TRUE(ev[0].alloc && ev[0].bytes == ws);
  EXPECT_TRUE(!ev[1].alloc && ev[1].ptr == ev[0].ptr);
  EXPECT_TRUE(ev[2].alloc && ev[2].ptr == dx.data);
  EXPECT_TRUE(ev[3].alloc && ev[3].bytes == ws);
  EXPECT_TRUE(!ev[4].alloc && ev[4].ptr == ev[3].ptr);
}

// ---- BatchNorm -------------------------------------------------------------------------------

TEST_F(kernels_part1, BatchNormGradientsMatchFiniteDifferences) {
  tensor x = random({4, 3, 2, 2}, 101, -2.0f, 2.0f);
  tensor gamma = random({3}, 102, 0.5f, 1.5f), beta = random({3}, 103);
  tensor rm = zeros({3}), rv = zeros({3});
  const auto wy = random_values(48, 104);
  auto loss = [&] {
    auto r = ops::batchnorm2d_forward_train(ctx_, x, gamma, beta, rm, rv);
    const double l = project(r.y, wy);
    release(r.y);
    release(r.save_mean);
    release(r.save_invstd);
    return l;
  };
  auto r = ops::batchnorm2d_forward_train(ctx_, x, gamma, beta, rm, rv);
  tensor dy = upload(wy, {4, 3, 2, 2});
  const auto dg0 = random_values(3, 105), db0 = random_values(3, 106);
  tensor dgamma = upload(dg0, {3}), dbeta = upload(db0, {3});
  tensor dx = ops::batchnorm2d_backward(ctx_, x, gamma, r.save_mean, r.save_invstd, dy, dgamma, dbeta);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
  EXPECT_TRUE(gradcheck(gamma, minus(download(dgamma), dg0), loss, "dgamma"));
  EXPECT_TRUE(gradcheck(beta, minus(download(dbeta), db0), loss, "dbeta"));
}

TEST_F(kernels_part1, BatchNormTrainingUpdatesRunningStatisticsInPlace) {
  const std::int64_t n = 3, c = 2, plane = 4;
  const auto xs = random_values(static_cast<std::size_t>(n * c * plane), 111, -1.0f, 3.0f);
  tensor x = upload(xs, {n, c, 2, 2});
  tensor gamma = upload({1.0f, 2.0f}, {2}), beta = upload({0.0f, -1.0f}, {2});
  const std::vector<float> rm0 = {0.5f, -0.25f}, rv0 = {2.0f, 0.75f};
  tensor rm = upload(rm0, {2}), rv = upload(rv0, {2});
  float* const rm_ptr = rm.data;
  const float momentum = 0.1f;
  auto r = ops::batchnorm2d_forward_train(ctx_, x, gamma, beta, rm, rv, momentum, 1e-5f);
  EXPECT_EQ(rm.data, rm_ptr);
  const auto got_rm = download(rm), got_rv = download(rv);
  const auto mean = download(r.save_mean), invstd = download(r.save_invstd), y = download(r.y);
  for (std::int64_t ci = 0; ci < c; ++ci) {
    double s = 0, sq = 0;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < plane; ++i) s += xs[static_cast<std::size_t>((b * c + ci) * plane + i)];
    const double mu = s / (n * plane);
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < plane; ++i) {
        const double d = xs[static_cast<std::size_t>((b * c + ci) * plane + i)] - mu;
        sq += d * d;
      }
    const double var = sq / (n * plane), unbiased = sq / (n * plane - 1);
    const auto k = static_cast<std::size_t>(ci);
    EXPECT_NEAR(mean[k], mu, 1e-6);
    EXPECT_NEAR(invstd[k], 1.0 / std::sqrt(var + 1e-5), 1e-5);
    EXPECT_NEAR(got_rm[k], (1 - momentum) * rm0[k] + momentum * mu, 1e-6);
    EXPECT_NEAR(got_rv[k], (1 - momentum) * rv0[k] + momentum * unbiased, 1e-5);
    // The normalized output has the batch mean beta and standard deviation gamma.
    double ys = 0, ysq = 0;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < plane; ++i) ys += y[static_cast<std::size_t>((b * c + ci) * plane + i)];
    const double ymu = ys / (n * plane);
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < plane; ++i) {
        const double d = y[static_cast<std::size_t>((b * c + ci) * plane + i)] - ymu;
        ysq += d * d;
      }
    EXPECT_NEAR(ymu, ci == 0 ? 0.0 : -1.0, 1e-5);
    EXPECT_NEAR(std::sqrt(ysq / (n * plane)), ci == 0 ? 1.0 : 2.0, 1e-3);
  }
  // A second call moves the running statistics again: the update is a side effect.
  auto r2 = ops::batchnorm2d_forward_train(ctx_, x, gamma, beta, rm, rv, momentum, 1e-5f);
  const auto rm2 = download(rm);
  EXPECT_NEAR(rm2[0], (1 - momentum) * got_rm[0] + momentum * mean[0], 1e-6);
}

TEST_F(kernels_part1, BatchNormEvalUsesRunningStatistics) {
  tensor x = upload({1.0f, 3.0f, -2.0f, 5.0f}, {2, 2});  // [N=2, C=2]
  tensor gamma = upload({2.0f, 1.0f}, {2}), beta = upload({0.5f, 0.0f}, {2});
  tensor rm = upload({1.0f, 1.0f}, {2}), rv = upload({4.0f, 16.0f}, {2});
  tensor y = ops::batchnorm2d_forward_eval(ctx_, x, gamma, beta, rm, rv, 0.0f);
  const auto got = download(y);
  EXPECT_FLOAT_EQ(got[0], 2.0f * (1.0f - 1.0f) / 2.0f + 0.5f);
  EXPECT_FLOAT_EQ(got[1], (3.0f - 1.0f) / 4.0f);
  EXPECT_FLOAT_EQ(got[2], 2.0f * (-2.0f - 1.0f) / 2.0f + 0.5f);
  EXPECT_FLOAT_EQ(got[3], (5.0f - 1.0f) / 4.0f);
}

// ---- ReLU and residual add ---------------------------------------------------------------------

TEST_F(kernels_part1, ReluForwardOverwritesItsInput) {
  tensor x = upload({-1.0f, 2.0f, 0.0f, -0.5f, 3.0f}, {5});
  tensor y = ops::relu_inplace(ctx_, x);
  EXPECT_EQ(y.data, x.data);
  EXPECT_EQ(y.shape, x.shape);
  EXPECT_EQ(download(x), (std::vector<float>{0.0f, 2.0f, 0.0f, 0.0f, 3.0f}));
}

TEST_F(kernels_part1, ReluGradientMatchesFiniteDifferences) {
  // Inputs stay 0.05 away from the kink, farther than the 0.01 perturbation.
  tensor x = upload(random_away_from_zero(40, 121, 0.05f), {4, 10});
  const auto wy = random_values(40, 122);
  auto loss = [&] {
    tensor y = ops::relu_inplace(ctx_, ops::copy(ctx_, x));  // keep x itself intact
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor y = ops::relu_inplace(ctx_, ops::copy(ctx_, x));
  tensor dy = upload(wy, {4, 10});
  tensor dx = ops::relu_backward(ctx_, y, dy);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
}

TEST_F(kernels_part1, AddGradientsMatchFiniteDifferences) {
  tensor a = random({3, 4}, 131), b = random({3, 4}, 132);
  const auto wy = random_values(12, 133);
  auto loss = [&] {
    tensor y = ops::add(ctx_, a, b);
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor dy = upload(wy, {3, 4});
  auto [da, db] = ops::add_backward(ctx_, dy);
  EXPECT_NE(da.data, db.data);
  EXPECT_TRUE(gradcheck(a, download(da), loss, "da"));
  EXPECT_TRUE(gradcheck(b, download(db), loss, "db"));
}

TEST_F(kernels_part1, AccumulateAddsIntoItsDestination) {
  tensor dst = upload({1.0f, 2.0f, 3.0f}, {3}), src = upload({0.5f, -2.0f, 4.0f}, {3});
  ops::accumulate(ctx_, dst, src);
  EXPECT_EQ(download(dst), (std::vector<float>{1.5f, 0.0f, 7.0f}));
  EXPECT_EQ(download(src), (std::vector<float>{0.5f, -2.0f, 4.0f}));
}

// ---- pooling -----------------------------------------------------------------------------------

// Distinct values 0.05 apart in a fixed shuffled order: no perturbation of 0.01 changes
// any window's argmax.
std::vector<float> distinct_values(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = -1.0f + 0.05f * static_cast<float>(i);
  std::mt19937 rng(seed);
  for (std::size_t i = n - 1; i > 0; --i) std::swap(v[i], v[rng() % (i + 1)]);
  return v;
}

TEST_F(kernels_part1, MaxPoolForwardTakesEachWindowsMaximum) {
  // 1x1x4x4, 3x3 windows, stride 2, padding 1 -> 2x2
  tensor x = upload({1, 2, 3, 4,  //
                     5, 6, 7, 8,  //
                     9, 10, 11, 12,  //
                     13, 14, 15, -16},
                    {1, 1, 4, 4});
  tensor y = ops::maxpool2d_forward(ctx_, x, ops::pool2d_options::square(3, 2, 1));
  EXPECT_EQ(y.shape, (std::vector<std::int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(download(y), (std::vector<float>{6, 8, 14, 15}));
}

TEST_F(kernels_part1, MaxPoolGradientMatchesFiniteDifferencesWithOverlappingWindows) {
  const auto opt = ops::pool2d_options::square(3, 2, 1);
  tensor x = upload(distinct_values(2 * 2 * 5 * 5, 141), {2, 2, 5, 5});
  const auto wy = random_values(2 * 2 * 3 * 3, 142);
  auto loss = [&] {
    tensor y = ops::maxpool2d_forward(ctx_, x, opt);
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor dy = upload(wy, {2, 2, 3, 3});
  tensor dx = ops::maxpool2d_backward(ctx_, x, dy, opt);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
}

TEST_F(kernels_part1, GlobalAvgPoolGradientMatchesFiniteDifferences) {
  tensor x = random({2, 3, 2, 3}, 151);
  const auto wy = random_values(6, 152);
  auto loss = [&] {
    tensor y = ops::global_avgpool_forward(ctx_, x);
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor y = ops::global_avgpool_forward(ctx_, x);
  EXPECT_EQ(y.shape, (std::vector<std::int64_t>{2, 3}));
  const auto xs = download(x), ys = download(y);
  EXPECT_NEAR(ys[4], (xs[24] + xs[25] + xs[26] + xs[27] + xs[28] + xs[29]) / 6.0, 1e-6);
  tensor dy = upload(wy, {2, 3});
  tensor dx = ops::global_avgpool_backward(ctx_, dy, x.shape);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
}

// ---- softmax cross-entropy --------------------------------------------------------------------

TEST_F(kernels_part1, SoftmaxCrossEntropyForwardIsTheMeanNegativeLogLikelihood) {
  const auto z = random_values(3 * 4, 161, -3.0f, 3.0f);
  const std::vector<float> labels = {2, 0, 3};
  tensor logits = upload(z, {3, 4}), lab = upload(labels, {3});
  tensor loss = ops::softmax_cross_entropy_forward(ctx_, logits, lab);
  EXPECT_EQ(loss.shape, (std::vector<std::int64_t>{1}));
  double want = 0;
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += std::exp(double(z[static_cast<std::size_t>(r * 4 + j)]));
    want += std::log(s) - z[static_cast<std::size_t>(r * 4) + static_cast<std::size_t>(labels[static_cast<std::size_t>(r)])];
  }
  EXPECT_NEAR(download(loss)[0], want / 3, 1e-6);
}

TEST_F(kernels_part1, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  tensor logits = random({4, 5}, 171, -2.0f, 2.0f);
  tensor labels = upload({0, 3, 4, 1}, {4});
  auto loss = [&] {
    tensor l = ops::softmax_cross_entropy_forward(ctx_, logits, labels);
    const double v = download(l)[0];
    release(l);
    return v;
  };
  tensor dz = ops::softmax_cross_entropy_backward(ctx_, logits, labels);
  EXPECT_TRUE(gradcheck(logits, download(dz), loss, "dlogits"));

  tensor dz3 = ops::softmax_cross_entropy_backward(ctx_, logits, labels, 3.0f);
  const auto g1 = download(dz), g3 = download(dz3);
  for (std::size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g3[i], 3.0f * g1[i], 1e-6);
}

// ---- dropout -----------------------------------------------------------------------------------

TEST_F(kernels_part1, PhiloxMatchesPublishedKnownAnswers) {
  // Random123's known-answer vectors for philox4x32-10.
  EXPECT_EQ(ops::philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<std::uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(ops::philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (std::array<std::uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(ops::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (std::array<std::uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

std::vector<bool> mask_of(const std::vector<float>& y) {
  std::vector<bool> m(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) m[i] = y[i] != 0.0f;
  return m;
}

TEST_F(kernels_part1, DropoutWithTheSameSeedAndOffsetReproducesTheMask) {
  tensor ones = upload(std::vector<float>(1000, 1.0f), {1000});
  tensor a = ops::dropout_forward(ctx_, ones, 0.5f, {7, 3});
  tensor b = ops::dropout_forward(ctx_, ones, 0.5f, {7, 3});
  EXPECT_TRUE(bit_identical(download(a), download(b)));
}

TEST_F(kernels_part1, DropoutWithAnotherOffsetOrSeedDrawsAnotherMask) {
  tensor ones = upload(std::vector<float>(1000, 1.0f), {1000});
  const auto base = mask_of(download(ops::dropout_forward(ctx_, ones, 0.5f, {7, 3})));
  const auto other_offset = mask_of(download(ops::dropout_forward(ctx_, ones, 0.5f, {7, 4})));
  const auto other_seed = mask_of(download(ops::dropout_forward(ctx_, ones, 0.5f, {8, 3})));
  auto differing = [](const std::vector<bool>& x, const std::vector<bool>& y) {
    std::size_t d = 0;
    for (std::size_t i = 0; i < x.size(); ++i) d += x[i] != y[i];
    return d;
  };
  // Independent masks at p = 0.5 differ in about half the places.
  EXPECT_GT(differing(base, other_offset), 400u);
  EXPECT_GT(differing(base, other_seed), 400u);
}

TEST_F(kernels_part1, DropoutKeepsAboutOneMinusPAndScalesWhatItKeeps) {
  const std::int64_t n = 100000;
  const float p = 0.3f;
  tensor x = random({n}, 181, 0.5f, 1.5f);
  const auto xs = download(x);
  const auto ys = download(ops::dropout_forward(ctx_, x, p, {99, 0}));
  std::size_t kept = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (ys[i] != 0.0f) {
      ++kept;
      EXPECT_EQ(ys[i], xs[i] * (1.0f / (1.0f - p)));
    }
  }
  // Binomial standard deviation is 0.00145; 0.01 is about 7 of them.
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01);
}

TEST_F(kernels_part1, DropoutWithPOneDropsEverythingAndPZeroKeepsEverything) {
  tensor x = random({64}, 185);
  EXPECT_EQ(download(ops::dropout_forward(ctx_, x, 1.0f, {1, 1})), std::vector<float>(64, 0.0f));
  EXPECT_TRUE(bit_identical(download(ops::dropout_forward(ctx_, x, 0.0f, {1, 1})), download(x)));
}

TEST_F(kernels_part1, DropoutGradientMatchesFiniteDifferences) {
  tensor x = random({5, 8}, 191);
  const auto wy = random_values(40, 192);
  const ops::rng_stream rng{1234, 5};
  auto loss = [&] {
    tensor y = ops::dropout_forward(ctx_, x, 0.4f, rng);
    const double l = project(y, wy);
    release(y);
    return l;
  };
  tensor dy = upload(wy, {5, 8});
  tensor dx = ops::dropout_backward(ctx_, dy, 0.4f, rng);
  EXPECT_TRUE(gradcheck(x, download(dx), loss, "dx"));
}

TEST_F(kernels_part1, RngStreamAdvancesItsOffsetPerCall) {
  ops::rng_stream s{42, 10};
  const auto first = s.next();
  const auto second = s.next();
  EXPECT_EQ(first.seed, 42u);
  EXPECT_EQ(first.offset, 10u);
  EXPECT_EQ(second.offset, 11u);
}

// ---- optimizers --------------------------------------------------------------------------------

struct param_set {
  std::vector<std::vector<float>> host;
  std::vector<tensor> dev;
};

param_set make_set(context& ctx, std::size_t count, std::uint64_t seed, float lo, float hi) {
  param_set s;
  for (std::size_t i = 0; i < count; ++i) {
    const auto n = static_cast<std::int64_t>(1 + (i * 7) % 13);  // sizes 1..13
    s.host.push_back(random_values(static_cast<std::size_t>(n), seed + i, lo, hi));
    s.dev.push_back(testkit::upload(ctx, s.host.back(), {n}));
  }
  return s;
}

TEST_F(kernels_part1, SgdStepMatchesAScalarLoopExactlyAcrossSeveralLaunches) {
  const std::size_t count = 2 * ops::kMultiTensorMax + 5;  // three launches
  auto w = make_set(ctx_, count, 1000, -1, 1);
  auto g = make_set(ctx_, count, 2000, -1, 1);
  auto buf = make_set(ctx_, count, 3000, -0.1f, 0.1f);
  const ops::sgd_options opt{0.05f, 0.9f, 1e-3f};
  const auto launches = ctx_.dev.launch_count();
  ops::sgd_step(ctx_, w.dev, g.dev, buf.dev, opt);
  EXPECT_EQ(ctx_.dev.launch_count() - launches, 3u);
  for (std::size_t t = 0; t < count; ++t) {
    auto& wh = w.host[t];
    auto& bh = buf.host[t];
    for (std::size_t i = 0; i < wh.size(); ++i) {
      const float gi = g.host[t][i] + opt.weight_decay * wh[i];
      bh[i] = opt.momentum * bh[i] + gi;
      wh[i] = wh[i] - opt.lr * bh[i];
    }
    EXPECT_TRUE(bit_identical(download(w.dev[t]), wh)) << "param " << t;
    EXPECT_TRUE(bit_identical(download(buf.dev[t]), bh)) << "momentum " << t;
  }
}

TEST_F(kernels_part1, AdamStepsMatchAScalarLoopExactlyAcrossSeveralLaunches) {
  const std::size_t count = ops::kMultiTensorMax + 3;  // two launches
  auto w = make_set(ctx_, count, 4000, -1, 1);
  auto g = make_set(ctx_, count, 5000, -1, 1);
  auto m = make_set(ctx_, count, 6000, 0, 0);
  auto v = make_set(ctx_, count, 7000, 0, 0);
  const ops::adam_options opt{1e-2f, 0.9f, 0.999f, 1e-8f, 1e-4f};
  for (std::int64_t step = 1; step <= 2; ++step) {
    const auto launches = ctx_.dev.launch_count();
    ops::adam_step(ctx_, w.dev, g.dev, m.dev, v.dev, step, opt);
    EXPECT_EQ(ctx_.dev.launch_count() - launches, 2u);
    const float bc1 = ops::adam_bias_correction(opt.beta1, step);
    const float bc2 = ops::adam_bias_correction(opt.beta2, step);
    EXPECT_FLOAT_EQ(bc1, step == 1 ? 0.1f : 0.19f);
    for (std::size_t t = 0; t < count; ++t) {
      for (std::size_t i = 0; i < w.host[t].size(); ++i) {
        float& wi = w.host[t][i];
        float& mi = m.host[t][i];
        float& vi = v.host[t][i];
        const float gi = g.host[t][i] + opt.weight_decay * wi;
        mi = opt.beta1 * mi + (1.0f - opt.beta1) * gi;
        vi = opt.beta2 * vi + (1.0f - opt.beta2) * (gi * gi);
        const float mhat = mi / bc1;
        const float vhat = vi / bc2;
        wi = wi - opt.lr * mhat / (std::sqrt(vhat) + opt.eps);
      }
      EXPECT_TRUE(bit_identical(download(w.dev[t]), w.host[t])) << "step " << step << " param " << t;
      EXPECT_TRUE(bit_identical(download(m.dev[t]), m.host[t])) << "step " << step << " m " << t;
      EXPECT_TRUE(bit_identical(download(v.dev[t]), v.host[t])) << "step " << step << " v " << t;
    }
  }
}

TEST_F(kernels_part1, OptimizerRejectsListsOfDifferentLengths) {
  tensor a = zeros({3}), b = zeros({3});
  std::vector<tensor> ps{a, b}, gs{a};
  EXPECT_THROW(ops::sgd_step(ctx_, ps, gs, ps, {}), config_error);
}

// ---- fill, init and copies ---------------------------------------------------------------------

TEST_F(kernels_part1, InitUniformIsSeededInRangeAndAddressIndependent) {
  tensor a = zeros({1000}), b = zeros({1003});
  ops::init_uniform(ctx_, a, -0.5f, 0.25f, 77, 2);
  tensor b_view{b.data + 3, {1000}};  // another alignment
  ops::init_uniform(ctx_, b_view, -0.5f, 0.25f, 77, 2);
  const auto av = download(a);
  EXPECT_TRUE(bit_identical(av, download(b_view)));
  EXPECT_TRUE(std::all_of(av.begin(), av.end(), [](float v) { return v >= -0.5f && v < 0.25f; }));
  ops::init_uniform(ctx_, b_view, -0.5f, 0.25f, 78, 2);
  EXPECT_FALSE(bit_identical(av, download(b_view)));
  EXPECT_EQ(av[5], -0.5f + 0.75f * ops::philox_uniform(77, 2, 5));
}

TEST_F(kernels_part1, FillCopyUploadAndDownloadRoundTrip) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f};
  tensor t = ops::upload(ctx_, values, {2, 2});
  EXPECT_EQ(ops::download(ctx_, t), values);
  tensor c = ops::copy(ctx_, t);
  EXPECT_NE(c.data, t.data);
  EXPECT_EQ(c.shape, t.shape);
  ops::fill(ctx_, t, 9.0f);
  EXPECT_EQ(ops::download(ctx_, t), std::vector<float>(4, 9.0f));
  EXPECT_EQ(ops::download(ctx_, c), values);
  ops::zero(ctx_, c);
  EXPECT_EQ(ops::download(ctx_, c), std::vector<float>(4, 0.0f));
  EXPECT_THROW(ops::upload(ctx_, values, {3}), config_error);
}

// ---- address independence of a whole training step ----------------------------------------------

// A small network through every part-1 op, forward and backward and an SGD step, returning
// every output and gradient it produced.
std::vector<std::vector<float>> training_step(context& ctx) {
  std::vector<std::vector<float>> out;
  auto keep = [&](const tensor& t) { out.push_back(ops::download(ctx, t)); };
  auto param = [&](std::vector<std::int64_t> shape, std::uint64_t seed, float bound) {
    tensor t = ctx.empty(std::move(shape));
    ops::init_uniform(ctx, t, -bound, bound, seed);
    return t;
  };
  auto zeros_like = [&](const tensor& t) {
    tensor z = ctx.empty(t.shape);
    ops::zero(ctx, z);
    return z;
  };
  tensor x = param({4, 3, 12, 12}, 1, 1.0f);
  tensor labels = ops::upload(ctx, {0, 4, 2, 1}, {4});
  tensor w1 = param({8, 3, 3, 3}, 2, 0.3f), b1 = param({8}, 3, 0.1f);
  tensor gamma = param({8}, 4, 1.0f), beta = param({8}, 5, 0.1f);
  tensor rm = zeros_like(gamma), rv = zeros_like(gamma);
  tensor w2 = param({8, 8, 1, 1}, 6, 0.3f);
  tensor fc = param({5, 8}, 7, 0.3f), fcb = param({5}, 8, 0.1f);
  const auto conv1 = ops::conv2d_options::square(1, 1);
  const auto conv2 = ops::conv2d_options::square(1, 0);
  const auto pool = ops::pool2d_options::square(2, 2, 0);
  const ops::rng_stream rng{11, 0};

  tensor c1 = ops::conv2d_forward(ctx, x, w1, &b1, conv1);
  auto bn = ops::batchnorm2d_forward_train(ctx, c1, gamma, beta, rm, rv);
  tensor r = ops::relu_inplace(ctx, bn.y);
  tensor p = ops::maxpool2d_forward(ctx, r, pool);
  tensor c2 = ops::conv2d_forward(ctx, p, w2, nullptr, conv2);
  tensor s = ops::add(ctx, c2, p);
  tensor g = ops::global_avgpool_forward(ctx, s);
  tensor d = ops::dropout_forward(ctx, g, 0.25f, rng);
  tensor z = ops::linear_forward(ctx, d, fc, &fcb);
  tensor loss = ops::softmax_cross_entropy_forward(ctx, z, labels);
  for (const tensor* t : {&c1, &r, &p, &c2, &s, &g, &d, &z, &loss, &rm, &rv}) keep(*t);

  tensor dw1 = zeros_like(w1), db1 = zeros_like(b1), dgamma = zeros_like(gamma), dbeta = zeros_like(beta);
  tensor dw2 = zeros_like(w2), dfc = zeros_like(fc), dfcb = zeros_like(fcb);
  tensor dz = ops::softmax_cross_entropy_backward(ctx, z, labels);
  tensor dd = ops::linear_backward(ctx, d, fc, dz, dfc, &dfcb);
  tensor dg = ops::dropout_backward(ctx, dd, 0.25f, rng);
  tensor ds = ops::global_avgpool_backward(ctx, dg, s.shape);
  auto [dc2, dp_skip] = ops::add_backward(ctx, ds);
  tensor dp = ops::conv2d_backward(ctx, p, w2, dc2, conv2, dw2, nullptr);
  ops::accumulate(ctx, dp, dp_skip);
  tensor dr = ops::maxpool2d_backward(ctx, r, dp, pool);
  tensor dbn = ops::relu_backward(ctx, r, dr);
  tensor dc1 = ops::batchnorm2d_backward(ctx, c1, gamma, bn.save_mean, bn.save_invstd, dbn, dgamma, dbeta);
  tensor dx = ops::conv2d_backward(ctx, x, w1, dc1, conv1, dw1, &db1);
  for (const tensor* t : {&dz, &dd, &dg, &ds, &dp, &dr, &dbn, &dc1, &dx, &dw1, &db1, &dgamma, &dbeta, &dw2, &dfc, &dfcb})
    keep(*t);

  std::vector<tensor> params{w1, b1, gamma, beta, w2, fc, fcb};
  std::vector<tensor> grads{dw1, db1, dgamma, dbeta, dw2, dfc, dfcb};
  std::vector<tensor> bufs;
  for (const auto& t : params) bufs.push_back(zeros_like(t));
  ops::sgd_step(ctx, params, grads, bufs, {0.1f, 0.9f, 1e-4f});
  for (const auto& t : params) keep(t);
  return out;
}

TEST_F(kernels_part1, TrainingStepIsBitIdenticalWhereverItsBuffersLive) {
  const auto reference = training_step(ctx_);
  // A finite, non-trivial loss, so the comparison below compares real numbers.
  ASSERT_TRUE(std::isfinite(reference[8][0]));
  EXPECT_GT(reference[8][0], 0.5f);
  const std::pair<std::size_t, std::size_t> placements[] = {{4, 0}, {12, 8}, {36, 4}, {60, 20}};
  for (const auto& [misalign, step] : placements) {
    testkit::heap_memory other(misalign, step);
    context ctx{dev_, nullptr, other};
    const auto got = training_step(ctx);
    ASSERT_EQ(got.size(), reference.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(bit_identical(got[i], reference[i])) << "result " << i << " misalign " << misalign << " step " << step;
    }
  }
}

TEST_F(kernels_part1, TrainingStepOnAnAsynchronousDeviceMatchesTheSynchronousOne) {
  // Ops rely on stream order only: run on a worker thread, frees ordered on the stream.
  const auto reference = training_step(ctx_);
  testkit::heap_memory heap;
  std::vector<std::vector<float>> got;
  {
    device::host::device async_dev(device::host::device_options{false});
    testkit::stream_ordered_memory mem(async_dev, heap);
    context ctx{async_dev, async_dev.create_stream(), mem};
    got = training_step(ctx);
    async_dev.synchronize();
    EXPECT_FALSE(async_dev.synchronous());
  }
  ASSERT_EQ(got.size(), reference.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(bit_identical(got[i], reference[i])) << "result " << i;
  EXPECT_EQ(heap.bad_frees(), 0u);
}

}  // namespace
}  // namespace sublinear::workloads
