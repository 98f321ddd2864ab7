// The linear layer as GEMMs plus row-broadcast bias kernels.
#include "workloads/kernels/linear.hpp"

#include <cstdint>

#include "workloads/kernels/gemm.hpp"
#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

using kernels::require;
using kernels::shape_string;

struct bias_rows_params {
  float* y;
  const float* b;
  std::int64_t rows, cols;
};
void bias_add_rows_body(const device::host::launch_config& /*cfg*/, const bias_rows_params& p) {
  for (std::int64_t r = 0; r < p.rows; ++r) {
    float* row = p.y + r * p.cols;
    for (std::int64_t c = 0; c < p.cols; ++c) row[c] += p.b[c];
  }
}

struct bias_grad_params {
  const float* dy;
  float* db;
  std::int64_t rows, cols;
};
void bias_grad_rows_body(const device::host::launch_config& /*cfg*/, const bias_grad_params& p) {
  // Column sums accumulate row after row, so each sum runs in increasing row order while
  // the inner loop vectorizes across columns.
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* row = p.dy + r * p.cols;
    for (std::int64_t c = 0; c < p.cols; ++c) p.db[c] += row[c];
  }
}

std::int64_t last_dim(const tensor& t) { return t.shape.empty() ? 0 : t.shape.back(); }

}  // namespace

void bias_add_rows(context& ctx, const tensor& y, const tensor& b) {
  static const device::host::kernel& k = device::host::register_kernel<bias_rows_params, &bias_add_rows_body>(
      "bias_add_rows_f32", {SUBLINEAR_PARAM(bias_rows_params, y), SUBLINEAR_PARAM(bias_rows_params, b),
                            SUBLINEAR_PARAM(bias_rows_params, rows), SUBLINEAR_PARAM(bias_rows_params, cols)});
  const std::int64_t cols = b.numel();
  require(cols > 0 && y.numel() % cols == 0 && last_dim(y) == cols, "bias_add_rows",
          shape_string(y) + " + " + shape_string(b));
  auto p = kernels::zeroed<bias_rows_params>();
  p.y = y.data;
  p.b = b.data;
  p.rows = y.numel() / cols;
  p.cols = cols;
  kernels::launch(ctx, k, {kernels::blocks_for(p.rows), 1, 1}, p);
}

void bias_grad_rows(context& ctx, const tensor& dy, const tensor& db) {
  static const device::host::kernel& k = device::host::register_kernel<bias_grad_params, &bias_grad_rows_body>(
      "bias_grad_rows_f32", {SUBLINEAR_PARAM(bias_grad_params, dy), SUBLINEAR_PARAM(bias_grad_params, db),
                             SUBLINEAR_PARAM(bias_grad_params, rows), SUBLINEAR_PARAM(bias_grad_params, cols)});
  const std::int64_t cols = db.numel();
  require(cols > 0 && dy.numel() % cols == 0 && last_dim(dy) == cols, "bias_grad_rows",
          shape_string(dy) + " -> " + shape_string(db));
  auto p = kernels::zeroed<bias_grad_params>();
  p.dy = dy.data;
  p.db = db.data;
  p.rows = dy.numel() / cols;
  p.cols = cols;
  kernels::launch(ctx, k, {kernels::blocks_for(cols, 256), 1, 1}, p);
}

tensor linear_forward(context& ctx, const tensor& x, const tensor& w, const tensor* b) {
  require(w.shape.size() == 2 && !x.shape.empty() && last_dim(x) == w.dim(1), "linear_forward",
          "x " + shape_string(x) + ", w " + shape_string(w));
  require(b == nullptr || b->numel() == w.dim(0), "linear_forward", "bias " + (b != nullptr ? shape_string(*b) : ""));
  const std::int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  std::vector<std::int64_t> shape = x.shape;
  shape.back() = out;
  tensor y = ctx.empty(std::move(shape));
  gemm_args g;
  g.trans_b = transpose::trans;
  g.m = rows;
  g.n = out;
  g.k = in;
  g.a = x.data;
  g.lda = in;
  g.b = w.data;
  g.ldb = in;
  g.c = y.data;
  g.ldc = out;
  gemm(ctx, g);
  if (b != nullptr) bias_add_rows(ctx, y, *b);
  return y;
}

tensor linear_backward(context& ctx, const tensor& x, const tensor& w, const tensor& dy, const tensor& dw,
                       const tensor* db, bool need_dx) {
  require(w.shape.size() == 2 && !x.shape.empty() && last_dim(x) == w.dim(1), "linear_backward",
          "x " + shape_string(x) + ", w " + shape_string(w));
  const std::int64_t in = w.dim(1), out = w.dim(0), rows = x.numel() / in;
  require(dy.numel() == rows * out && last_dim(dy) == out, "linear_backward", "dy " + shape_string(dy));
  require(dw.numel() == w.numel(), "linear_backward", "dw " + shape_string(dw));
  require(db == nullptr || db->numel() == out, "linear_backward", "db " + (db != nullptr ? shape_string(*db) : ""));

  // dW[out, in] += dy^T[out, rows] x[rows, in]
  gemm_args gw;
  gw.trans_a = transpose::trans;
  gw.m = out;
  gw.n = in;
  gw.k = rows;
  gw.a = dy.data;
  gw.lda = out;
  gw.b = x.data;
  gw.ldb = in;
  gw.beta = 1.0f;
  gw.c = dw.data;
  gw.ldc = in;
  gemm(ctx, gw);
  if (db != nullptr) bias_grad_rows(ctx, dy, *db);

  tensor dx;
  if (!need_dx) return dx;
  dx = ctx.empty(x.shape);
  // dx[rows, in] = dy[rows, out] W[out, in]
  gemm_args gx;
  gx.m = rows;
  gx.n = in;
  gx.k = out;
  gx.a = dy.data;
  gx.lda = out;
  gx.b = w.data;
  gx.ldb = in;
  gx.c = dx.data;
  gx.ldc = in;
  gemm(ctx, gx);
  return dx;
}

}  // namespace sublinear::workloads::ops
