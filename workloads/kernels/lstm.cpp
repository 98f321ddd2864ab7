// Note [LSTM cell kernels]
// Rationale: the unrolled LSTM (up to T = 2048 steps) is the workload where Chen et al.'s
//   sqrt(T) segments matter most, so a step must be a few launches with compact saved
//   state, and each forward launch must regenerate everything it wrote when replayed alone.
// Approach: forward is one fused launch, `lstm_cell_fwd_f32` (grid.x = B): per batch row,
//   the 4H gate pre-activations bias + W_ih x + W_hh h (each a `detail::dot` over a
//   contiguous weight row, four batch rows per pass), the activations, then c_t and h_t. It overwrites gates, h and c entirely.
//   Backward is three launches around a temporary dgates [B, 4H] (pre-activation
//   gradients), freed when the op returns:
//     `lstm_cell_bwd_gates_f32` (grid.x = B): dgates and dc_prev from dh, dc and the
//       saved gates;
//     `lstm_cell_bwd_data_f32` (grid.x = B): dx = dgates W_ih, dh_prev = dgates W_hh,
//       summing gate rows in index order;
//     `lstm_cell_bwd_weights_f32` (grid.x = 4H): dW_ih += dgates^T x,
//       dW_hh += dgates^T h_prev, db += column sums of dgates, batch rows in order.
//   No atomics and fixed loop orders make every result address-independent.
// Limitations: register blocking only (Note [Deterministic inner loops]), no cache
//   tiling: fine for the host-device sizes (H of a few hundred), slow for large H.
#include "workloads/kernels/lstm.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "workloads/kernels/sequence_detail.hpp"

