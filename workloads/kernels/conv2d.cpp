// Note [Convolution workspace]
// Rationale: cuDNN and PyTorch convolutions take a workspace from the caching allocator and
//   free it right after the kernel, so a trace of a real network is full of short-lived
//   scratch blocks that a replay recipe must re-create (DESIGN.md §8: temporaries get pages
//   at a separate address). The host workloads reproduce that pattern faithfully. A
//   workspace for the whole batch would be nine times a 3x3 convolution's input at batch
//   64: the largest single buffer at the smallest budgets, and a round trip through
//   memory for data a GPU's implicit GEMM never writes out. One sample's lowering stays
//   in cache between im2col and the GEMM.
// Approach: each pass is one kernel with a workspace from ctx.bytes() that holds one
//   sample's lowering (C*KH*KW x OH*OW floats) and is released right after it, as an
//   implicit-GEMM algorithm's small workspace is. "conv2d_fwd_f32" lowers sample n with
//   im2col into the workspace and computes y[n] = W col in it, sample after sample;
//   "conv2d_bwd_filter_f32" re-lowers x and adds dy[n] col^T into dW in sample order (beta
//   = 1), which is the order the batched GEMM summed in; "conv2d_bwd_data_f32" computes
//   dcol = W^T dy[n] into the workspace and col2im scatters it into dx[n] in a fixed loop
//   order. The GEMMs run inside the kernels (gemm_on_this_thread), with the arithmetic of
//   the launched ones. 1x1 stride-1 convolutions take the same path on purpose: every
//   convolution launches a workspace.
// Limitations: no dilation or groups; the lowering is still materialised, a sample at a
//   time.
#include "workloads/kernels/conv2d.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "workloads/kernels/gemm.hpp"
#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

using kernels::require;
using kernels::shape_string;

// im2col: src is the image batch, dst the columns; col2im: src the columns, dst the image.
struct im2col_params {
  const float* src;
  float* dst;
  std::int64_t n, c, h, w;
  std::int64_t kh, kw, sh, sw, ph, pw;
  std::int64_t oh, ow;
};

// Note [Lowering at memory speed]
// Rationale: im2col and col2im move data and compute nothing; a GPU's implicit GEMM does
//   not even materialise them. Written with a bounds test per element they run scalar
//   and take more of a ResNet iteration on the host device than the GEMMs beside them,
//   which overstates what replaying a convolution costs next to what the network computes.
// Approach: for each kernel offset (ky, kx), the output columns whose input column lies
//   inside the image form one range [lo, hi); outside it are zeros (padding). A row is
//   then three plain loops, the middle one a contiguous copy (or add) when the stride is 1,
//   which the compiler vectorizes. A "same" convolution (stride 1, output as wide as the
//   input) goes further: im2col copies each plane whole at one shift and zeroes the
//   columns that wrapped round a row's edge, as rows of 4-16 floats cost more in loop
//   control than in copying. col2im adds into each image element in exactly the
//   order it did before (channel, ky, kx, oy, ox), so both give the bits they gave.
// Limitations: strides above 1 still gather one element at a time.
struct column_range {
  std::int64_t lo, hi;  // output columns ox in [lo, hi) read input column ox * s - pad + k
};

