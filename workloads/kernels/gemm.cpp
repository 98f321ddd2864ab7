// Note [Deterministic GEMM]
// Rationale: replay validation compares a regenerated activation with the original bit for
//   bit, and gradients must be bit-identical with and without sublinear, so GEMM must give
//   the same bits wherever its buffers live. A BLAS does not promise that (its kernels pick
//   code paths by alignment and thread count), hence our own.
// Approach: Goto-style blocking. For each batch problem, each NC-column block of B and each
//   KC-deep slice of K, B's block is packed into NR-wide panels; for each MC-row block of A,
//   A's block is packed into MR-tall panels (transposes are resolved while packing, so one
//   micro-kernel serves nn, nt and tn). The micro-kernel keeps an MR x NR accumulator tile
//   in registers and adds a[r]*b[j] over the slice in increasing k; the compiler vectorizes
//   across j, which never reorders a sum. Each slice's tile is then folded into C: the first
//   slice writes alpha*acc + beta*C (C unread when beta == 0), later slices add alpha*acc.
//   Every element's arithmetic thus depends only on (m, n, k) and the block constants.
//   Packed panels are zero-padded at the edges so the micro-kernel has no tail code.
// Limitations: one thread; the pack buffers are thread_local (a stream's worker thread keeps
//   its own). Contraction into FMA is off (-std=c++20 implies -ffp-contract=off), so
//   scalar and vector code paths agree.
#include "workloads/kernels/gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

struct gemm_params {
  const float* a;
  const float* b;
  float* c;
  std::int64_t m, n, k;
  std::int64_t lda, ldb, ldc;
  std::int64_t batch, stride_a, stride_b, stride_c;
  float alpha, beta;
};

constexpr std::int64_t kMR = 4;
constexpr std::int64_t kNR = 8;
constexpr std::int64_t kMC = 64;
constexpr std::int64_t kKC = 256;
constexpr std::int64_t kNC = 512;

// ap[panel][k][r] = op(A)(i0 + panel*MR + r, k0 + k), zero past the last row.
template <bool TransA>
void pack_a(const float* a, std::int64_t lda, std::int64_t i0, std::int64_t mc, std::int64_t k0,
            std::int64_t kc, float* ap) {
  for (std::int64_t ip = 0; ip < mc; ip += kMR) {
    const std::int64_t rows = std::min(kMR, mc - ip);
    for (std::int64_t k = 0; k < kc; ++k) {
      for (std::int64_t r = 0; r < kMR; ++r) {
        const std::int64_t i = i0 + ip + r;
        float v = 0.0f;
        if (r < rows) v = TransA ? a[(k0 + k) * lda + i] : a[i * lda + (k0 + k)];
        ap[k * kMR + r] = v;
      }
    }
    ap += kc * kMR;
  }
}

// bp[panel][k][j] = op(B)(k0 + k, j0 + panel*NR + j), zero past the last column.
template <bool TransB>
void pack_b(const float* b, std::int64_t ldb, std::int64_t k0, std::int64_t kc, std::int64_t j0,
            std::int64_t nc, float* bp) {
  for (std::int64_t jp = 0; jp < nc; jp += kNR) {
    const std::int64_t cols = std::min(kNR, nc - jp);
    for (std::int64_t k = 0; k < kc; ++k) {
      for (std::int64_t j = 0; j < kNR; ++j) {
        const std::int64_t col = j0 + jp + j;
        float v = 0.0f;
        if (j < cols) v = TransB ? b[col * ldb + (k0 + k)] : b[(k0 + k) * ldb + col];
        bp[k * kNR + j] = v;
      }
    }
    bp += kc * kNR;
  }
}

