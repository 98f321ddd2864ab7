// Note [BatchNorm kernels]
// Rationale: BatchNorm is the workload's example of a kernel with a side effect outside its
//   outputs: the training forward updates the running statistics in place, so replaying it
//   verbatim would apply the momentum update twice. The tracer and planner must see it.
// Approach: one kernel per pass, channel by channel. Statistics are reduced in double, in
//   a fixed order (Note [Lane sums]), then rounded to float; normalization is done in float with
//   a per-channel scale = gamma * invstd and shift = beta - mean * scale. Backward uses the
//   saved mean and invstd (never the running statistics) and the textbook formula
//   dx = scale / M * (M * dy - sum(dy) - xhat * sum(dy * xhat)), reductions in double,
//   lane by lane too.
// Limitations: biased variance for normalization, unbiased for the running estimate (as
//   PyTorch); M == 1 leaves the running variance's batch term at the biased value 0.
#include "workloads/kernels/batchnorm.hpp"

#include <cmath>
#include <cstdint>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

using kernels::require;
using kernels::shape_string;

struct bn_fwd_train_params {
  const float* x;
  const float* gamma;
  const float* beta;
  float* y;
  float* running_mean;
  float* running_var;
  float* save_mean;
  float* save_invstd;
  std::int64_t n, c, plane;
  float momentum, eps;
};

// Note [Lane sums]: a sum in double, element by element, waits on each add's latency and
// ran the training forward at a few bytes per cycle, far from memory speed. The sums below
// keep kLanes partial sums, element i of a row going to lane i % kLanes, and add the lanes
// in lane order at the end: independent adds the compiler vectorizes, and a fixed order,
// so the result depends on the data alone (not on alignment or on which thread runs it).
constexpr std::int64_t kLanes = 8;

void lane_sum(const float* row, std::int64_t n, double (&acc)[kLanes]) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(row[i + l]);
  for (std::int64_t l = 0; i < n; ++i, ++l) acc[l] += static_cast<double>(row[i]);
}

void lane_squares(const float* row, std::int64_t n, double mean, double (&acc)[kLanes]) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(row[i + l]) - mean;
      acc[l] += d * d;
    }
  }
  for (std::int64_t l = 0; i < n; ++i, ++l) {
    const double d = static_cast<double>(row[i]) - mean;
    acc[l] += d * d;
  }
}

double fold(const double (&acc)[kLanes]) {
  double s = 0.0;
  for (double a : acc) s += a;
  return s;
}

void bn_fwd_train_body(const device::host::launch_config& /*cfg*/, const bn_fwd_train_params& p) {
  const std::int64_t count = p.n * p.plane;
  for (std::int64_t ci = 0; ci < p.c; ++ci) {
    double acc[kLanes] = {};
    for (std::int64_t b = 0; b < p.n; ++b) lane_sum(p.x + (b * p.c + ci) * p.plane, p.plane, acc);
    const double mean = fold(acc) / static_cast<double>(count);
    double acc2[kLanes] = {};
    for (std::int64_t b = 0; b < p.n; ++b) lane_squares(p.x + (b * p.c + ci) * p.plane, p.plane, mean, acc2);
    const double sq = fold(acc2);
    const double var = sq / static_cast<double>(count);
    const double unbiased = count > 1 ? sq / static_cast<double>(count - 1) : var;
    const auto invstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(p.eps)));
    const auto meanf = static_cast<float>(mean);
    const float scale = p.gamma[ci] * invstd;
    const float shift = p.beta[ci] - meanf * scale;
    for (std::int64_t b = 0; b < p.n; ++b) {
      const float* row = p.x + (b * p.c + ci) * p.plane;
      float* out = p.y + (b * p.c + ci) * p.plane;
      for (std::int64_t i = 0; i < p.plane; ++i) out[i] = row[i] * scale + shift;
    }
    p.save_mean[ci] = meanf;
    p.save_invstd[ci] = invstd;
    p.running_mean[ci] = (1.0f - p.momentum) * p.running_mean[ci] + p.momentum * meanf;
    p.running_var[ci] = (1.0f - p.momentum) * p.running_var[ci] + p.momentum * static_cast<float>(unbiased);
  }
}

struct bn_fwd_eval_params {
  const float* x;
  const float* gamma;
  const float* beta;
  const float* running_mean;
  const float* running_var;
  float* y;
  std::int64_t n, c, plane;
  float eps;
};

