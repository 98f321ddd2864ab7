// Note [Attention kernels]
// Rationale: the Transformer's attention core as eager frameworks run it (not fused
//   flash-attention): the S x S probabilities are materialized and saved for backward,
//   which makes them the largest activation of a Transformer layer and the natural
//   candidate for eviction and replay.
// Approach: one kernel per direction, grid (B, heads), each (b, h) independent.
//   `attention_fwd_f32` writes scores into the probability row (each q_i . k_j summed
//   over the head dimension in index order), turns the row into a softmax in place
//   (max-subtracted, the float exp of Note [Vector transcendentals], the sum in the fixed
//   lanes of detail::sum) and forms out_i = sum_j P_ij v_j with j ascending.
//   `attention_bwd_f32` zeroes its slices of dq, dk, dv, then for each query row i
//   computes dP_ij = dout_i . v_j into scratch,
//   delta_i = sum_j P_ij dP_ij, dS_ij = P_ij (dP_ij - delta_i) / sqrt(d), and adds
//   dq_i += dS_ij k_j, dk_j += dS_ij q_i, dv_j += P_ij dout_i, i and j ascending. Every
//   output element is thus summed in one fixed order (no atomics), and row strides let
//   the same kernels read separate Q, K, V tensors or one packed QKV tensor.
// Limitations: O(S^2) memory per head for the probabilities (that is the point here);
//   the scratch (forward: K transposed, head_dim x S floats; backward: 4 x S floats) is
//   host memory owned by the launch, the host device's stand-in for shared memory.
#include "workloads/kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "workloads/kernels/sequence_detail.hpp"
#include "workloads/kernels/vector_math.hpp"

namespace sublinear::workloads::ops {
namespace {

struct attention_fwd_params {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  float* probs;
  std::int64_t ld_in;   // elements between consecutive tokens of q, k and v
  std::int64_t ld_out;  // elements between consecutive tokens of out
  std::int64_t batch;
  std::int64_t seq;
  std::int64_t heads;
  std::int64_t head_dim;
  float scale;
  std::int32_t causal;
};

// Scores are formed a row at a time from K transposed into scratch (head_dim x S), so
// that the inner loop runs along the row, four scores per vector, each summed over the
// head dimension in index order (the order the scalar tail uses too).
void attention_fwd(const device::host::launch_config& /*cfg*/, const attention_fwd_params& p) {
  const std::int64_t s_len = p.seq, d = p.head_dim;
  std::vector<float> kt(static_cast<std::size_t>(d * s_len));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const std::int64_t col = h * d;
      const float* q = p.q + b * s_len * p.ld_in + col;
      const float* k = p.k + b * s_len * p.ld_in + col;
      const float* v = p.v + b * s_len * p.ld_in + col;
      float* out = p.out + b * s_len * p.ld_out + col;
      float* probs = p.probs + (b * p.heads + h) * s_len * s_len;
      for (std::int64_t j = 0; j < s_len; ++j) {
        for (std::int64_t c = 0; c < d; ++c) kt[static_cast<std::size_t>(c * s_len + j)] = k[j * p.ld_in + c];
      }
      for (std::int64_t i = 0; i < s_len; ++i) {
        float* row = probs + i * s_len;
        const float* qi = q + i * p.ld_in;
        const std::int64_t visible = p.causal != 0 ? i + 1 : s_len;
        detail::row_times_matrix(qi, kt.data(), s_len, d, visible, row);
        for (std::int64_t j = 0; j < visible; ++j) row[j] *= p.scale;
        const float max_score = detail::max(row, visible);
        // The exponentials vectorize (Note [Vector transcendentals]); the sum runs in the
        // fixed lanes of detail::sum.
        for (std::int64_t j = 0; j < visible; ++j) row[j] = detail::vexp(row[j] - max_score);
        const float inv = 1.0f / detail::sum(row, visible);
        for (std::int64_t j = 0; j < visible; ++j) row[j] *= inv;
        for (std::int64_t j = visible; j < s_len; ++j) row[j] = 0.0f;

        float* oi = out + i * p.ld_out;
        for (std::int64_t c = 0; c < d; ++c) oi[c] = 0.0f;
        detail::axpy_rows(row, 1, v, p.ld_in, visible, oi, d);
      }
    }
  }
}