void micro_kernel(std::int64_t kc, const float* __restrict ap, const float* __restrict bp,
                  float (&out)[kMR][kNR]) {
  float acc[kMR][kNR] = {};
  for (std::int64_t k = 0; k < kc; ++k) {
    const float* a = ap + k * kMR;
    const float* b = bp + k * kNR;
    for (std::int64_t r = 0; r < kMR; ++r) {
      const float av = a[r];
      for (std::int64_t j = 0; j < kNR; ++j) acc[r][j] += av * b[j];
    }
  }
  for (std::int64_t r = 0; r < kMR; ++r) {
    for (std::int64_t j = 0; j < kNR; ++j) out[r][j] = acc[r][j];
  }
}

void scale_c(float* c, std::int64_t m, std::int64_t n, std::int64_t ldc, float beta) {
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
  }
}

template <bool TransA, bool TransB>
void gemm_body(const device::host::launch_config& /*cfg*/, const gemm_params& params) {
  // A private copy: through the reference, every store into C might change alpha, beta or
  // a stride (all floats and integers the stores could alias), and the compiler reloaded
  // them in the inner loops once the body was called, not inlined, from a fused kernel
  // (conv2d_bwd_data_f32 took 66 ms a ResNet-434 iteration instead of 52).
  const gemm_params p = params;
  thread_local std::vector<float> a_pack;
  thread_local std::vector<float> b_pack;
  a_pack.resize(static_cast<std::size_t>(kMC * kKC));
  b_pack.resize(static_cast<std::size_t>(kKC * (kNC + kNR)));

  for (std::int64_t bi = 0; bi < p.batch; ++bi) {
    const float* a = p.a + bi * p.stride_a;
    const float* b = p.b + bi * p.stride_b;
    float* c = p.c + bi * p.stride_c;
    if (p.k == 0) {
      scale_c(c, p.m, p.n, p.ldc, p.beta);
      continue;
    }
    for (std::int64_t j0 = 0; j0 < p.n; j0 += kNC) {
      const std::int64_t nc = std::min(kNC, p.n - j0);
      for (std::int64_t k0 = 0; k0 < p.k; k0 += kKC) {
        const std::int64_t kc = std::min(kKC, p.k - k0);
        const bool first = k0 == 0;
        pack_b<TransB>(b, p.ldb, k0, kc, j0, nc, b_pack.data());
        for (std::int64_t i0 = 0; i0 < p.m; i0 += kMC) {
          const std::int64_t mc = std::min(kMC, p.m - i0);
          pack_a<TransA>(a, p.lda, i0, mc, k0, kc, a_pack.data());
          for (std::int64_t jp = 0; jp < nc; jp += kNR) {
            const std::int64_t cols = std::min(kNR, nc - jp);
            const float* bpanel = b_pack.data() + (jp / kNR) * kc * kNR;
            for (std::int64_t ip = 0; ip < mc; ip += kMR) {
              const std::int64_t rows = std::min(kMR, mc - ip);
              float tile[kMR][kNR];
              micro_kernel(kc, a_pack.data() + (ip / kMR) * kc * kMR, bpanel, tile);
              for (std::int64_t r = 0; r < rows; ++r) {
                float* crow = c + (i0 + ip + r) * p.ldc + j0 + jp;
                for (std::int64_t j = 0; j < cols; ++j) {
                  const float v = p.alpha * tile[r][j];
                  if (!first) {
                    crow[j] += v;
                  } else if (p.beta == 0.0f) {
                    crow[j] = v;
                  } else {
                    crow[j] = v + p.beta * crow[j];
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

template <bool TransA, bool TransB>
const device::host::kernel& gemm_kernel(const char* name) {
  static const device::host::kernel& k = device::host::register_kernel<gemm_params, &gemm_body<TransA, TransB>>(
      name, {SUBLINEAR_PARAM(gemm_params, a), SUBLINEAR_PARAM(gemm_params, b), SUBLINEAR_PARAM(gemm_params, c),
             SUBLINEAR_PARAM(gemm_params, m), SUBLINEAR_PARAM(gemm_params, n), SUBLINEAR_PARAM(gemm_params, k),
             SUBLINEAR_PARAM(gemm_params, lda), SUBLINEAR_PARAM(gemm_params, ldb),
             SUBLINEAR_PARAM(gemm_params, ldc), SUBLINEAR_PARAM(gemm_params, batch),
             SUBLINEAR_PARAM(gemm_params, stride_a), SUBLINEAR_PARAM(gemm_params, stride_b),
             SUBLINEAR_PARAM(gemm_params, stride_c), SUBLINEAR_PARAM(gemm_params, alpha),
             SUBLINEAR_PARAM(gemm_params, beta)});
  return k;
}

}  // namespace

namespace {

// Checks `g` and packs it into the kernels' parameter block.
gemm_params checked_params(const gemm_args& g) {
  using kernels::require;
  const bool ta = g.trans_a == transpose::trans;
  const bool tb = g.trans_b == transpose::trans;
  require(!(ta && tb), "gemm", "A^T B^T is not supported");
  require(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0, "gemm", "negative size");
  require(g.lda >= (ta ? g.m : g.k) && g.ldb >= (tb ? g.k : g.n) && g.ldc >= g.n, "gemm",
          "leading dimension smaller than a row");
  auto p = kernels::zeroed<gemm_params>();
  p.a = g.a;
  p.b = g.b;
  p.c = g.c;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.lda = g.lda;
  p.ldb = g.ldb;
  p.ldc = g.ldc;
  p.batch = g.batch;
  p.stride_a = g.stride_a;
  p.stride_b = g.stride_b;
  p.stride_c = g.stride_c;
  p.alpha = g.alpha;
  p.beta = g.beta;
  return p;
}

}  // namespace

void gemm_on_this_thread(const gemm_args& g) {
  const gemm_params p = checked_params(g);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const device::host::launch_config cfg{};
  if (g.trans_a == transpose::trans) {
    gemm_body<true, false>(cfg, p);
  } else if (g.trans_b == transpose::trans) {
    gemm_body<false, true>(cfg, p);
  } else {
    gemm_body<false, false>(cfg, p);
  }
}

void gemm(context& ctx, const gemm_args& g) {
  const gemm_params p = checked_params(g);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const bool ta = g.trans_a == transpose::trans;
  const bool tb = g.trans_b == transpose::trans;

  const device::host::kernel& k = !ta && !tb ? gemm_kernel<false, false>("gemm_nn_f32")
                          : tb       ? gemm_kernel<false, true>("gemm_nt_f32")
                                     : gemm_kernel<true, false>("gemm_tn_f32");
  // One block per 64 x 64 tile of C, one grid layer per batch problem.
  const device::host::dim3 grid{kernels::blocks_for(g.n, 64), kernels::blocks_for(g.m, 64, kernels::kMaxGridYZ),
                        kernels::blocks_for(g.batch, 1, kernels::kMaxGridYZ)};
  kernels::launch(ctx, k, grid, p);
}

tensor matmul(context& ctx, const tensor& a, const tensor& b, transpose ta, transpose tb) {
  kernels::require(a.shape.size() == 2 && b.shape.size() == 2, "matmul",
                   "2-D tensors expected, got " + kernels::shape_string(a) + " and " + kernels::shape_string(b));
  const std::int64_t m = ta == transpose::none ? a.dim(0) : a.dim(1);
  const std::int64_t ka = ta == transpose::none ? a.dim(1) : a.dim(0);
  const std::int64_t kb = tb == transpose::none ? b.dim(0) : b.dim(1);
  const std::int64_t n = tb == transpose::none ? b.dim(1) : b.dim(0);
  kernels::require(ka == kb, "matmul", "inner sizes differ: " + kernels::shape_string(a) + " x " + kernels::shape_string(b));
  tensor c = ctx.empty({m, n});
  gemm_args g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = ka;
  g.a = a.data;
  g.lda = a.dim(1);
  g.b = b.data;
  g.ldb = b.dim(1);
  g.c = c.data;
  g.ldc = n;
  gemm(ctx, g);
  return c;
}

}  // namespace sublinear::workloads::ops
