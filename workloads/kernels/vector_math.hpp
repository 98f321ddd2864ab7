// Note [Vector transcendentals]
// Rationale: a GPU evaluates exp and erf in a few instructions per element, so softmax,
//   GELU and their backward passes run at memory speed beside a GEMM. libm's scalar expf
//   and erff cannot be vectorized without -ffast-math: with them the Transformer's
//   attention forward (one exp per probability) costs more than its own backward. A
//   recomputation planner weighs exactly these costs, so the host device would price the
//   cheapest recomputations like the dearest.
// Approach: plain float polynomials that GCC vectorizes at -O3 from an ordinary loop, so
//   a lane of the vector loop and the scalar remainder run the same IEEE operations in
//   the same order and give the same bits (determinism is what replay validation needs;
//   no -ffast-math, no FMA contraction).
//   - exp: Cody-Waite range reduction x = n ln2 + r with |r| <= ln2/2 (n rounded to
//     nearest by adding and subtracting 1.5 x 2^23), the degree-7 polynomial of Cephes'
//     expf on r (S. L. Moshier, Cephes Mathematical Library, expf.c: the coefficients
//     are its published minimax constants), then 2^n assembled in the exponent bits.
//     Within one ulp of the true value on [-87.3, 88.7] (tests/workloads check it against
//     double exp); below that it returns 0 (no subnormal results, as __expf under
//     CUDA's flush-to-zero), above it +inf; NaN stays NaN.
//   - erf: for |x| >= 0.8 Abramowitz & Stegun 7.1.26 (Handbook of Mathematical
//     Functions, 1964), erf(|x|) = 1 - t (a1 + t (a2 + ... a5 t)) exp(-x^2) with
//     t = 1 / (1 + p|x|), absolute error below 1.5e-7 in exact arithmetic; below 0.8,
//     where that subtraction from 1 cancels, erf's Maclaurin series to x^17. Odd in x.
// Limitations: not correctly rounded (libm's expf is): results differ from libm's in the
//   last bits (equally deterministic). erf is within a few 1e-7 of the true value
//   (absolute), not within an ulp as libm's erff is.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sublinear::workloads::ops::detail {

inline float vexp(float x) {
  constexpr float kHi = 88.7228391f;    // above: +inf
  constexpr float kLo = -87.3365448f;   // below: 0 (exp(kLo) is the smallest normal float)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23: adding it rounds to an integer
  // Out-of-range lanes are clamped and finally replaced with bit masks rather than
  // conditionals: GCC would fold a conditional's constant into the arithmetic below,
  // branch around it, and then not vectorize the loop (-ftrapping-math forbids running
  // a branch's float operations unconditionally).
  const std::uint32_t over_mask = 0u - static_cast<std::uint32_t>(x > kHi);
  const std::uint32_t under_mask = 0u - static_cast<std::uint32_t>(x < kLo);
  const float xc = std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) & ~(over_mask | under_mask)) |
                                        (std::bit_cast<std::uint32_t>(kHi) & over_mask) |
                                        (std::bit_cast<std::uint32_t>(kLo) & under_mask));
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const std::int32_t ni = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kRound);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * (r * r) + r) + 1.0f;
  // n is in [-126, 128]; 2^n in two halves so that n = 128 (x near kHi) does not
  // overflow the exponent field before the product does.
  const std::int32_t half = ni >> 1;
  const float s1 = std::bit_cast<float>(static_cast<std::uint32_t>(half + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<std::uint32_t>(ni - half + 127) << 23);
  const float y = (p * s1) * s2;
  constexpr std::uint32_t kInf = 0x7f800000u;
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(y) & ~(over_mask | under_mask)) | (kInf & over_mask));
}

inline float verf(float x) {
  // |x| >= 0.8: Abramowitz & Stegun 7.1.26.
  constexpr float kP = 0.3275911f;
  constexpr float kA1 = 0.254829592f;
  constexpr float kA2 = -0.284496736f;
  constexpr float kA3 = 1.421413741f;
  constexpr float kA4 = -1.453152027f;
  constexpr float kA5 = 1.061405429f;
  const float ax = std::fabs(x);
  const float t = 1.0f / (1.0f + kP * ax);
  float poly = kA5;
  poly = poly * t + kA4;
  poly = poly * t + kA3;
  poly = poly * t + kA2;
  poly = poly * t + kA1;
  const float far = 1.0f - (poly * t) * vexp(-(ax * ax));
  // |x| < 0.8: the Maclaurin series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)) to
  // n = 8, where the formula above would lose its digits subtracting from 1.
  const float x2 = ax * ax;
  float series = 1.6462114365889246e-06f;
  series = series * x2 - 1.492565035840625e-05f;
  series = series * x2 + 1.2055332981789664e-04f;
  series = series * x2 - 8.548327023450852e-04f;
  series = series * x2 + 5.223977625442188e-03f;
  series = series * x2 - 2.6866170645131252e-02f;
  series = series * x2 + 1.1283791670955126e-01f;
  series = series * x2 - 3.7612638903183754e-01f;
  series = series * x2 + 1.1283791670955126f;
  const float near = series * ax;
  // Selected with a mask for the reason vexp gives.
  const std::uint32_t near_mask = 0u - static_cast<std::uint32_t>(ax < 0.8f);
  const float y = std::bit_cast<float>((std::bit_cast<std::uint32_t>(near) & near_mask) |
                                       (std::bit_cast<std::uint32_t>(far) & ~near_mask));
  return std::copysign(y, x);
}

}  // namespace sublinear::workloads::ops::detail
