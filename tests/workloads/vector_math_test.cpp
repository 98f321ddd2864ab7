// The vector transcendentals and the fixed-order inner loops the host kernels share
// (Note [Vector transcendentals], Note [Deterministic inner loops]): their accuracy
// against double-precision libm, their special values, and that a vector lane and the
// scalar tail give the same bits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "workloads/kernels/sequence.hpp"
#include "workloads/kernels/sequence_detail.hpp"
#include "workloads/kernels/vector_math.hpp"
#include "workloads/gradcheck.hpp"

namespace sublinear::workloads {
namespace {

namespace detail = ops::detail;

// The spacing of floats at |ref|, in double.
double ulp_at(double ref) {
  const float f = std::fabs(static_cast<float>(ref));
  return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity())) - f;
}

// Calls through a volatile pointer so that the compiler evaluates one element at a time
// here, whatever the kernel library's loops do.
float (*volatile scalar_exp)(float) = &detail::vexp;
float (*volatile scalar_erf)(float) = &detail::verf;

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

TEST(VectorExp, IsWithinOneUlpOfTheTrueValueOverTheNormalRange) {
  // Every 61st float of either sign, from 0 out to the smallest normal result (negative)
  // and the largest finite one (positive).
  double worst = 0.0;
  float worst_at = 0.0f;
  std::int64_t checked = 0;
  for (const float limit : {-87.33f, 88.72f}) {
    const std::uint32_t top = std::bit_cast<std::uint32_t>(std::fabs(limit));
    for (std::uint32_t bits = 0; bits <= top; bits += 61) {
      const float x = std::copysign(std::bit_cast<float>(bits), limit);
      const double ref = std::exp(static_cast<double>(x));
      const double err = std::fabs(static_cast<double>(scalar_exp(x)) - ref) / ulp_at(ref);
      if (err > worst) {
        worst = err;
        worst_at = x;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 2000000000 / 61);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_at;
}

TEST(VectorExp, GivesTheLimitsAndKeepsNaN) {
  EXPECT_EQ(scalar_exp(0.0f), 1.0f);
  EXPECT_EQ(scalar_exp(-0.0f), 1.0f);
  EXPECT_EQ(scalar_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(scalar_exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(scalar_exp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(scalar_exp(-88.0f), 0.0f);  // no subnormal results
  EXPECT_TRUE(std::isfinite(scalar_exp(88.72f)));
  EXPECT_GT(scalar_exp(-87.33f), 0.0f);
  EXPECT_TRUE(std::isnan(scalar_exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VectorErf, IsWithinThreeTenMillionthsOfTheTrueValueAndOdd) {
  double worst = 0.0;
  float worst_at = 0.0f;
  for (float x = -6.0f; x <= 6.0f; x += 1.0f / 4096.0f) {
    const double err = std::fabs(static_cast<double>(scalar_erf(x)) - std::erf(static_cast<double>(x)));
    if (err > worst) {
      worst = err;
      worst_at = x;
    }
    ASSERT_TRUE(same_bits(scalar_erf(-x), -scalar_erf(x))) << "x = " << x;
  }
  EXPECT_LE(worst, 3e-7) << "at x = " << worst_at;
  // Near zero the series keeps the relative error small too.
  for (float x : {1e-6f, 1e-3f, 0.1f, 0.79f}) {
    const double ref = std::erf(static_cast<double>(x));
    EXPECT_LE(std::fabs(scalar_erf(x) - ref) / ref, 4e-7) << "x = " << x;
  }
}

TEST(VectorErf, GivesTheLimitsAndKeepsNaN) {
  EXPECT_TRUE(same_bits(scalar_erf(0.0f), 0.0f));
  EXPECT_TRUE(same_bits(scalar_erf(-0.0f), -0.0f));
  EXPECT_EQ(scalar_erf(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(scalar_erf(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_EQ(scalar_erf(10.0f), 1.0f);
  EXPECT_TRUE(std::isnan(scalar_erf(std::numeric_limits<float>::quiet_NaN())));
}

class VectorLanes : public testkit::workload_test {};

// gelu_fwd_f32 runs verf in a loop GCC vectorizes at -O3; 1,027 elements leave a scalar
// tail. Each element must be what one scalar evaluation of the same formula gives.
TEST_F(VectorLanes, TheGeluKernelGivesPerElementTheBitsOfAScalarEvaluation) {
  const std::vector<float> xs = testkit::random_values(1027, 91, -5.0f, 5.0f);
  const tensor y = ops::gelu_forward(ctx_, upload(xs, {1027}));
  const std::vector<float> got = download(y);
  ASSERT_EQ(got.size(), xs.size());
  constexpr float inv_sqrt2 = 0.70710678118654752440f;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float want = 0.5f * xs[i] * (1.0f + scalar_erf(xs[i] * inv_sqrt2));
    ASSERT_TRUE(same_bits(got[i], want)) << "element " << i << ": " << got[i] << " vs " << want;
  }
}

TEST(DeterministicLoops, RowTimesMatrixSumsEveryOutputInIndexOrderInVectorAndTail) {
  constexpr std::int64_t depth = 8, n = 21, ld = 24;  // two vector blocks of 8 and a tail of 5
  const std::vector<float> x = testkit::random_values(depth, 5, -2.0f, 2.0f);
  const std::vector<float> m = testkit::random_values(depth * ld, 6, -2.0f, 2.0f);
  std::vector<float> y(n, -1.0f);
  detail::row_times_matrix(x.data(), m.data(), ld, depth, n, y.data());
  for (std::int64_t j = 0; j < n; ++j) {
    volatile float acc = 0.0f;  // one rounding per step, in index order
    for (std::int64_t c = 0; c < depth; ++c) acc = acc + x[static_cast<std::size_t>(c)] * m[static_cast<std::size_t>(c * ld + j)];
    EXPECT_TRUE(same_bits(y[static_cast<std::size_t>(j)], acc)) << "output " << j;
  }
}

TEST(DeterministicLoops, SumAndMaxDependOnlyOnTheLength) {
  const std::vector<float> x = testkit::random_values(23, 8, -3.0f, 3.0f);
  // Four lanes (index mod 4) combined as (l0 + l1) + (l2 + l3).
  float lanes[4] = {0, 0, 0, 0};
  for (std::size_t i = 0; i < x.size(); ++i) {
    volatile float t = lanes[i % 4] + x[i];
    lanes[i % 4] = t;
  }
  volatile float left = lanes[0] + lanes[1];
  volatile float right = lanes[2] + lanes[3];
  EXPECT_TRUE(same_bits(detail::sum(x.data(), 23), left + right));
  EXPECT_EQ(detail::sum(x.data(), 0), 0.0f);

  float want = -std::numeric_limits<float>::infinity();
  for (float v : x) want = v > want ? v : want;
  EXPECT_EQ(detail::max(x.data(), 23), want);
  EXPECT_EQ(detail::max(x.data(), 3), std::max({x[0], x[1], x[2]}));
  EXPECT_EQ(detail::max(x.data(), 0), -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace sublinear::workloads
