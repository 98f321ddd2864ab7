// Pooling kernels. Max pooling recomputes its argmax in backward instead of saving indices:
// the forward then has a single output, and backward depends on x, which the layer before
// usually keeps anyway. Window scans run in a fixed row-major order.
#include "workloads/kernels/pooling.hpp"

#include <cstdint>
#include <limits>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

using kernels::require;
using kernels::shape_string;

struct maxpool_params {
  const float* x;
  const float* dy;  // backward only
  float* out;       // forward: y; backward: dx
  std::int64_t n, c, h, w, oh, ow;
  std::int64_t kh, kw, sh, sw, ph, pw;
};

// Index into the plane of the window's first maximum, or -1 if the window is all padding.
inline std::int64_t window_argmax(const maxpool_params& p, const float* plane, std::int64_t oy, std::int64_t ox) {
  std::int64_t best = -1;
  float best_v = -std::numeric_limits<float>::infinity();
  for (std::int64_t ky = 0; ky < p.kh; ++ky) {
    const std::int64_t iy = oy * p.sh - p.ph + ky;
    if (iy < 0 || iy >= p.h) continue;
    for (std::int64_t kx = 0; kx < p.kw; ++kx) {
      const std::int64_t ix = ox * p.sw - p.pw + kx;
      if (ix < 0 || ix >= p.w) continue;
      const float v = plane[iy * p.w + ix];
      // NaN propagates: it wins over every number, and the first NaN is kept.
      if (best < 0 || v > best_v || (v != v && best_v == best_v)) {
        best = iy * p.w + ix;
        best_v = v;
      }
    }
  }
  return best;
}

void maxpool_fwd_body(const device::host::launch_config& /*cfg*/, const maxpool_params& p) {
  for (std::int64_t plane_i = 0; plane_i < p.n * p.c; ++plane_i) {
    const float* plane = p.x + plane_i * p.h * p.w;
    float* out = p.out + plane_i * p.oh * p.ow;
    for (std::int64_t oy = 0; oy < p.oh; ++oy) {
      for (std::int64_t ox = 0; ox < p.ow; ++ox) {
        const std::int64_t at = window_argmax(p, plane, oy, ox);
        out[oy * p.ow + ox] = at < 0 ? -std::numeric_limits<float>::infinity() : plane[at];
      }
    }
  }
}

void maxpool_bwd_body(const device::host::launch_config& /*cfg*/, const maxpool_params& p) {
  for (std::int64_t i = 0; i < p.n * p.c * p.h * p.w; ++i) p.out[i] = 0.0f;
  for (std::int64_t plane_i = 0; plane_i < p.n * p.c; ++plane_i) {
    const float* plane = p.x + plane_i * p.h * p.w;
    const float* dy = p.dy + plane_i * p.oh * p.ow;
    float* dx = p.out + plane_i * p.h * p.w;
    for (std::int64_t oy = 0; oy < p.oh; ++oy) {
      for (std::int64_t ox = 0; ox < p.ow; ++ox) {
        const std::int64_t at = window_argmax(p, plane, oy, ox);
        if (at >= 0) dx[at] += dy[oy * p.ow + ox];
      }
    }
  }
}

#define SUBLINEAR_MAXPOOL_LAYOUT                                                                             \
  {SUBLINEAR_PARAM(maxpool_params, x),  SUBLINEAR_PARAM(maxpool_params, dy), SUBLINEAR_PARAM(maxpool_params, out), \
   SUBLINEAR_PARAM(maxpool_params, n),  SUBLINEAR_PARAM(maxpool_params, c),  SUBLINEAR_PARAM(maxpool_params, h),   \
   SUBLINEAR_PARAM(maxpool_params, w),  SUBLINEAR_PARAM(maxpool_params, oh), SUBLINEAR_PARAM(maxpool_params, ow),  \
   SUBLINEAR_PARAM(maxpool_params, kh), SUBLINEAR_PARAM(maxpool_params, kw), SUBLINEAR_PARAM(maxpool_params, sh),  \
   SUBLINEAR_PARAM(maxpool_params, sw), SUBLINEAR_PARAM(maxpool_params, ph), SUBLINEAR_PARAM(maxpool_params, pw)}

maxpool_params maxpool_geometry(const char* op, const tensor& x, const pool2d_options& opt) {
  require(x.shape.size() == 4, op, "x must be [N, C, H, W], got " + shape_string(x));
  require(opt.kernel_h > 0 && opt.kernel_w > 0 && opt.stride_h > 0 && opt.stride_w > 0 && opt.pad_h >= 0 &&
              opt.pad_w >= 0 && 2 * opt.pad_h <= opt.kernel_h && 2 * opt.pad_w <= opt.kernel_w,
          op, "bad kernel, stride or padding (padding at most half the kernel)");
  auto p = kernels::zeroed<maxpool_params>();
  p.n = x.dim(0);
  p.c = x.dim(1);
  p.h = x.dim(2);
  p.w = x.dim(3);
  p.kh = opt.kernel_h;
  p.kw = opt.kernel_w;
  p.sh = opt.stride_h;
  p.sw = opt.stride_w;
  p.ph = opt.pad_h;
  p.pw = opt.pad_w;
  const std::int64_t span_h = p.h + 2 * p.ph - p.kh, span_w = p.w + 2 * p.pw - p.kw;
  require(span_h >= 0 && span_w >= 0, op, "window larger than the padded input");
  p.oh = span_h / p.sh + 1;
  p.ow = span_w / p.sw + 1;
  return p;
}

