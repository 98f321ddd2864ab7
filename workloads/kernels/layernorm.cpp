// Note [LayerNorm kernels]
// Rationale: the Transformer's normalization, with the statistics saved the way
//   frameworks save them (mean and 1/std per row) so that backward never recomputes them
//   and replaying the forward launch regenerates all three outputs at once.
// Approach: three kernels. `layernorm_fwd_f32` (grid.x = rows) writes y, mean and rstd with
//   two passes over the row, accumulating in double so that the variance does not suffer
//   cancellation. `layernorm_bwd_input_f32` (grid.x = rows) writes
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
//   `layernorm_bwd_params_f32` (grid.x = D, one column per block) adds the column sums of
//   dy * xhat and dy onto dgamma and dbeta, rows in index order, so the result does not
//   depend on how many rows a launch covers or where the buffers live.
// Limitations: the statistics use the biased variance, as LayerNorm is defined; rows of
//   length 0 are rejected.
#include "workloads/kernels/layernorm.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "workloads/kernels/sequence_detail.hpp"

namespace sublinear::workloads::ops {
namespace {

struct layernorm_fwd_params {
  const float* x;
  const float* gamma;
  const float* beta;
  float* y;
  float* mean;
  float* rstd;
  std::int64_t rows;
  std::int64_t d;
  float eps;
};

void layernorm_fwd(const device::host::launch_config& /*cfg*/, const layernorm_fwd_params& p) {
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * p.d;
    float* y = p.y + r * p.d;
    double sum = 0.0;
    for (std::int64_t j = 0; j < p.d; ++j) sum += x[j];
    const double mu = sum / static_cast<double>(p.d);
    double sq = 0.0;
    for (std::int64_t j = 0; j < p.d; ++j) {
      const double c = x[j] - mu;
      sq += c * c;
    }
    const float m = static_cast<float>(mu);
    const auto rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(p.d) + p.eps));
    for (std::int64_t j = 0; j < p.d; ++j) y[j] = (x[j] - m) * rs * p.gamma[j] + p.beta[j];
    p.mean[r] = m;
    p.rstd[r] = rs;
  }
}

struct layernorm_bwd_input_params {
  const float* dy;
  const float* x;
  const float* gamma;
  const float* mean;
  const float* rstd;
  float* dx;
  std::int64_t rows;
  std::int64_t d;
};

void layernorm_bwd_input(const device::host::launch_config& /*cfg*/, const layernorm_bwd_input_params& p) {
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const std::int64_t base = r * p.d;
    const float* dy = p.dy + base;
    const float* x = p.x + base;
    float* dx = p.dx + base;
    const float m = p.mean[r];
    const float rs = p.rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (std::int64_t j = 0; j < p.d; ++j) {
      const double g = static_cast<double>(dy[j]) * p.gamma[j];
      sum_g += g;
      sum_gx += g * ((x[j] - m) * rs);
    }
    const auto mean_g = static_cast<float>(sum_g / static_cast<double>(p.d));
    const auto mean_gx = static_cast<float>(sum_gx / static_cast<double>(p.d));
    for (std::int64_t j = 0; j < p.d; ++j) {
      const float xhat = (x[j] - m) * rs;
      dx[j] = rs * (dy[j] * p.gamma[j] - mean_g - xhat * mean_gx);
    }
  }
}

struct layernorm_bwd_params_params {
  const float* dy;
  const float* x;
  const float* mean;
  const float* rstd;
  float* dgamma;
  float* dbeta;
  std::int64_t rows;
  std::int64_t d;
};

void layernorm_bwd_params(const device::host::launch_config& /*cfg*/, const layernorm_bwd_params_params& p) {
  // Row-major sweep for locality; each column still sums its rows in index order,
  // exactly as the one-column-per-block decomposition in grid.x describes.
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* dy = p.dy + r * p.d;
    const float* x = p.x + r * p.d;
    const float m = p.mean[r];
    const float rs = p.rstd[r];
    for (std::int64_t j = 0; j < p.d; ++j) {
      p.dgamma[j] += dy[j] * ((x[j] - m) * rs);
      p.dbeta[j] += dy[j];
    }
  }
}

std::int64_t last_dim(const tensor& x) { return x.shape.empty() ? 0 : x.shape.back(); }

}  // namespace

