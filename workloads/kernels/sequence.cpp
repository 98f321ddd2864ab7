// Note [Sequence ops]
// Rationale: the glue between the sequence models' cells and blocks. Each forward kernel
//   overwrites its whole output (nothing is zeroed beforehand by a separate memset), so
//   replaying one recorded launch regenerates the buffer on its own.
// Approach: elementwise GELU (grid.x = ceil(n / 256)); mean pooling (grid.x = B) sums the
//   S rows in index order into a float accumulator per column; select and its backward
//   (grid.x = B) copy or add one row per batch element.
// Limitations: none of these kernels fuse with their neighbours; a GPU library would.
#include "workloads/kernels/sequence.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "workloads/kernels/sequence_detail.hpp"
#include "workloads/kernels/vector_math.hpp"

namespace sublinear::workloads::ops {
namespace {

constexpr std::int64_t elementwise_block = 256;

constexpr float inv_sqrt2 = 0.70710678118654752440f;
constexpr float inv_sqrt_2pi = 0.39894228040143267794f;

struct gelu_fwd_params {
  const float* x;
  float* y;
  std::int64_t n;
};

void gelu_fwd(const device::host::launch_config& /*cfg*/, const gelu_fwd_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) {
    const float x = p.x[i];
    p.y[i] = 0.5f * x * (1.0f + detail::verf(x * inv_sqrt2));
  }
}

struct gelu_bwd_params {
  const float* dy;
  const float* x;
  float* dx;
  std::int64_t n;
};

void gelu_bwd(const device::host::launch_config& /*cfg*/, const gelu_bwd_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) {
    const float x = p.x[i];
    const float cdf = 0.5f * (1.0f + detail::verf(x * inv_sqrt2));
    const float pdf = inv_sqrt_2pi * detail::vexp(-0.5f * x * x);
    p.dx[i] = p.dy[i] * (cdf + x * pdf);
  }
}

struct sequence_mean_fwd_params {
  const float* x;
  float* y;
  std::int64_t batch;
  std::int64_t seq;
  std::int64_t d;
};

void sequence_mean_fwd(const device::host::launch_config& /*cfg*/, const sequence_mean_fwd_params& p) {
  const float inv = 1.0f / static_cast<float>(p.seq);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const float* x = p.x + b * p.seq * p.d;
    float* y = p.y + b * p.d;
    for (std::int64_t j = 0; j < p.d; ++j) y[j] = 0.0f;
    for (std::int64_t s = 0; s < p.seq; ++s) detail::axpy(1.0f, x + s * p.d, y, p.d);
    for (std::int64_t j = 0; j < p.d; ++j) y[j] *= inv;
  }
}

struct sequence_mean_bwd_params {
  const float* dy;
  float* dx;
  std::int64_t batch;
  std::int64_t seq;
  std::int64_t d;
};

void sequence_mean_bwd(const device::host::launch_config& /*cfg*/, const sequence_mean_bwd_params& p) {
  const float inv = 1.0f / static_cast<float>(p.seq);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const float* dy = p.dy + b * p.d;
    for (std::int64_t s = 0; s < p.seq; ++s) {
      float* dx = p.dx + (b * p.seq + s) * p.d;
      for (std::int64_t j = 0; j < p.d; ++j) dx[j] = dy[j] * inv;
    }
  }
}

struct sequence_select_params {
  const float* src;
  float* dst;
  std::int64_t batch;
  std::int64_t seq;
  std::int64_t d;
  std::int64_t step;
};

// Forward: dst[b] = src[b, step].
void sequence_select_fwd(const device::host::launch_config& /*cfg*/, const sequence_select_params& p) {
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::memcpy(p.dst + b * p.d, p.src + (b * p.seq + p.step) * p.d,
                static_cast<std::size_t>(p.d) * sizeof(float));
  }
}