struct attention_bwd_params {
  const float* dout;
  const float* q;
  const float* k;
  const float* v;
  const float* probs;
  float* dq;
  float* dk;
  float* dv;
  std::int64_t ld_in;    // between tokens of q, k, v
  std::int64_t ld_grad;  // between tokens of dq, dk, dv
  std::int64_t ld_out;   // between tokens of dout
  std::int64_t batch;
  std::int64_t seq;
  std::int64_t heads;
  std::int64_t head_dim;
  float scale;
};

// Query rows are taken four at a time: their dS rows sit in scratch, so each dk_j and
// dv_j row is updated once per block instead of once per query (the additions still
// run in query order). Columns past the block's last non-zero probability (the causal
// mask's upper triangle) contribute nothing and are skipped.
void attention_bwd(const device::host::launch_config& /*cfg*/, const attention_bwd_params& p) {
  constexpr std::int64_t block = 4;
  const std::int64_t s_len = p.seq, d = p.head_dim;
  std::vector<float> dscore(static_cast<std::size_t>(block * s_len));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const std::int64_t col = h * d;
      const float* q = p.q + b * s_len * p.ld_in + col;
      const float* k = p.k + b * s_len * p.ld_in + col;
      const float* v = p.v + b * s_len * p.ld_in + col;
      const float* dout = p.dout + b * s_len * p.ld_out + col;
      const float* probs = p.probs + (b * p.heads + h) * s_len * s_len;
      float* dq = p.dq + b * s_len * p.ld_grad + col;
      float* dk = p.dk + b * s_len * p.ld_grad + col;
      float* dv = p.dv + b * s_len * p.ld_grad + col;
      for (std::int64_t i = 0; i < s_len; ++i) {
        for (std::int64_t c = 0; c < d; ++c) {
          dq[i * p.ld_grad + c] = 0.0f;
          dk[i * p.ld_grad + c] = 0.0f;
          dv[i * p.ld_grad + c] = 0.0f;
        }
      }
      for (std::int64_t i0 = 0; i0 < s_len; i0 += block) {
        const std::int64_t rows = std::min(block, s_len - i0);
        std::int64_t width = 0;  // columns up to the block's last non-zero probability
        for (std::int64_t ii = 0; ii < rows; ++ii) {
          const std::int64_t i = i0 + ii;
          const float* row = probs + i * s_len;
          const float* doi = dout + i * p.ld_out;
          float* ds = dscore.data() + ii * s_len;
          std::int64_t last = s_len;
          while (last > 0 && row[last - 1] == 0.0f) --last;
          width = std::max(width, last);
          std::int64_t j = 0;
          for (; j + 4 <= last; j += 4) {
            const float* vj = v + j * p.ld_in;
            detail::dot4(doi, vj, vj + p.ld_in, vj + 2 * p.ld_in, vj + 3 * p.ld_in, d, ds + j);
          }
          for (; j < last; ++j) ds[j] = detail::dot(doi, v + j * p.ld_in, d);
          float delta = 0.0f;
          for (j = 0; j < last; ++j) delta += row[j] * ds[j];
          for (j = 0; j < last; ++j) ds[j] = row[j] * (ds[j] - delta) * p.scale;
          for (j = last; j < s_len; ++j) ds[j] = 0.0f;
          detail::axpy_rows(ds, 1, k, p.ld_in, last, dq + i * p.ld_grad, d);
        }
        for (std::int64_t j = 0; j < width; ++j) {
          detail::axpy_rows(dscore.data() + j, s_len, q + i0 * p.ld_in, p.ld_in, rows, dk + j * p.ld_grad, d);
          detail::axpy_rows(probs + i0 * s_len + j, s_len, dout + i0 * p.ld_out, p.ld_out, rows,
                            dv + j * p.ld_grad, d);
        }
      }
    }
  }
}