namespace sublinear::workloads::ops {
namespace {

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

struct lstm_cell_fwd_params {
  const float* x;
  const float* h_prev;
  const float* c_prev;
  const float* w_ih;
  const float* w_hh;
  const float* bias;
  float* gates;
  float* h;
  float* c;
  std::int64_t batch;
  std::int64_t input;
  std::int64_t hidden;
};

// Activates one batch row's gate pre-activations in place and writes its c and h.
void lstm_cell_pointwise(float* g, const float* cp, float* c, float* h, std::int64_t hid) {
  for (std::int64_t u = 0; u < hid; ++u) {
    const float gi = sigmoid(g[u]);
    const float gf = sigmoid(g[hid + u]);
    const float gg = std::tanh(g[2 * hid + u]);
    const float go = sigmoid(g[3 * hid + u]);
    g[u] = gi;
    g[hid + u] = gf;
    g[2 * hid + u] = gg;
    g[3 * hid + u] = go;
    c[u] = gf * cp[u] + gi * gg;
    h[u] = go * std::tanh(c[u]);
  }
}

void lstm_cell_fwd(const device::host::launch_config& /*cfg*/, const lstm_cell_fwd_params& p) {
  const std::int64_t hid = p.hidden, in = p.input, rows = 4 * hid;
  // Four batch rows at a time share each weight row's loads; `dot4` gives each row the
  // same sum `dot` would, so the blocking does not change any result.
  std::int64_t b = 0;
  for (; b + 4 <= p.batch; b += 4) {
    const float* x = p.x + b * in;
    const float* hp = p.h_prev + b * hid;
    for (std::int64_t r = 0; r < rows; ++r) {
      float from_x[4], from_h[4];
      detail::dot4(p.w_ih + r * in, x, x + in, x + 2 * in, x + 3 * in, in, from_x);
      detail::dot4(p.w_hh + r * hid, hp, hp + hid, hp + 2 * hid, hp + 3 * hid, hid, from_h);
      for (std::int64_t i = 0; i < 4; ++i) p.gates[(b + i) * rows + r] = (p.bias[r] + from_x[i]) + from_h[i];
    }
  }
  for (; b < p.batch; ++b) {
    const float* x = p.x + b * in;
    const float* hp = p.h_prev + b * hid;
    for (std::int64_t r = 0; r < rows; ++r) {
      p.gates[b * rows + r] =
          (p.bias[r] + detail::dot(p.w_ih + r * in, x, in)) + detail::dot(p.w_hh + r * hid, hp, hid);
    }
  }
  for (b = 0; b < p.batch; ++b) {
    lstm_cell_pointwise(p.gates + b * rows, p.c_prev + b * hid, p.c + b * hid, p.h + b * hid, hid);
  }
}

struct lstm_cell_bwd_gates_params {
  const float* dh;
  const float* dc;  // nullptr: no gradient reaches c_t from a later step
  const float* gates;
  const float* c;
  const float* c_prev;
  float* dgates;
  float* dc_prev;
  std::int64_t batch;
  std::int64_t hidden;
};

void lstm_cell_bwd_gates(const device::host::launch_config& /*cfg*/, const lstm_cell_bwd_gates_params& p) {
  const std::int64_t hid = p.hidden;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const float* g = p.gates + b * 4 * hid;
    float* dg = p.dgates + b * 4 * hid;
    for (std::int64_t u = 0; u < hid; ++u) {
      const std::int64_t n = b * hid + u;
      const float gi = g[u], gf = g[hid + u], gg = g[2 * hid + u], go = g[3 * hid + u];
      const float tc = std::tanh(p.c[n]);
      const float dh = p.dh[n];
      const float dc = (p.dc != nullptr ? p.dc[n] : 0.0f) + dh * go * (1.0f - tc * tc);
      dg[u] = dc * gg * gi * (1.0f - gi);
      dg[hid + u] = dc * p.c_prev[n] * gf * (1.0f - gf);
      dg[2 * hid + u] = dc * gi * (1.0f - gg * gg);
      dg[3 * hid + u] = dh * tc * go * (1.0f - go);
      p.dc_prev[n] = dc * gf;
    }
  }
}

struct lstm_cell_bwd_data_params {
  const float* dgates;
  const float* w_ih;
  const float* w_hh;
  float* dx;
  float* dh_prev;
  std::int64_t batch;
  std::int64_t input;
  std::int64_t hidden;
};

void lstm_cell_bwd_data(const device::host::launch_config& /*cfg*/, const lstm_cell_bwd_data_params& p) {
  const std::int64_t hid = p.hidden, in = p.input, rows = 4 * hid;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const float* dg = p.dgates + b * rows;
    float* dx = p.dx + b * in;
    float* dhp = p.dh_prev + b * hid;
    for (std::int64_t k = 0; k < in; ++k) dx[k] = 0.0f;
    for (std::int64_t k = 0; k < hid; ++k) dhp[k] = 0.0f;
    detail::axpy_rows(dg, 1, p.w_ih, in, rows, dx, in);
    detail::axpy_rows(dg, 1, p.w_hh, hid, rows, dhp, hid);
  }
}

struct lstm_cell_bwd_weights_params {
  const float* dgates;
  const float* x;
  const float* h_prev;
  float* dw_ih;
  float* dw_hh;
  float* dbias;
  std::int64_t batch;
  std::int64_t input;
  std::int64_t hidden;
};

void lstm_cell_bwd_weights(const device::host::launch_config& /*cfg*/, const lstm_cell_bwd_weights_params& p) {
  const std::int64_t hid = p.hidden, in = p.input, rows = 4 * hid;
  for (std::int64_t r = 0; r < rows; ++r) {
    detail::axpy_rows(p.dgates + r, rows, p.x, in, p.batch, p.dw_ih + r * in, in);
    detail::axpy_rows(p.dgates + r, rows, p.h_prev, hid, p.batch, p.dw_hh + r * hid, hid);
    for (std::int64_t b = 0; b < p.batch; ++b) p.dbias[r] += p.dgates[b * rows + r];
  }
}

struct cell_sizes {
  std::int64_t batch, input, hidden;
};