// Backward: dst[b, step] += src[b].
void sequence_select_bwd(const device::host::launch_config& /*cfg*/, const sequence_select_params& p) {
  for (std::int64_t b = 0; b < p.batch; ++b) {
    detail::axpy(1.0f, p.src + b * p.d, p.dst + (b * p.seq + p.step) * p.d, p.d);
  }
}

void require_bsd(const tensor& x, const char* op) {
  kernels::require(x.shape.size() == 3, op, "expected [B, S, D], got " + kernels::shape_string(x));
}

}  // namespace

tensor gelu_forward(context& ctx, const tensor& x) {
  static const device::host::kernel& k = device::host::register_kernel<gelu_fwd_params, gelu_fwd>(
      "gelu_fwd_f32", {SUBLINEAR_PARAM(gelu_fwd_params, x), SUBLINEAR_PARAM(gelu_fwd_params, y),
                   SUBLINEAR_PARAM(gelu_fwd_params, n)});
  tensor y = ctx.empty(x.shape);
  if (x.numel() == 0) return y;
  auto p = kernels::zeroed<gelu_fwd_params>();
  p.x = x.data;
  p.y = y.data;
  p.n = x.numel();
  kernels::launch(ctx, k, {kernels::blocks_for(p.n, elementwise_block), 1, 1}, p);
  return y;
}

tensor gelu_backward(context& ctx, const tensor& dy, const tensor& x) {
  static const device::host::kernel& k = device::host::register_kernel<gelu_bwd_params, gelu_bwd>(
      "gelu_bwd_f32", {SUBLINEAR_PARAM(gelu_bwd_params, dy), SUBLINEAR_PARAM(gelu_bwd_params, x),
                   SUBLINEAR_PARAM(gelu_bwd_params, dx), SUBLINEAR_PARAM(gelu_bwd_params, n)});
  kernels::require(dy.shape == x.shape, "gelu_backward",
                  "dy " + kernels::shape_string(dy) + " must match x " + kernels::shape_string(x));
  tensor dx = ctx.empty(x.shape);
  if (x.numel() == 0) return dx;
  auto p = kernels::zeroed<gelu_bwd_params>();
  p.dy = dy.data;
  p.x = x.data;
  p.dx = dx.data;
  p.n = x.numel();
  kernels::launch(ctx, k, {kernels::blocks_for(p.n, elementwise_block), 1, 1}, p);
  return dx;
}

tensor sequence_mean_forward(context& ctx, const tensor& x) {
  static const device::host::kernel& k = device::host::register_kernel<sequence_mean_fwd_params, sequence_mean_fwd>(
      "sequence_mean_fwd_f32",
      {SUBLINEAR_PARAM(sequence_mean_fwd_params, x), SUBLINEAR_PARAM(sequence_mean_fwd_params, y),
       SUBLINEAR_PARAM(sequence_mean_fwd_params, batch), SUBLINEAR_PARAM(sequence_mean_fwd_params, seq), SUBLINEAR_PARAM(sequence_mean_fwd_params, d)});
  require_bsd(x, "sequence_mean_forward");
  kernels::require(x.dim(1) > 0, "sequence_mean_forward", "the sequence must not be empty");
  tensor y = ctx.empty({x.dim(0), x.dim(2)});
  if (y.numel() == 0) return y;
  auto p = kernels::zeroed<sequence_mean_fwd_params>();
  p.x = x.data;
  p.y = y.data;
  p.batch = x.dim(0);
  p.seq = x.dim(1);
  p.d = x.dim(2);
  kernels::launch(ctx, k, {kernels::blocks_for(p.batch), 1, 1}, p, {128, 1, 1});
  return y;
}