const device::host::kernel& fwd_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<attention_fwd_params, attention_fwd>(
      "attention_fwd_f32",
      {SUBLINEAR_PARAM(attention_fwd_params, q), SUBLINEAR_PARAM(attention_fwd_params, k),
       SUBLINEAR_PARAM(attention_fwd_params, v), SUBLINEAR_PARAM(attention_fwd_params, out),
       SUBLINEAR_PARAM(attention_fwd_params, probs), SUBLINEAR_PARAM(attention_fwd_params, ld_in),
       SUBLINEAR_PARAM(attention_fwd_params, ld_out), SUBLINEAR_PARAM(attention_fwd_params, batch),
       SUBLINEAR_PARAM(attention_fwd_params, seq), SUBLINEAR_PARAM(attention_fwd_params, heads),
       SUBLINEAR_PARAM(attention_fwd_params, head_dim), SUBLINEAR_PARAM(attention_fwd_params, scale),
       SUBLINEAR_PARAM(attention_fwd_params, causal)});
  return k;
}

const device::host::kernel& bwd_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<attention_bwd_params, attention_bwd>(
      "attention_bwd_f32",
      {SUBLINEAR_PARAM(attention_bwd_params, dout), SUBLINEAR_PARAM(attention_bwd_params, q),
       SUBLINEAR_PARAM(attention_bwd_params, k), SUBLINEAR_PARAM(attention_bwd_params, v),
       SUBLINEAR_PARAM(attention_bwd_params, probs), SUBLINEAR_PARAM(attention_bwd_params, dq),
       SUBLINEAR_PARAM(attention_bwd_params, dk), SUBLINEAR_PARAM(attention_bwd_params, dv),
       SUBLINEAR_PARAM(attention_bwd_params, ld_in), SUBLINEAR_PARAM(attention_bwd_params, ld_grad),
       SUBLINEAR_PARAM(attention_bwd_params, ld_out), SUBLINEAR_PARAM(attention_bwd_params, batch),
       SUBLINEAR_PARAM(attention_bwd_params, seq), SUBLINEAR_PARAM(attention_bwd_params, heads),
       SUBLINEAR_PARAM(attention_bwd_params, head_dim), SUBLINEAR_PARAM(attention_bwd_params, scale)});
  return k;
}

// Sizes of an attention problem, validated from a [B, S, width] tensor.
struct problem {
  std::int64_t batch, seq, heads, head_dim;
  [[nodiscard]] std::int64_t model() const { return heads * head_dim; }
};

problem shape_of(const tensor& x, std::int64_t heads, std::int64_t parts, const char* op) {
  kernels::require(x.shape.size() == 3, op, "expected a [B, S, width] tensor, got " + kernels::shape_string(x));
  kernels::require(heads > 0, op, "heads must be positive, got " + std::to_string(heads));
  const std::int64_t width = x.dim(2);
  kernels::require(width > 0 && width % (parts * heads) == 0, op,
                   "width " + std::to_string(width) + " is not " + std::to_string(parts) + " x " +
                       std::to_string(heads) + " heads x a head size");
  return {x.dim(0), x.dim(1), heads, width / (parts * heads)};
}

void require_probs(const tensor& probs, const problem& pr, const char* op) {
  kernels::require(probs.shape == std::vector<std::int64_t>{pr.batch, pr.heads, pr.seq, pr.seq}, op,
                   "probs must be [B, heads, S, S], got " + kernels::shape_string(probs));
}

attention_output run_forward(context& ctx, const problem& pr, const float* q, const float* k, const float* v,
                             std::int64_t ld_in, bool causal) {
  attention_output r;
  r.out = ctx.empty({pr.batch, pr.seq, pr.model()});
  r.probs = ctx.empty({pr.batch, pr.heads, pr.seq, pr.seq});
  if (r.out.numel() == 0) return r;
  auto p = kernels::zeroed<attention_fwd_params>();
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = r.out.data;
  p.probs = r.probs.data;
  p.ld_in = ld_in;
  p.ld_out = pr.model();
  p.batch = pr.batch;
  p.seq = pr.seq;
  p.heads = pr.heads;
  p.head_dim = pr.head_dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pr.head_dim)));
  p.causal = causal ? 1 : 0;
  kernels::launch(ctx, fwd_kernel(),
                  {kernels::blocks_for(pr.batch), kernels::blocks_for(pr.heads, 1, kernels::kMaxGridYZ), 1}, p,
                  {128, 1, 1});
  return r;
}

