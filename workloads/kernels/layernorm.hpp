// LayerNorm over the last dimension with a learned scale (gamma) and shift (beta).
#pragma once

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

struct layernorm_output {
  tensor y;     // the shape of x
  tensor mean;  // [rows], saved for backward (rows = numel / last dim)
  tensor rstd;  // [rows], 1 / sqrt(var + eps), saved for backward
};

// y = (x - mean) * rstd * gamma + beta over the last dimension D of x; gamma, beta: [D].
layernorm_output layernorm_forward(context& ctx, const tensor& x, const tensor& gamma, const tensor& beta,
                                   float eps = 1e-5f);

// Returns dx (the shape of x); accumulates dgamma += sum_rows dy * xhat and
// dbeta += sum_rows dy, summing rows in index order.
tensor layernorm_backward(context& ctx, const tensor& dy, const tensor& x, const tensor& gamma,
                          const tensor& mean, const tensor& rstd, tensor& dgamma, tensor& dbeta);

}  // namespace sublinear::workloads::ops