tensor sequence_mean_backward(context& ctx, const tensor& dy, std::int64_t seq) {
  static const device::host::kernel& k = device::host::register_kernel<sequence_mean_bwd_params, sequence_mean_bwd>(
      "sequence_mean_bwd_f32",
      {SUBLINEAR_PARAM(sequence_mean_bwd_params, dy), SUBLINEAR_PARAM(sequence_mean_bwd_params, dx),
       SUBLINEAR_PARAM(sequence_mean_bwd_params, batch), SUBLINEAR_PARAM(sequence_mean_bwd_params, seq), SUBLINEAR_PARAM(sequence_mean_bwd_params, d)});
  kernels::require(dy.shape.size() == 2, "sequence_mean_backward", "dy must be [B, D], got " + kernels::shape_string(dy));
  kernels::require(seq > 0, "sequence_mean_backward", "the sequence must not be empty");
  tensor dx = ctx.empty({dy.dim(0), seq, dy.dim(1)});
  if (dx.numel() == 0) return dx;
  auto p = kernels::zeroed<sequence_mean_bwd_params>();
  p.dy = dy.data;
  p.dx = dx.data;
  p.batch = dy.dim(0);
  p.seq = seq;
  p.d = dy.dim(1);
  kernels::launch(ctx, k, {kernels::blocks_for(p.batch), 1, 1}, p, {128, 1, 1});
  return dx;
}

tensor sequence_select_forward(context& ctx, const tensor& x, std::int64_t step) {
  static const device::host::kernel& k = device::host::register_kernel<sequence_select_params, sequence_select_fwd>(
      "sequence_select_fwd_f32",
      {SUBLINEAR_PARAM(sequence_select_params, src), SUBLINEAR_PARAM(sequence_select_params, dst),
       SUBLINEAR_PARAM(sequence_select_params, batch), SUBLINEAR_PARAM(sequence_select_params, seq), SUBLINEAR_PARAM(sequence_select_params, d),
       SUBLINEAR_PARAM(sequence_select_params, step)});
  require_bsd(x, "sequence_select_forward");
  kernels::require(step >= 0 && step < x.dim(1), "sequence_select_forward",
                  "step " + std::to_string(step) + " outside a sequence of " + std::to_string(x.dim(1)));
  tensor y = ctx.empty({x.dim(0), x.dim(2)});
  if (y.numel() == 0) return y;
  auto p = kernels::zeroed<sequence_select_params>();
  p.src = x.data;
  p.dst = y.data;
  p.batch = x.dim(0);
  p.seq = x.dim(1);
  p.d = x.dim(2);
  p.step = step;
  kernels::launch(ctx, k, {kernels::blocks_for(p.batch), 1, 1}, p, {128, 1, 1});
  return y;
}

void sequence_select_backward(context& ctx, const tensor& dy, tensor& dx, std::int64_t step) {
  static const device::host::kernel& k = device::host::register_kernel<sequence_select_params, sequence_select_bwd>(
      "sequence_select_bwd_f32",
      {SUBLINEAR_PARAM(sequence_select_params, src), SUBLINEAR_PARAM(sequence_select_params, dst),
       SUBLINEAR_PARAM(sequence_select_params, batch), SUBLINEAR_PARAM(sequence_select_params, seq), SUBLINEAR_PARAM(sequence_select_params, d),
       SUBLINEAR_PARAM(sequence_select_params, step)});
  require_bsd(dx, "sequence_select_backward");
  kernels::require(step >= 0 && step < dx.dim(1), "sequence_select_backward",
                  "step " + std::to_string(step) + " outside a sequence of " + std::to_string(dx.dim(1)));
  kernels::require(dy.shape == std::vector<std::int64_t>{dx.dim(0), dx.dim(2)}, "sequence_select_backward",
                  "dy must be [B, D] = [" + std::to_string(dx.dim(0)) + "," + std::to_string(dx.dim(2)) +
                      "], got " + kernels::shape_string(dy));
  if (dy.numel() == 0) return;
  auto p = kernels::zeroed<sequence_select_params>();
  p.src = dy.data;
  p.dst = dx.data;
  p.batch = dx.dim(0);
  p.seq = dx.dim(1);
  p.d = dx.dim(2);
  p.step = step;
  kernels::launch(ctx, k, {kernels::blocks_for(p.batch), 1, 1}, p, {128, 1, 1});
}

}  // namespace sublinear::workloads::ops
