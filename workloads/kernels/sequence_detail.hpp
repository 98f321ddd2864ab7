// Internal helpers shared by the sequence and attention kernels (LSTM, LayerNorm,
// attention, embedding, sequence ops). Not part of the ops' interface.
//
// Note [Deterministic inner loops]
// Rationale: every workload kernel must give bit-identical results run after run and
//   wherever its buffers live, or replay validation (DESIGN.md §4) would flag honest
//   recomputation as a mismatch.
// Approach: reductions run in a fixed order that depends only on the sizes. `dot` keeps
//   eight independent partial sums (lane l takes the elements with index = l mod 8) in
//   two explicit SSE vectors and combines them in a fixed tree; alignment cannot matter
//   because no lane's order depends on it (loads are unaligned-safe memcpys).
//   `dot4` is four `dot`s sharing the loads of one operand, lane for lane the same sums.
//   `axpy` updates each element once, four at a time; `axpy_rows` is a run of axpys
//   fused four rows at a time with the additions kept in row order. `sum` keeps four
//   lanes; `row_times_matrix` sums each output over the shared index in index order.
// Limitations: float32 accumulation (as on a GPU); no -ffast-math anywhere near this code,
//   which would let the compiler reassociate. Built with FMA enabled (-march with FMA),
//   GCC may contract a * b + c, which changes low bits but not determinism.
#pragma once

#include <cstdint>
#include <cstring>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops::detail {

// Four floats in one SSE register (GCC/Clang vector extension). Written out explicitly
// because -O2 only vectorizes loops whose trip count is a known multiple of the vector
// width; the arithmetic is lane-wise IEEE float, exactly what the scalar code computes.
using f32x4 = float __attribute__((vector_size(16)));

inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store4(float* p, f32x4 v) { std::memcpy(p, &v, sizeof(v)); }
inline f32x4 splat4(float a) { return f32x4{a, a, a, a}; }

// The eight lanes of a dot product (lane l holds the elements with index = l mod 8),
// combined in a fixed tree.
struct dot_lanes {
  f32x4 lo = {0, 0, 0, 0};  // lanes 0..3
  f32x4 hi = {0, 0, 0, 0};  // lanes 4..7

  void add8(const float* a, const float* b) {
    lo += load4(a) * load4(b);
    hi += load4(a + 4) * load4(b + 4);
  }
  // The tail (fewer than eight elements) goes to lanes 0, 1, ... in order.
  void add_tail(const float* a, const float* b, std::int64_t count) {
    for (std::int64_t l = 0; l < count; ++l) {
      if (l < 4) {
        lo[l] += a[l] * b[l];
      } else {
        hi[l - 4] += a[l] * b[l];
      }
    }
  }
  [[nodiscard]] float sum() const {
    const f32x4 pair = lo + hi;  // (l0+l4), (l1+l5), (l2+l6), (l3+l7)
    return (pair[0] + pair[1]) + (pair[2] + pair[3]);
  }
};

inline float dot(const float* a, const float* b, std::int64_t n) {
  dot_lanes acc;
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) acc.add8(a + k, b + k);
  acc.add_tail(a + k, b + k, n - k);
  return acc.sum();
}

// out[i] = dot(a, b[i], n) for four vectors at once, bit for bit what four calls to `dot`
// return (same lanes, same tree), loading `a` once for all four.
inline void dot4(const float* a, const float* b0, const float* b1, const float* b2, const float* b3,
                 std::int64_t n, float* out) {
  dot_lanes c0, c1, c2, c3;
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const f32x4 alo = load4(a + k), ahi = load4(a + k + 4);
    c0.lo += alo * load4(b0 + k);
    c0.hi += ahi * load4(b0 + k + 4);
    c1.lo += alo * load4(b1 + k);
    c1.hi += ahi * load4(b1 + k + 4);
    c2.lo += alo * load4(b2 + k);
    c2.hi += ahi * load4(b2 + k + 4);
    c3.lo += alo * load4(b3 + k);
    c3.hi += ahi * load4(b3 + k + 4);
  }
  c0.add_tail(a + k, b0 + k, n - k);
  c1.add_tail(a + k, b1 + k, n - k);
  c2.add_tail(a + k, b2 + k, n - k);
  c3.add_tail(a + k, b3 + k, n - k);
  out[0] = c0.sum();
  out[1] = c1.sum();
  out[2] = c2.sum();
  out[3] = c3.sum();
}

