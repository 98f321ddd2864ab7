// ReLU forward (in place) and backward. One pass in index order each.
#include "workloads/kernels/activation.hpp"

#include <cstdint>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

struct relu_fwd_params {
  float* x;
  std::int64_t n;
};
void relu_fwd_body(const device::host::launch_config& /*cfg*/, const relu_fwd_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.x[i] = p.x[i] > 0.0f ? p.x[i] : 0.0f;
}

struct relu_bwd_params {
  const float* y;
  const float* dy;
  float* dx;
  std::int64_t n;
};
void relu_bwd_body(const device::host::launch_config& /*cfg*/, const relu_bwd_params& p) {
  // Both loads are unconditional, so the loop vectorizes into a select instead of
  // branching on the sign of every element (Note [Lowering at memory speed], conv2d.cpp).
  for (std::int64_t i = 0; i < p.n; ++i) {
    const float g = p.dy[i];
    p.dx[i] = p.y[i] > 0.0f ? g : 0.0f;
  }
}

}  // namespace

tensor relu_inplace(context& ctx, const tensor& x) {
  static const device::host::kernel& k = device::host::register_kernel<relu_fwd_params, &relu_fwd_body>(
      "relu_fwd_inplace_f32", {SUBLINEAR_PARAM(relu_fwd_params, x), SUBLINEAR_PARAM(relu_fwd_params, n)});
  auto p = kernels::zeroed<relu_fwd_params>();
  p.x = x.data;
  p.n = x.numel();
  kernels::launch(ctx, k, {kernels::blocks_for(p.n, 1024), 1, 1}, p);
  return x;
}

tensor relu_backward(context& ctx, const tensor& y, const tensor& dy) {
  static const device::host::kernel& k = device::host::register_kernel<relu_bwd_params, &relu_bwd_body>(
      "relu_bwd_f32", {SUBLINEAR_PARAM(relu_bwd_params, y), SUBLINEAR_PARAM(relu_bwd_params, dy),
                       SUBLINEAR_PARAM(relu_bwd_params, dx), SUBLINEAR_PARAM(relu_bwd_params, n)});
  kernels::require(y.numel() == dy.numel(), "relu_backward",
                   kernels::shape_string(y) + " vs " + kernels::shape_string(dy));
  tensor dx = ctx.empty(dy.shape);
  auto p = kernels::zeroed<relu_bwd_params>();
  p.y = y.data;
  p.dy = dy.data;
  p.dx = dx.data;
  p.n = dy.numel();
  kernels::launch(ctx, k, {kernels::blocks_for(p.n, 1024), 1, 1}, p);
  return dx;
}

}  // namespace sublinear::workloads::ops