void bn_fwd_eval_body(const device::host::launch_config& /*cfg*/, const bn_fwd_eval_params& p) {
  for (std::int64_t ci = 0; ci < p.c; ++ci) {
    const float invstd = 1.0f / std::sqrt(p.running_var[ci] + p.eps);
    const float scale = p.gamma[ci] * invstd;
    const float shift = p.beta[ci] - p.running_mean[ci] * scale;
    for (std::int64_t b = 0; b < p.n; ++b) {
      const float* row = p.x + (b * p.c + ci) * p.plane;
      float* out = p.y + (b * p.c + ci) * p.plane;
      for (std::int64_t i = 0; i < p.plane; ++i) out[i] = row[i] * scale + shift;
    }
  }
}

struct bn_bwd_params {
  const float* x;
  const float* gamma;
  const float* save_mean;
  const float* save_invstd;
  const float* dy;
  float* dx;
  float* dgamma;
  float* dbeta;
  std::int64_t n, c, plane;
};

void bn_bwd_body(const device::host::launch_config& /*cfg*/, const bn_bwd_params& p) {
  const std::int64_t count = p.n * p.plane;
  for (std::int64_t ci = 0; ci < p.c; ++ci) {
    const float mean = p.save_mean[ci];
    const float invstd = p.save_invstd[ci];
    double acc_dy[kLanes] = {}, acc_dy_xhat[kLanes] = {};  // Note [Lane sums]
    for (std::int64_t b = 0; b < p.n; ++b) {
      const float* xr = p.x + (b * p.c + ci) * p.plane;
      const float* dyr = p.dy + (b * p.c + ci) * p.plane;
      for (std::int64_t i = 0; i < p.plane; ++i) {
        const float xhat = (xr[i] - mean) * invstd;
        acc_dy[i % kLanes] += dyr[i];
        acc_dy_xhat[i % kLanes] += static_cast<double>(dyr[i]) * xhat;
      }
    }
    const double sum_dy = fold(acc_dy), sum_dy_xhat = fold(acc_dy_xhat);
    const auto mean_dy = static_cast<float>(sum_dy / static_cast<double>(count));
    const auto mean_dy_xhat = static_cast<float>(sum_dy_xhat / static_cast<double>(count));
    const float scale = p.gamma[ci] * invstd;
    for (std::int64_t b = 0; b < p.n; ++b) {
      const float* xr = p.x + (b * p.c + ci) * p.plane;
      const float* dyr = p.dy + (b * p.c + ci) * p.plane;
      float* dxr = p.dx + (b * p.c + ci) * p.plane;
      for (std::int64_t i = 0; i < p.plane; ++i) {
        const float xhat = (xr[i] - mean) * invstd;
        dxr[i] = scale * (dyr[i] - mean_dy - xhat * mean_dy_xhat);
      }
    }
    p.dgamma[ci] += static_cast<float>(sum_dy_xhat);
    p.dbeta[ci] += static_cast<float>(sum_dy);
  }
}

struct shape_nc {
  std::int64_t n, c, plane;
};

shape_nc check_shapes(const char* op, const tensor& x, std::initializer_list<const tensor*> per_channel) {
  require(x.shape.size() == 4 || x.shape.size() == 2, op, "x must be [N, C, H, W] or [N, C], got " + shape_string(x));
  shape_nc s{x.dim(0), x.dim(1), x.shape.size() == 4 ? x.dim(2) * x.dim(3) : 1};
  for (const tensor* t : per_channel) {
    require(t->numel() == s.c, op, "per-channel tensor " + shape_string(*t) + " for " + std::to_string(s.c) + " channels");
  }
  return s;
}

}  // namespace

batchnorm_forward_result batchnorm2d_forward_train(context& ctx, const tensor& x, const tensor& gamma,
                                                   const tensor& beta, const tensor& running_mean,
                                                   const tensor& running_var, float momentum, float eps) {
  static const device::host::kernel& k = device::host::register_kernel<bn_fwd_train_params, &bn_fwd_train_body>(
      "batchnorm_fwd_train_f32",
      {SUBLINEAR_PARAM(bn_fwd_train_params, x), SUBLINEAR_PARAM(bn_fwd_train_params, gamma),
       SUBLINEAR_PARAM(bn_fwd_train_params, beta), SUBLINEAR_PARAM(bn_fwd_train_params, y),
       SUBLINEAR_PARAM(bn_fwd_train_params, running_mean), SUBLINEAR_PARAM(bn_fwd_train_params, running_var),
       SUBLINEAR_PARAM(bn_fwd_train_params, save_mean), SUBLINEAR_PARAM(bn_fwd_train_params, save_invstd),
       SUBLINEAR_PARAM(bn_fwd_train_params, n), SUBLINEAR_PARAM(bn_fwd_train_params, c),
       SUBLINEAR_PARAM(bn_fwd_train_params, plane), SUBLINEAR_PARAM(bn_fwd_train_params, momentum),
       SUBLINEAR_PARAM(bn_fwd_train_params, eps)});
  const shape_nc s = check_shapes("batchnorm2d_forward_train", x, {&gamma, &beta, &running_mean, &running_var});
  require(s.n * s.plane > 0, "batchnorm2d_forward_train", "no values per channel");
  batchnorm_forward_result r{ctx.empty(x.shape), ctx.empty({s.c}), ctx.empty({s.c})};
  auto p = kernels::zeroed<bn_fwd_train_params>();
  p.x = x.data;
  p.gamma = gamma.data;
  p.beta = beta.data;
  p.y = r.y.data;
  p.running_mean = running_mean.data;
  p.running_var = running_var.data;
  p.save_mean = r.save_mean.data;
  p.save_invstd = r.save_invstd.data;
  p.n = s.n;
  p.c = s.c;
  p.plane = s.plane;
  p.momentum = momentum;
  p.eps = eps;
  kernels::launch(ctx, k, {kernels::blocks_for(s.c), 1, 1}, p);
  return r;
}