column_range valid_columns(std::int64_t k, std::int64_t pad, std::int64_t stride, std::int64_t in,
                           std::int64_t out) {
  // ox * stride - pad + k >= 0  <=>  ox >= ceil((pad - k) / stride)
  const std::int64_t first = pad - k > 0 ? (pad - k + stride - 1) / stride : 0;
  // ox * stride - pad + k <= in - 1  <=>  ox <= floor((in - 1 + pad - k) / stride)
  const std::int64_t last_num = in - 1 + pad - k;
  const std::int64_t end = last_num >= 0 ? last_num / stride + 1 : 0;
  column_range r{std::min(first, out), std::min(end, out)};
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

// The range of every kernel column offset kx, computed once per launch.
std::vector<column_range> column_ranges(const im2col_params& p) {
  std::vector<column_range> cols(static_cast<std::size_t>(p.kw));
  for (std::int64_t kx = 0; kx < p.kw; ++kx) cols[static_cast<std::size_t>(kx)] = valid_columns(kx, p.pw, p.sw, p.w, p.ow);
  return cols;
}

// Stride 1 with as many output columns as input columns (a "same" convolution): output
// row oy of offset (ky, kx) is input row oy + ky - ph shifted by kx - pw, so the valid rows
// are one contiguous copy of the image at a fixed shift; the columns that wrapped round a
// row edge are zeroed after it.
void im2col_same_plane(const im2col_params& p, const float* __restrict img, float* __restrict out,
                       std::int64_t ky, std::int64_t kx, const column_range& r) {
  const std::int64_t hw = p.h * p.w;
  const std::int64_t shift = (ky - p.ph) * p.w + (kx - p.pw);
  const std::int64_t first = std::max<std::int64_t>(0, -shift);
  const std::int64_t last = std::min(p.oh * p.ow, hw - shift);
  for (std::int64_t f = 0; f < first; ++f) out[f] = 0.0f;
  for (std::int64_t f = first; f < last; ++f) out[f] = img[f + shift];
  for (std::int64_t f = std::max(first, last); f < p.oh * p.ow; ++f) out[f] = 0.0f;
  for (std::int64_t oy = 0; oy < p.oh; ++oy) {
    const std::int64_t iy = oy - p.ph + ky;
    float* row = out + oy * p.ow;
    if (iy < 0 || iy >= p.h) {
      for (std::int64_t ox = 0; ox < p.ow; ++ox) row[ox] = 0.0f;
      continue;
    }
    for (std::int64_t ox = 0; ox < r.lo; ++ox) row[ox] = 0.0f;
    for (std::int64_t ox = r.hi; ox < p.ow; ++ox) row[ox] = 0.0f;
  }
}

void im2col_body(const device::host::launch_config& /*cfg*/, const im2col_params& p) {
  const std::int64_t ohw = p.oh * p.ow;
  const bool same = p.sh == 1 && p.sw == 1 && p.ow == p.w;
  const std::vector<column_range> cols = column_ranges(p);
  float* dst = p.dst;
  for (std::int64_t b = 0; b < p.n; ++b) {
    for (std::int64_t ci = 0; ci < p.c; ++ci) {
      const float* img = p.src + (b * p.c + ci) * p.h * p.w;
      for (std::int64_t ky = 0; ky < p.kh; ++ky) {
        for (std::int64_t kx = 0; kx < p.kw; ++kx) {
          const column_range& r = cols[static_cast<std::size_t>(kx)];
          if (same) {
            im2col_same_plane(p, img, dst, ky, kx, r);
            dst += ohw;
            continue;
          }
          for (std::int64_t oy = 0; oy < p.oh; ++oy) {
            const std::int64_t iy = oy * p.sh - p.ph + ky;
            float* __restrict out = dst + oy * p.ow;
            if (iy < 0 || iy >= p.h) {
              for (std::int64_t ox = 0; ox < p.ow; ++ox) out[ox] = 0.0f;
              continue;
            }
            for (std::int64_t ox = 0; ox < r.lo; ++ox) out[ox] = 0.0f;
            if (r.hi > r.lo) {
              const float* __restrict in = img + iy * p.w + (r.lo * p.sw - p.pw + kx);
              if (p.sw == 1) {
                for (std::int64_t j = 0; j < r.hi - r.lo; ++j) out[r.lo + j] = in[j];
              } else {
                for (std::int64_t j = 0; j < r.hi - r.lo; ++j) out[r.lo + j] = in[j * p.sw];
              }
            }
            for (std::int64_t ox = r.hi; ox < p.ow; ++ox) out[ox] = 0.0f;
          }
          dst += ohw;
        }
      }
    }
  }
}

void col2im_body(const device::host::launch_config& /*cfg*/, const im2col_params& p) {
  const std::int64_t ohw = p.oh * p.ow;
  std::fill(p.dst, p.dst + p.n * p.c * p.h * p.w, 0.0f);
  const std::vector<column_range> cols = column_ranges(p);
  const float* src = p.src;
  for (std::int64_t b = 0; b < p.n; ++b) {
    for (std::int64_t ci = 0; ci < p.c; ++ci) {
      float* img = p.dst + (b * p.c + ci) * p.h * p.w;
      for (std::int64_t ky = 0; ky < p.kh; ++ky) {
        for (std::int64_t kx = 0; kx < p.kw; ++kx) {
          const column_range& r = cols[static_cast<std::size_t>(kx)];
          for (std::int64_t oy = 0; oy < p.oh; ++oy) {
            const std::int64_t iy = oy * p.sh - p.ph + ky;
            if (iy < 0 || iy >= p.h || r.hi == r.lo) continue;
            const float* __restrict in = src + oy * p.ow + r.lo;
            float* __restrict row = img + iy * p.w + (r.lo * p.sw - p.pw + kx);
            if (p.sw == 1) {
              for (std::int64_t j = 0; j < r.hi - r.lo; ++j) row[j] += in[j];
            } else {
              for (std::int64_t j = 0; j < r.hi - r.lo; ++j) row[j * p.sw] += in[j];
            }
          }
          src += ohw;
        }
      }
    }
  }
}

struct bias_fwd_params {
  float* y;  // y[n, c, :] += b[c]
  const float* b;
  std::int64_t n, c, plane;
};
struct bias_bwd_params {
  const float* dy;  // db[c] += sum over n and the plane of dy[n, c, :]
  float* db;
  std::int64_t n, c, plane;
};

void bias_fwd_body(const device::host::launch_config& /*cfg*/, const bias_fwd_params& p) {
  for (std::int64_t b = 0; b < p.n; ++b) {
    for (std::int64_t ci = 0; ci < p.c; ++ci) {
      float* row = p.y + (b * p.c + ci) * p.plane;
      const float v = p.b[ci];
      for (std::int64_t i = 0; i < p.plane; ++i) row[i] += v;
    }
  }
}

void bias_bwd_body(const device::host::launch_config& /*cfg*/, const bias_bwd_params& p) {
  for (std::int64_t ci = 0; ci < p.c; ++ci) {
    double acc = 0.0;
    for (std::int64_t b = 0; b < p.n; ++b) {
      const float* row = p.dy + (b * p.c + ci) * p.plane;
      for (std::int64_t i = 0; i < p.plane; ++i) acc += row[i];
    }
    p.db[ci] += static_cast<float>(acc);
  }
}

const device::host::kernel& bias_fwd_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<bias_fwd_params, &bias_fwd_body>(
      "conv2d_bias_fwd_f32", {SUBLINEAR_PARAM(bias_fwd_params, y), SUBLINEAR_PARAM(bias_fwd_params, b),
                              SUBLINEAR_PARAM(bias_fwd_params, n), SUBLINEAR_PARAM(bias_fwd_params, c),
                              SUBLINEAR_PARAM(bias_fwd_params, plane)});
  return k;
}
const device::host::kernel& bias_bwd_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<bias_bwd_params, &bias_bwd_body>(
      "conv2d_bias_bwd_f32", {SUBLINEAR_PARAM(bias_bwd_params, dy), SUBLINEAR_PARAM(bias_bwd_params, db),
                              SUBLINEAR_PARAM(bias_bwd_params, n), SUBLINEAR_PARAM(bias_bwd_params, c),
                              SUBLINEAR_PARAM(bias_bwd_params, plane)});
  return k;
}