layernorm_output layernorm_forward(context& ctx, const tensor& x, const tensor& gamma, const tensor& beta,
                                   float eps) {
  static const device::host::kernel& k = device::host::register_kernel<layernorm_fwd_params, layernorm_fwd>(
      "layernorm_fwd_f32",
      {SUBLINEAR_PARAM(layernorm_fwd_params, x), SUBLINEAR_PARAM(layernorm_fwd_params, gamma),
       SUBLINEAR_PARAM(layernorm_fwd_params, beta), SUBLINEAR_PARAM(layernorm_fwd_params, y),
       SUBLINEAR_PARAM(layernorm_fwd_params, mean), SUBLINEAR_PARAM(layernorm_fwd_params, rstd),
       SUBLINEAR_PARAM(layernorm_fwd_params, rows), SUBLINEAR_PARAM(layernorm_fwd_params, d), SUBLINEAR_PARAM(layernorm_fwd_params, eps)});
  const std::int64_t d = last_dim(x);
  kernels::require(d > 0, "layernorm_forward", "x must have a non-empty last dimension, got " + kernels::shape_string(x));
  kernels::require(gamma.numel() == d && beta.numel() == d, "layernorm_forward",
                  "gamma and beta must have " + std::to_string(d) + " elements");
  const std::int64_t rows = x.numel() / d;
  layernorm_output out;
  out.y = ctx.empty(x.shape);
  out.mean = ctx.empty({rows});
  out.rstd = ctx.empty({rows});
  if (rows == 0) return out;
  auto p = kernels::zeroed<layernorm_fwd_params>();
  p.x = x.data;
  p.gamma = gamma.data;
  p.beta = beta.data;
  p.y = out.y.data;
  p.mean = out.mean.data;
  p.rstd = out.rstd.data;
  p.rows = rows;
  p.d = d;
  p.eps = eps;
  kernels::launch(ctx, k, {kernels::blocks_for(rows), 1, 1}, p);
  return out;
}

tensor layernorm_backward(context& ctx, const tensor& dy, const tensor& x, const tensor& gamma,
                          const tensor& mean, const tensor& rstd, tensor& dgamma, tensor& dbeta) {
  static const device::host::kernel& k_input =
      device::host::register_kernel<layernorm_bwd_input_params, layernorm_bwd_input>(
          "layernorm_bwd_input_f32",
          {SUBLINEAR_PARAM(layernorm_bwd_input_params, dy), SUBLINEAR_PARAM(layernorm_bwd_input_params, x),
           SUBLINEAR_PARAM(layernorm_bwd_input_params, gamma), SUBLINEAR_PARAM(layernorm_bwd_input_params, mean),
           SUBLINEAR_PARAM(layernorm_bwd_input_params, rstd), SUBLINEAR_PARAM(layernorm_bwd_input_params, dx),
           SUBLINEAR_PARAM(layernorm_bwd_input_params, rows), SUBLINEAR_PARAM(layernorm_bwd_input_params, d)});
  static const device::host::kernel& k_params =
      device::host::register_kernel<layernorm_bwd_params_params, layernorm_bwd_params>(
          "layernorm_bwd_params_f32",
          {SUBLINEAR_PARAM(layernorm_bwd_params_params, dy), SUBLINEAR_PARAM(layernorm_bwd_params_params, x),
           SUBLINEAR_PARAM(layernorm_bwd_params_params, mean), SUBLINEAR_PARAM(layernorm_bwd_params_params, rstd),
           SUBLINEAR_PARAM(layernorm_bwd_params_params, dgamma), SUBLINEAR_PARAM(layernorm_bwd_params_params, dbeta),
           SUBLINEAR_PARAM(layernorm_bwd_params_params, rows), SUBLINEAR_PARAM(layernorm_bwd_params_params, d)});
  const std::int64_t d = last_dim(x);
  kernels::require(d > 0, "layernorm_backward", "x must have a non-empty last dimension, got " + kernels::shape_string(x));
  const std::int64_t rows = x.numel() / d;
  kernels::require(dy.shape == x.shape, "layernorm_backward",
                  "dy " + kernels::shape_string(dy) + " must match x " + kernels::shape_string(x));
  kernels::require(gamma.numel() == d && dgamma.numel() == d && dbeta.numel() == d, "layernorm_backward",
                  "gamma, dgamma and dbeta must have " + std::to_string(d) + " elements");
  kernels::require(mean.numel() == rows && rstd.numel() == rows, "layernorm_backward",
                  "mean and rstd must have " + std::to_string(rows) + " elements");
  tensor dx = ctx.empty(x.shape);
  if (rows == 0) return dx;
  auto pi = kernels::zeroed<layernorm_bwd_input_params>();
  pi.dy = dy.data;
  pi.x = x.data;
  pi.gamma = gamma.data;
  pi.mean = mean.data;
  pi.rstd = rstd.data;
  pi.dx = dx.data;
  pi.rows = rows;
  pi.d = d;
  kernels::launch(ctx, k_input, {kernels::blocks_for(rows), 1, 1}, pi);
  auto pp = kernels::zeroed<layernorm_bwd_params_params>();
  pp.dy = dy.data;
  pp.x = x.data;
  pp.mean = mean.data;
  pp.rstd = rstd.data;
  pp.dgamma = dgamma.data;
  pp.dbeta = dbeta.data;
  pp.rows = rows;
  pp.d = d;
  kernels::launch(ctx, k_params, {kernels::blocks_for(d), 1, 1}, pp);
  return dx;
}

}  // namespace sublinear::workloads::ops