// The sum of x[0..n) in four lanes (lane l takes the elements with index = l mod 4),
// combined in a fixed tree: the order depends only on n.
inline float sum(const float* x, std::int64_t n) {
  f32x4 acc = {0, 0, 0, 0};
  std::int64_t k = 0;
  for (; k + 4 <= n; k += 4) acc += load4(x + k);
  for (std::int64_t l = 0; k < n; ++k, ++l) acc[l] += x[k];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// The largest of x[0..n) (-inf when n is 0), four lanes at a time. Which of two equal
// values wins cannot be seen in the result except for +0 and -0, which every caller
// here subtracts from something (x - (+0) == x - (-0) for every x but -0, where the two
// differ only in sign). NaNs are not ordered: a row holding one gives some value.
inline float max(const float* x, std::int64_t n) {
  f32x4 acc = splat4(-__builtin_inff());
  std::int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const f32x4 v = load4(x + k);
    acc = v > acc ? v : acc;
  }
  float m = acc[0] > acc[1] ? acc[0] : acc[1];
  const float m2 = acc[2] > acc[3] ? acc[2] : acc[3];
  m = m2 > m ? m2 : m;
  for (; k < n; ++k) m = x[k] > m ? x[k] : m;
  return m;
}

// y[j] = sum over c of x[c] * m[c * ld + j] for j < n, c ascending from 0 (m is a
// row-major matrix with `depth` rows): a row vector times a matrix, vectorized along j;
// every y[j] is summed in the same order whether its lane is a vector's or the tail's.
// y must not overlap x or m.
inline void row_times_matrix(const float* x, const float* m, std::int64_t ld, std::int64_t depth,
                             std::int64_t n, float* y) {
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {  // eight outputs in two registers across the whole sum
    f32x4 lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
    for (std::int64_t c = 0; c < depth; ++c) {
      const f32x4 xc = splat4(x[c]);
      lo += xc * load4(m + c * ld + j);
      hi += xc * load4(m + c * ld + j + 4);
    }
    store4(y + j, lo);
    store4(y + j + 4, hi);
  }
  for (; j < n; ++j) {
    float acc = 0.0f;
    for (std::int64_t c = 0; c < depth; ++c) acc += x[c] * m[c * ld + j];
    y[j] = acc;
  }
}

// y[0..n) += alpha * x[0..n). y must not overlap x.
inline void axpy(float alpha, const float* x, float* y, std::int64_t n) {
  const f32x4 a = splat4(alpha);
  std::int64_t k = 0;
  for (; k + 4 <= n; k += 4) store4(y + k, load4(y + k) + a * load4(x + k));
  for (; k < n; ++k) y[k] += alpha * x[k];
}

// y[k] += alpha[r * alpha_stride] * x[r * x_stride + k] for r = 0 .. count-1 in that order:
// exactly `count` successive axpy calls, but four rows per pass over y so that y is
// loaded and stored a quarter as often. y must not overlap any row of x.
inline void axpy_rows(const float* alpha, std::int64_t alpha_stride, const float* x, std::int64_t x_stride,
                      std::int64_t count, float* y, std::int64_t n) {
  std::int64_t r = 0;
  for (; r + 4 <= count; r += 4) {
    const float a0 = alpha[r * alpha_stride], a1 = alpha[(r + 1) * alpha_stride];
    const float a2 = alpha[(r + 2) * alpha_stride], a3 = alpha[(r + 3) * alpha_stride];
    const float* x0 = x + r * x_stride;
    const float* x1 = x0 + x_stride;
    const float* x2 = x1 + x_stride;
    const float* x3 = x2 + x_stride;
    const f32x4 v0 = splat4(a0), v1 = splat4(a1), v2 = splat4(a2), v3 = splat4(a3);
    std::int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
      store4(y + k, (((load4(y + k) + v0 * load4(x0 + k)) + v1 * load4(x1 + k)) + v2 * load4(x2 + k)) +
                        v3 * load4(x3 + k));
    }
    for (; k < n; ++k) y[k] = (((y[k] + a0 * x0[k]) + a1 * x1[k]) + a2 * x2[k]) + a3 * x3[k];
  }
  for (; r < count; ++r) axpy(alpha[r * alpha_stride], x + r * x_stride, y, n);
}

}  // namespace sublinear::workloads::ops::detail