struct geometry {
  std::int64_t n, c, h, w, oc, kh, kw, oh, ow;
  [[nodiscard]] std::int64_t ckk() const { return c * kh * kw; }
  [[nodiscard]] std::int64_t ohw() const { return oh * ow; }
  // One sample's lowering (Note [Convolution workspace]).
  [[nodiscard]] std::size_t workspace_bytes() const {
    return static_cast<std::size_t>(ckk() * ohw()) * sizeof(float);
  }
};

geometry make_geometry(const char* op, const tensor& x, const tensor& w, const conv2d_options& opt) {
  require(x.shape.size() == 4 && w.shape.size() == 4 && x.dim(1) == w.dim(1), op,
          "x " + shape_string(x) + " (NCHW), w " + shape_string(w) + " (OC, C, KH, KW)");
  require(opt.stride_h > 0 && opt.stride_w > 0 && opt.pad_h >= 0 && opt.pad_w >= 0, op, "bad stride or padding");
  geometry g{};
  g.n = x.dim(0);
  g.c = x.dim(1);
  g.h = x.dim(2);
  g.w = x.dim(3);
  g.oc = w.dim(0);
  g.kh = w.dim(2);
  g.kw = w.dim(3);
  const std::int64_t span_h = g.h + 2 * opt.pad_h - g.kh, span_w = g.w + 2 * opt.pad_w - g.kw;
  require(span_h >= 0 && span_w >= 0, op, "kernel larger than the padded input");
  g.oh = span_h / opt.stride_h + 1;
  g.ow = span_w / opt.stride_w + 1;
  return g;
}