struct avgpool_params {
  const float* in;  // forward: x; backward: dy
  float* out;       // forward: y; backward: dx
  std::int64_t planes, plane;
};

void avgpool_fwd_body(const device::host::launch_config& /*cfg*/, const avgpool_params& p) {
  for (std::int64_t i = 0; i < p.planes; ++i) {
    const float* row = p.in + i * p.plane;
    double acc = 0.0;
    for (std::int64_t j = 0; j < p.plane; ++j) acc += row[j];
    p.out[i] = static_cast<float>(acc / static_cast<double>(p.plane));
  }
}

void avgpool_bwd_body(const device::host::launch_config& /*cfg*/, const avgpool_params& p) {
  const float inv = 1.0f / static_cast<float>(p.plane);
  for (std::int64_t i = 0; i < p.planes; ++i) {
    const float g = p.in[i] * inv;
    float* row = p.out + i * p.plane;
    for (std::int64_t j = 0; j < p.plane; ++j) row[j] = g;
  }
}

#define SUBLINEAR_AVGPOOL_LAYOUT                                                                    \
  {SUBLINEAR_PARAM(avgpool_params, in), SUBLINEAR_PARAM(avgpool_params, out),                        \
   SUBLINEAR_PARAM(avgpool_params, planes), SUBLINEAR_PARAM(avgpool_params, plane)}

}  // namespace

tensor maxpool2d_forward(context& ctx, const tensor& x, const pool2d_options& opt) {
  static const device::host::kernel& k =
      device::host::register_kernel<maxpool_params, &maxpool_fwd_body>("maxpool2d_fwd_f32", SUBLINEAR_MAXPOOL_LAYOUT);
  auto p = maxpool_geometry("maxpool2d_forward", x, opt);
  tensor y = ctx.empty({p.n, p.c, p.oh, p.ow});
  p.x = x.data;
  p.out = y.data;
  kernels::launch(ctx, k, {kernels::blocks_for(p.c), kernels::blocks_for(p.n, 1, kernels::kMaxGridYZ), 1}, p);
  return y;
}

tensor maxpool2d_backward(context& ctx, const tensor& x, const tensor& dy, const pool2d_options& opt) {
  static const device::host::kernel& k =
      device::host::register_kernel<maxpool_params, &maxpool_bwd_body>("maxpool2d_bwd_f32", SUBLINEAR_MAXPOOL_LAYOUT);
  auto p = maxpool_geometry("maxpool2d_backward", x, opt);
  require(dy.shape == std::vector<std::int64_t>{p.n, p.c, p.oh, p.ow}, "maxpool2d_backward",
          "dy " + shape_string(dy) + " does not match the forward's output");
  tensor dx = ctx.empty(x.shape);
  p.x = x.data;
  p.dy = dy.data;
  p.out = dx.data;
  kernels::launch(ctx, k, {kernels::blocks_for(p.c), kernels::blocks_for(p.n, 1, kernels::kMaxGridYZ), 1}, p);
  return dx;
}

tensor global_avgpool_forward(context& ctx, const tensor& x) {
  static const device::host::kernel& k =
      device::host::register_kernel<avgpool_params, &avgpool_fwd_body>("global_avgpool_fwd_f32", SUBLINEAR_AVGPOOL_LAYOUT);
  require(x.shape.size() == 4 && x.dim(2) * x.dim(3) > 0, "global_avgpool_forward",
          "x must be [N, C, H, W] with H*W > 0, got " + shape_string(x));
  tensor y = ctx.empty({x.dim(0), x.dim(1)});
  auto p = kernels::zeroed<avgpool_params>();
  p.in = x.data;
  p.out = y.data;
  p.planes = x.dim(0) * x.dim(1);
  p.plane = x.dim(2) * x.dim(3);
  kernels::launch(ctx, k, {kernels::blocks_for(p.planes), 1, 1}, p);
  return y;
}

tensor global_avgpool_backward(context& ctx, const tensor& dy, const std::vector<std::int64_t>& x_shape) {
  static const device::host::kernel& k =
      device::host::register_kernel<avgpool_params, &avgpool_bwd_body>("global_avgpool_bwd_f32", SUBLINEAR_AVGPOOL_LAYOUT);
  require(x_shape.size() == 4 && x_shape[2] * x_shape[3] > 0, "global_avgpool_backward", "x_shape must be NCHW");
  require(dy.numel() == x_shape[0] * x_shape[1], "global_avgpool_backward", "dy " + shape_string(dy) + " is not [N, C]");
  tensor dx = ctx.empty(x_shape);
  auto p = kernels::zeroed<avgpool_params>();
  p.in = dy.data;
  p.out = dx.data;
  p.planes = x_shape[0] * x_shape[1];
  p.plane = x_shape[2] * x_shape[3];
  kernels::launch(ctx, k, {kernels::blocks_for(p.planes), 1, 1}, p);
  return dx;
}

#undef SUBLINEAR_MAXPOOL_LAYOUT
#undef SUBLINEAR_AVGPOOL_LAYOUT

}  // namespace sublinear::workloads::ops
