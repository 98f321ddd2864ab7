// Fully connected layer: y = x W^T + b.
#pragma once

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// x is [..., in] (all leading dims flattened into rows), w is [out, in], b is [out] or
// nullptr. Returns y [..., out]: "gemm_nt_f32" then "bias_add_rows_f32".
tensor linear_forward(context& ctx, const tensor& x, const tensor& w, const tensor* b);

// ACCUMULATES dw += dy^T x ("gemm_tn_f32", beta 1) and, if db is given, db += column sums
// of dy ("bias_grad_rows_f32"). Returns dx = dy W ("gemm_nn_f32") as a new tensor shaped
// like x, or an empty tensor (data == nullptr) when need_dx is false (the first layer).
tensor linear_backward(context& ctx, const tensor& x, const tensor& w, const tensor& dy, const tensor& dw,
                       const tensor* db, bool need_dx = true);

// Row-broadcast helpers shared with other ops: y[r, c] += b[c] for every row, and
// db[c] += sum_r dy[r, c] (rows summed in increasing order).
void bias_add_rows(context& ctx, const tensor& y, const tensor& b);
void bias_grad_rows(context& ctx, const tensor& dy, const tensor& db);

}  // namespace sublinear::workloads::ops