im2col_params lowering_params(const geometry& g, const conv2d_options& opt) {
  auto p = kernels::zeroed<im2col_params>();
  p.n = g.n;
  p.c = g.c;
  p.h = g.h;
  p.w = g.w;
  p.kh = g.kh;
  p.kw = g.kw;
  p.sh = opt.stride_h;
  p.sw = opt.stride_w;
  p.ph = opt.pad_h;
  p.pw = opt.pad_w;
  p.oh = g.oh;
  p.ow = g.ow;
  return p;
}

// The three passes' kernels (Note [Convolution workspace]). `lower` carries the geometry
// (its n is the batch; src and dst unused); `ws` holds one sample's columns.
struct conv_pass_params {
  const float* x;   // fwd, bwd_filter: the input; bwd_data: unused
  const float* w;   // fwd, bwd_data: the filter; bwd_filter: unused
  const float* dy;  // bwd_filter, bwd_data: the output's gradient; fwd: unused
  float* out;       // fwd: y; bwd_filter: dW (accumulated); bwd_data: dx
  float* ws;
  std::int64_t oc;
  im2col_params lower;
};

// sample n's lowering parameters, reading `src` and writing `dst`.
im2col_params one_sample(const im2col_params& lower, const float* src, float* dst) {
  im2col_params p = lower;
  p.n = 1;
  p.src = src;
  p.dst = dst;
  return p;
}

void conv_fwd_body(const device::host::launch_config& cfg, const conv_pass_params& p) {
  const im2col_params& l = p.lower;
  const std::int64_t ckk = l.c * l.kh * l.kw, ohw = l.oh * l.ow;
  for (std::int64_t n = 0; n < l.n; ++n) {
    im2col_body(cfg, one_sample(l, p.x + n * l.c * l.h * l.w, p.ws));
    gemm_args mm;  // y[n] (OC x OHW) = W (OC x CKK) col (CKK x OHW)
    mm.m = p.oc;
    mm.n = ohw;
    mm.k = ckk;
    mm.a = p.w;
    mm.lda = ckk;
    mm.b = p.ws;
    mm.ldb = ohw;
    mm.c = p.out + n * p.oc * ohw;
    mm.ldc = ohw;
    gemm_on_this_thread(mm);
  }
}

void conv_bwd_filter_body(const device::host::launch_config& cfg, const conv_pass_params& p) {
  const im2col_params& l = p.lower;
  const std::int64_t ckk = l.c * l.kh * l.kw, ohw = l.oh * l.ow;
  for (std::int64_t n = 0; n < l.n; ++n) {
    im2col_body(cfg, one_sample(l, p.x + n * l.c * l.h * l.w, p.ws));
    gemm_args mm;  // dW (OC x CKK) += dy[n] (OC x OHW) col^T (OHW x CKK)
    mm.trans_b = transpose::trans;
    mm.m = p.oc;
    mm.n = ckk;
    mm.k = ohw;
    mm.a = p.dy + n * p.oc * ohw;
    mm.lda = ohw;
    mm.b = p.ws;
    mm.ldb = ohw;
    mm.beta = 1.0f;
    mm.c = p.out;
    mm.ldc = ckk;
    gemm_on_this_thread(mm);
  }
}