cell_sizes check_cell(const char* op, const tensor& x, const tensor& h_prev, const tensor& c_prev,
                      const tensor& w_ih, const tensor& w_hh) {
  kernels::require(x.shape.size() == 2, op, "x must be [B, I], got " + kernels::shape_string(x));
  kernels::require(h_prev.shape.size() == 2, op, "h_prev must be [B, H], got " + kernels::shape_string(h_prev));
  const cell_sizes s{x.dim(0), x.dim(1), h_prev.dim(1)};
  const auto bh = std::vector<std::int64_t>{s.batch, s.hidden};
  kernels::require(h_prev.shape == bh && c_prev.shape == bh, op,
                   "h_prev and c_prev must be [B, H] = [" + std::to_string(s.batch) + ", " +
                       std::to_string(s.hidden) + "], got " + kernels::shape_string(h_prev) + " and " +
                       kernels::shape_string(c_prev));
  kernels::require(w_ih.shape == std::vector<std::int64_t>{4 * s.hidden, s.input}, op,
                   "w_ih must be [4H, I], got " + kernels::shape_string(w_ih));
  kernels::require(w_hh.shape == std::vector<std::int64_t>{4 * s.hidden, s.hidden}, op,
                   "w_hh must be [4H, H], got " + kernels::shape_string(w_hh));
  return s;
}

}  // namespace

lstm_cell_output lstm_cell_forward(context& ctx, const tensor& x, const tensor& h_prev, const tensor& c_prev,
                                   const tensor& w_ih, const tensor& w_hh, const tensor& bias) {
  static const device::host::kernel& k = device::host::register_kernel<lstm_cell_fwd_params, lstm_cell_fwd>(
      "lstm_cell_fwd_f32",
      {SUBLINEAR_PARAM(lstm_cell_fwd_params, x), SUBLINEAR_PARAM(lstm_cell_fwd_params, h_prev),
       SUBLINEAR_PARAM(lstm_cell_fwd_params, c_prev), SUBLINEAR_PARAM(lstm_cell_fwd_params, w_ih),
       SUBLINEAR_PARAM(lstm_cell_fwd_params, w_hh), SUBLINEAR_PARAM(lstm_cell_fwd_params, bias),
       SUBLINEAR_PARAM(lstm_cell_fwd_params, gates), SUBLINEAR_PARAM(lstm_cell_fwd_params, h),
       SUBLINEAR_PARAM(lstm_cell_fwd_params, c), SUBLINEAR_PARAM(lstm_cell_fwd_params, batch),
       SUBLINEAR_PARAM(lstm_cell_fwd_params, input), SUBLINEAR_PARAM(lstm_cell_fwd_params, hidden)});
  const char* op = "lstm_cell_forward";
  const cell_sizes s = check_cell(op, x, h_prev, c_prev, w_ih, w_hh);
  kernels::require(bias.numel() == 4 * s.hidden && bias.shape.size() == 1, op,
                   "bias must be [4H], got " + kernels::shape_string(bias));
  lstm_cell_output out;
  out.h = ctx.empty({s.batch, s.hidden});
  out.c = ctx.empty({s.batch, s.hidden});
  out.gates = ctx.empty({s.batch, 4 * s.hidden});
  if (out.h.numel() == 0) return out;
  auto p = kernels::zeroed<lstm_cell_fwd_params>();
  p.x = x.data;
  p.h_prev = h_prev.data;
  p.c_prev = c_prev.data;
  p.w_ih = w_ih.data;
  p.w_hh = w_hh.data;
  p.bias = bias.data;
  p.gates = out.gates.data;
  p.h = out.h.data;
  p.c = out.c.data;
  p.batch = s.batch;
  p.input = s.input;
  p.hidden = s.hidden;
  kernels::launch(ctx, k, {kernels::blocks_for(s.batch), 1, 1}, p);
  return out;
}