tensor batchnorm2d_forward_eval(context& ctx, const tensor& x, const tensor& gamma, const tensor& beta,
                                const tensor& running_mean, const tensor& running_var, float eps) {
  static const device::host::kernel& k = device::host::register_kernel<bn_fwd_eval_params, &bn_fwd_eval_body>(
      "batchnorm_fwd_eval_f32",
      {SUBLINEAR_PARAM(bn_fwd_eval_params, x), SUBLINEAR_PARAM(bn_fwd_eval_params, gamma),
       SUBLINEAR_PARAM(bn_fwd_eval_params, beta), SUBLINEAR_PARAM(bn_fwd_eval_params, running_mean),
       SUBLINEAR_PARAM(bn_fwd_eval_params, running_var), SUBLINEAR_PARAM(bn_fwd_eval_params, y),
       SUBLINEAR_PARAM(bn_fwd_eval_params, n), SUBLINEAR_PARAM(bn_fwd_eval_params, c),
       SUBLINEAR_PARAM(bn_fwd_eval_params, plane), SUBLINEAR_PARAM(bn_fwd_eval_params, eps)});
  const shape_nc s = check_shapes("batchnorm2d_forward_eval", x, {&gamma, &beta, &running_mean, &running_var});
  tensor y = ctx.empty(x.shape);
  auto p = kernels::zeroed<bn_fwd_eval_params>();
  p.x = x.data;
  p.gamma = gamma.data;
  p.beta = beta.data;
  p.running_mean = running_mean.data;
  p.running_var = running_var.data;
  p.y = y.data;
  p.n = s.n;
  p.c = s.c;
  p.plane = s.plane;
  p.eps = eps;
  kernels::launch(ctx, k, {kernels::blocks_for(s.c), 1, 1}, p);
  return y;
}

tensor batchnorm2d_backward(context& ctx, const tensor& x, const tensor& gamma, const tensor& save_mean,
                            const tensor& save_invstd, const tensor& dy, const tensor& dgamma,
                            const tensor& dbeta) {
  static const device::host::kernel& k = device::host::register_kernel<bn_bwd_params, &bn_bwd_body>(
      "batchnorm_bwd_f32",
      {SUBLINEAR_PARAM(bn_bwd_params, x), SUBLINEAR_PARAM(bn_bwd_params, gamma),
       SUBLINEAR_PARAM(bn_bwd_params, save_mean), SUBLINEAR_PARAM(bn_bwd_params, save_invstd),
       SUBLINEAR_PARAM(bn_bwd_params, dy), SUBLINEAR_PARAM(bn_bwd_params, dx), SUBLINEAR_PARAM(bn_bwd_params, dgamma),
       SUBLINEAR_PARAM(bn_bwd_params, dbeta), SUBLINEAR_PARAM(bn_bwd_params, n), SUBLINEAR_PARAM(bn_bwd_params, c),
       SUBLINEAR_PARAM(bn_bwd_params, plane)});
  const shape_nc s =
      check_shapes("batchnorm2d_backward", x, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta});
  require(dy.shape == x.shape, "batchnorm2d_backward", "dy " + shape_string(dy) + " vs x " + shape_string(x));
  tensor dx = ctx.empty(x.shape);
  auto p = kernels::zeroed<bn_bwd_params>();
  p.x = x.data;
  p.gamma = gamma.data;
  p.save_mean = save_mean.data;
  p.save_invstd = save_invstd.data;
  p.dy = dy.data;
  p.dx = dx.data;
  p.dgamma = dgamma.data;
  p.dbeta = dbeta.data;
  p.n = s.n;
  p.c = s.c;
  p.plane = s.plane;
  kernels::launch(ctx, k, {kernels::blocks_for(s.c), 1, 1}, p);
  return dx;
}

}  // namespace sublinear::workloads::ops