void conv_bwd_data_body(const device::host::launch_config& cfg, const conv_pass_params& p) {
  const im2col_params& l = p.lower;
  const std::int64_t ckk = l.c * l.kh * l.kw, ohw = l.oh * l.ow;
  for (std::int64_t n = 0; n < l.n; ++n) {
    gemm_args mm;  // dcol (CKK x OHW) = W^T (CKK x OC) dy[n] (OC x OHW)
    mm.trans_a = transpose::trans;
    mm.m = ckk;
    mm.n = ohw;
    mm.k = p.oc;
    mm.a = p.w;
    mm.lda = ckk;
    mm.b = p.dy + n * p.oc * ohw;
    mm.ldb = ohw;
    mm.c = p.ws;
    mm.ldc = ohw;
    gemm_on_this_thread(mm);
    col2im_body(cfg, one_sample(l, p.ws, p.out + n * l.c * l.h * l.w));
  }
}

#define SUBLINEAR_CONV_PASS_LAYOUT                                                                     \
  {SUBLINEAR_PARAM(conv_pass_params, x),        SUBLINEAR_PARAM(conv_pass_params, w),                   \
   SUBLINEAR_PARAM(conv_pass_params, dy),       SUBLINEAR_PARAM(conv_pass_params, out),                 \
   SUBLINEAR_PARAM(conv_pass_params, ws),       SUBLINEAR_PARAM(conv_pass_params, oc),                  \
   SUBLINEAR_PARAM(conv_pass_params, lower.src), SUBLINEAR_PARAM(conv_pass_params, lower.dst),          \
   SUBLINEAR_PARAM(conv_pass_params, lower.n),  SUBLINEAR_PARAM(conv_pass_params, lower.c),             \
   SUBLINEAR_PARAM(conv_pass_params, lower.h),  SUBLINEAR_PARAM(conv_pass_params, lower.w),             \
   SUBLINEAR_PARAM(conv_pass_params, lower.kh), SUBLINEAR_PARAM(conv_pass_params, lower.kw),            \
   SUBLINEAR_PARAM(conv_pass_params, lower.sh), SUBLINEAR_PARAM(conv_pass_params, lower.sw),            \
   SUBLINEAR_PARAM(conv_pass_params, lower.ph), SUBLINEAR_PARAM(conv_pass_params, lower.pw),            \
   SUBLINEAR_PARAM(conv_pass_params, lower.oh), SUBLINEAR_PARAM(conv_pass_params, lower.ow)}

const device::host::kernel& conv_fwd_kernel() {
  static const device::host::kernel& k =
      device::host::register_kernel<conv_pass_params, &conv_fwd_body>("conv2d_fwd_f32", SUBLINEAR_CONV_PASS_LAYOUT);
  return k;
}
const device::host::kernel& conv_bwd_filter_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<conv_pass_params, &conv_bwd_filter_body>(
      "conv2d_bwd_filter_f32", SUBLINEAR_CONV_PASS_LAYOUT);
  return k;
}
const device::host::kernel& conv_bwd_data_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<conv_pass_params, &conv_bwd_data_body>(
      "conv2d_bwd_data_f32", SUBLINEAR_CONV_PASS_LAYOUT);
  return k;
}

#undef SUBLINEAR_CONV_PASS_LAYOUT

// Queues one pass on ctx's stream: one block per (output channel, sample) tile.
void launch_pass(context& ctx, const device::host::kernel& k, const geometry& g, const conv2d_options& opt,
                 conv_pass_params p) {
  p.oc = g.oc;
  p.lower = lowering_params(g, opt);
  kernels::launch(ctx, k, {kernels::blocks_for(g.oc), kernels::blocks_for(g.n, 1, kernels::kMaxGridYZ), 1}, p);
}

}  // namespace