void run_backward(context& ctx, const problem& pr, const tensor& dout, const float* q, const float* k,
                  const float* v, std::int64_t ld_in, const tensor& probs, float* dq, float* dk, float* dv,
                  std::int64_t ld_grad) {
  auto p = kernels::zeroed<attention_bwd_params>();
  p.dout = dout.data;
  p.q = q;
  p.k = k;
  p.v = v;
  p.probs = probs.data;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.ld_in = ld_in;
  p.ld_grad = ld_grad;
  p.ld_out = pr.model();
  p.batch = pr.batch;
  p.seq = pr.seq;
  p.heads = pr.heads;
  p.head_dim = pr.head_dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pr.head_dim)));
  kernels::launch(ctx, bwd_kernel(),
                  {kernels::blocks_for(pr.batch), kernels::blocks_for(pr.heads, 1, kernels::kMaxGridYZ), 1}, p,
                  {128, 1, 1});
}

}  // namespace

attention_output attention_forward(context& ctx, const tensor& q, const tensor& k, const tensor& v,
                                   std::int64_t heads, bool causal) {
  const problem pr = shape_of(q, heads, 1, "attention_forward");
  kernels::require(k.shape == q.shape && v.shape == q.shape, "attention_forward",
                   "q, k and v must have one shape; got " + kernels::shape_string(q) + ", " +
                       kernels::shape_string(k) + ", " + kernels::shape_string(v));
  return run_forward(ctx, pr, q.data, k.data, v.data, pr.model(), causal);
}

attention_grads attention_backward(context& ctx, const tensor& dout, const tensor& q, const tensor& k,
                                   const tensor& v, const tensor& probs, std::int64_t heads) {
  const problem pr = shape_of(q, heads, 1, "attention_backward");
  kernels::require(k.shape == q.shape && v.shape == q.shape && dout.shape == q.shape, "attention_backward",
                   "dout, q, k and v must have one shape");
  require_probs(probs, pr, "attention_backward");
  attention_grads g;
  g.dq = ctx.empty(q.shape);
  g.dk = ctx.empty(q.shape);
  g.dv = ctx.empty(q.shape);
  if (g.dq.numel() == 0) return g;
  run_backward(ctx, pr, dout, q.data, k.data, v.data, pr.model(), probs, g.dq.data, g.dk.data, g.dv.data,
               pr.model());
  return g;
}

attention_output attention_forward_packed(context& ctx, const tensor& qkv, std::int64_t heads, bool causal) {
  const problem pr = shape_of(qkv, heads, 3, "attention_forward_packed");
  const std::int64_t m = pr.model();
  return run_forward(ctx, pr, qkv.data, qkv.data + m, qkv.data + 2 * m, 3 * m, causal);
}

tensor attention_backward_packed(context& ctx, const tensor& dout, const tensor& qkv, const tensor& probs,
                                 std::int64_t heads) {
  const problem pr = shape_of(qkv, heads, 3, "attention_backward_packed");
  const std::int64_t m = pr.model();
  kernels::require(dout.shape == std::vector<std::int64_t>{pr.batch, pr.seq, m}, "attention_backward_packed",
                   "dout must be [B, S, heads * d], got " + kernels::shape_string(dout));
  require_probs(probs, pr, "attention_backward_packed");
  tensor dqkv = ctx.empty(qkv.shape);
  if (dqkv.numel() == 0) return dqkv;
  run_backward(ctx, pr, dout, qkv.data, qkv.data + m, qkv.data + 2 * m, 3 * m, probs, dqkv.data,
               dqkv.data + m, dqkv.data + 2 * m, 3 * m);
  return dqkv;
}

}  // namespace sublinear::workloads::ops