lstm_cell_grads lstm_cell_backward(context& ctx, const tensor& dh, const tensor* dc, const tensor& x,
                                   const tensor& h_prev, const tensor& c_prev, const tensor& c,
                                   const tensor& gates, const tensor& w_ih, const tensor& w_hh, tensor& dw_ih,
                                   tensor& dw_hh, tensor& dbias) {
  static const device::host::kernel& k_gates = device::host::register_kernel<lstm_cell_bwd_gates_params, lstm_cell_bwd_gates>(
      "lstm_cell_bwd_gates_f32",
      {SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, dh), SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, dc),
       SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, gates), SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, c),
       SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, c_prev), SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, dgates),
       SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, dc_prev), SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, batch),
       SUBLINEAR_PARAM(lstm_cell_bwd_gates_params, hidden)});
  static const device::host::kernel& k_data = device::host::register_kernel<lstm_cell_bwd_data_params, lstm_cell_bwd_data>(
      "lstm_cell_bwd_data_f32",
      {SUBLINEAR_PARAM(lstm_cell_bwd_data_params, dgates), SUBLINEAR_PARAM(lstm_cell_bwd_data_params, w_ih),
       SUBLINEAR_PARAM(lstm_cell_bwd_data_params, w_hh), SUBLINEAR_PARAM(lstm_cell_bwd_data_params, dx),
       SUBLINEAR_PARAM(lstm_cell_bwd_data_params, dh_prev), SUBLINEAR_PARAM(lstm_cell_bwd_data_params, batch),
       SUBLINEAR_PARAM(lstm_cell_bwd_data_params, input), SUBLINEAR_PARAM(lstm_cell_bwd_data_params, hidden)});
  static const device::host::kernel& k_weights =
      device::host::register_kernel<lstm_cell_bwd_weights_params, lstm_cell_bwd_weights>(
          "lstm_cell_bwd_weights_f32",
          {SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, dgates), SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, x),
           SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, h_prev),
           SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, dw_ih),
           SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, dw_hh),
           SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, dbias),
           SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, batch),
           SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, input),
           SUBLINEAR_PARAM(lstm_cell_bwd_weights_params, hidden)});
  const char* op = "lstm_cell_backward";
  const cell_sizes s = check_cell(op, x, h_prev, c_prev, w_ih, w_hh);
  const auto bh = std::vector<std::int64_t>{s.batch, s.hidden};
  kernels::require(dh.shape == bh && c.shape == bh && (dc == nullptr || dc->shape == bh), op,
                   "dh, dc and c must be [B, H]");
  kernels::require(gates.shape == std::vector<std::int64_t>{s.batch, 4 * s.hidden}, op,
                   "gates must be [B, 4H], got " + kernels::shape_string(gates));
  kernels::require(dw_ih.shape == w_ih.shape && dw_hh.shape == w_hh.shape && dbias.numel() == 4 * s.hidden, op,
                   "dw_ih, dw_hh and dbias must match w_ih, w_hh and bias");

  lstm_cell_grads g;
  g.dx = ctx.empty({s.batch, s.input});
  g.dh_prev = ctx.empty(bh);
  g.dc_prev = ctx.empty(bh);
  if (s.batch == 0 || s.hidden == 0) return g;
  tensor dgates = ctx.empty({s.batch, 4 * s.hidden});

  auto pg = kernels::zeroed<lstm_cell_bwd_gates_params>();
  pg.dh = dh.data;
  pg.dc = dc != nullptr ? dc->data : nullptr;
  pg.gates = gates.data;
  pg.c = c.data;
  pg.c_prev = c_prev.data;
  pg.dgates = dgates.data;
  pg.dc_prev = g.dc_prev.data;
  pg.batch = s.batch;
  pg.hidden = s.hidden;
  kernels::launch(ctx, k_gates, {kernels::blocks_for(s.batch), 1, 1}, pg);

  auto pd = kernels::zeroed<lstm_cell_bwd_data_params>();
  pd.dgates = dgates.data;
  pd.w_ih = w_ih.data;
  pd.w_hh = w_hh.data;
  pd.dx = g.dx.data;
  pd.dh_prev = g.dh_prev.data;
  pd.batch = s.batch;
  pd.input = s.input;
  pd.hidden = s.hidden;
  kernels::launch(ctx, k_data, {kernels::blocks_for(s.batch), 1, 1}, pd);

  auto pw = kernels::zeroed<lstm_cell_bwd_weights_params>();
  pw.dgates = dgates.data;
  pw.x = x.data;
  pw.h_prev = h_prev.data;
  pw.dw_ih = dw_ih.data;
  pw.dw_hh = dw_hh.data;
  pw.dbias = dbias.data;
  pw.batch = s.batch;
  pw.input = s.input;
  pw.hidden = s.hidden;
  kernels::launch(ctx, k_weights, {kernels::blocks_for(4 * s.hidden), 1, 1}, pw);

  ctx.release(dgates);
  return g;
}

}  // namespace sublinear::workloads::ops