std::vector<std::int64_t> conv2d_output_shape(const tensor& x, const tensor& w, const conv2d_options& opt) {
  const geometry g = make_geometry("conv2d", x, w, opt);
  return {g.n, g.oc, g.oh, g.ow};
}

std::size_t conv2d_workspace_bytes(const tensor& x, const tensor& w, const conv2d_options& opt) {
  return make_geometry("conv2d", x, w, opt).workspace_bytes();
}

tensor conv2d_forward(context& ctx, const tensor& x, const tensor& w, const tensor* bias,
                      const conv2d_options& opt) {
  const geometry g = make_geometry("conv2d_forward", x, w, opt);
  require(bias == nullptr || bias->numel() == g.oc, "conv2d_forward", "bias must have OC elements");
  tensor y = ctx.empty({g.n, g.oc, g.oh, g.ow});

  const std::size_t ws_bytes = g.workspace_bytes();
  auto* ws = static_cast<float*>(ctx.bytes(ws_bytes));
  auto p = kernels::zeroed<conv_pass_params>();
  p.x = x.data;
  p.w = w.data;
  p.out = y.data;
  p.ws = ws;
  launch_pass(ctx, conv_fwd_kernel(), g, opt, p);
  ctx.release_bytes(ws, ws_bytes);

  if (bias != nullptr) {
    auto bp = kernels::zeroed<bias_fwd_params>();
    bp.y = y.data;
    bp.b = bias->data;
    bp.n = g.n;
    bp.c = g.oc;
    bp.plane = g.ohw();
    kernels::launch(ctx, bias_fwd_kernel(), {kernels::blocks_for(g.oc), kernels::blocks_for(g.n, 1, kernels::kMaxGridYZ), 1}, bp);
  }
  return y;
}

tensor conv2d_backward(context& ctx, const tensor& x, const tensor& w, const tensor& dy,
                       const conv2d_options& opt, const tensor& dw, const tensor* db, bool need_dx) {
  const geometry g = make_geometry("conv2d_backward", x, w, opt);
  require(dy.shape == std::vector<std::int64_t>{g.n, g.oc, g.oh, g.ow}, "conv2d_backward",
          "dy " + shape_string(dy) + " does not match the forward's output");
  require(dw.numel() == w.numel(), "conv2d_backward", "dw " + shape_string(dw));
  require(db == nullptr || db->numel() == g.oc, "conv2d_backward", "db must have OC elements");
  const std::size_t ws_bytes = g.workspace_bytes();

  {  // dW (OC x CKK) += sum_n dy[n] col[n]^T
    auto* ws = static_cast<float*>(ctx.bytes(ws_bytes));
    auto p = kernels::zeroed<conv_pass_params>();
    p.x = x.data;
    p.dy = dy.data;
    p.out = dw.data;
    p.ws = ws;
    launch_pass(ctx, conv_bwd_filter_kernel(), g, opt, p);
    ctx.release_bytes(ws, ws_bytes);
  }

  if (db != nullptr) {
    auto bp = kernels::zeroed<bias_bwd_params>();
    bp.dy = dy.data;
    bp.db = db->data;
    bp.n = g.n;
    bp.c = g.oc;
    bp.plane = g.ohw();
    kernels::launch(ctx, bias_bwd_kernel(), {kernels::blocks_for(g.oc), 1, 1}, bp);
  }

  tensor dx;
  if (!need_dx) return dx;
  dx = ctx.empty(x.shape);
  auto* ws = static_cast<float*>(ctx.bytes(ws_bytes));
  auto p = kernels::zeroed<conv_pass_params>();
  p.w = w.data;
  p.dy = dy.data;
  p.out = dx.data;
  p.ws = ws;
  launch_pass(ctx, conv_bwd_data_kernel(), g, opt, p);
  ctx.release_bytes(ws, ws_bytes);
  return dx;
}

}  // namespace sublinear::workloads::ops
