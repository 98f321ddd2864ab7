// Note [Convolution workspace]
// Rationale: cuDNN and PyTorch convolutions take a workspace from the caching allocator and
//   free it right after the kernel, so a trace of a real network is full of short-lived
//   scratch blocks that a replay recipe must re-create (DESIGN.md §8: temporaries get pages
//   at a separate address). The host workloads reproduce that pattern faithfully.
// Approach: forward lowers the whole batch with im2col into a workspace from ctx.bytes()
//   (col[n] is C*KH*KW x OH*OW) and runs one strided-batched GEMM y[n] = W col[n], then
//   releases the workspace. Backward re-lowers x for the weight gradient (GEMM batches run in
//   order, so stride_c = 0 with beta = 1 sums over the batch deterministically), releases
//   that workspace, and takes a second one for dcol[n] = W^T dy[n], which col2im scatters
//   into dx in a fixed loop order. 1x1 stride-1 convolutions take the same path on purpose:
//   every convolution launches a workspace.
// Limitations: the workspace holds the whole batch (memory-hungry for big feature maps, as
//   cuDNN's fastest algorithms are); no dilation or groups.
#include "benchmarks/workloads/kernels/conv2d.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "benchmarks/workloads/kernels/gemm.hpp"
#include "benchmarks/workloads/kernels/launch.hpp"

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
//   not even materialise them. Written with a bounds test per element they ran scalar and
//   took a third of a ResNet iteration on the host device (session 17's profile: im2col
//   22%, col2im 11% of the baseline's samples), more than the GEMMs beside them, which
//   overstated what replaying a convolution costs next to what the network computes.
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

void im2col_body(const host::launch_config& /*cfg*/, const im2col_params& p) {
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

void col2im_body(const host::launch_config& /*cfg*/, const im2col_params& p) {
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

void bias_fwd_body(const host::launch_config& /*cfg*/, const bias_fwd_params& p) {
  for (std::int64_t b = 0; b < p.n; ++b) {
    for (std::int64_t ci = 0; ci < p.c; ++ci) {
      float* row = p.y + (b * p.c + ci) * p.plane;
      const float v = p.b[ci];
      for (std::int64_t i = 0; i < p.plane; ++i) row[i] += v;
    }
  }
}

void bias_bwd_body(const host::launch_config& /*cfg*/, const bias_bwd_params& p) {
  for (std::int64_t ci = 0; ci < p.c; ++ci) {
    double acc = 0.0;
    for (std::int64_t b = 0; b < p.n; ++b) {
      const float* row = p.dy + (b * p.c + ci) * p.plane;
      for (std::int64_t i = 0; i < p.plane; ++i) acc += row[i];
    }
    p.db[ci] += static_cast<float>(acc);
  }
}

#define SUBLINEAR_IM2COL_LAYOUT                                                                              \
  {SUBLINEAR_PARAM(im2col_params, src), SUBLINEAR_PARAM(im2col_params, dst), SUBLINEAR_PARAM(im2col_params, n),     \
   SUBLINEAR_PARAM(im2col_params, c),   SUBLINEAR_PARAM(im2col_params, h),   SUBLINEAR_PARAM(im2col_params, w),     \
   SUBLINEAR_PARAM(im2col_params, kh),  SUBLINEAR_PARAM(im2col_params, kw),  SUBLINEAR_PARAM(im2col_params, sh),    \
   SUBLINEAR_PARAM(im2col_params, sw),  SUBLINEAR_PARAM(im2col_params, ph),  SUBLINEAR_PARAM(im2col_params, pw),    \
   SUBLINEAR_PARAM(im2col_params, oh),  SUBLINEAR_PARAM(im2col_params, ow)}

const host::kernel& im2col_kernel() {
  static const host::kernel& k = host::register_kernel<im2col_params, &im2col_body>("im2col_f32", SUBLINEAR_IM2COL_LAYOUT);
  return k;
}
const host::kernel& col2im_kernel() {
  static const host::kernel& k = host::register_kernel<im2col_params, &col2im_body>("col2im_f32", SUBLINEAR_IM2COL_LAYOUT);
  return k;
}
const host::kernel& bias_fwd_kernel() {
  static const host::kernel& k = host::register_kernel<bias_fwd_params, &bias_fwd_body>(
      "conv2d_bias_fwd_f32", {SUBLINEAR_PARAM(bias_fwd_params, y), SUBLINEAR_PARAM(bias_fwd_params, b),
                              SUBLINEAR_PARAM(bias_fwd_params, n), SUBLINEAR_PARAM(bias_fwd_params, c),
                              SUBLINEAR_PARAM(bias_fwd_params, plane)});
  return k;
}
const host::kernel& bias_bwd_kernel() {
  static const host::kernel& k = host::register_kernel<bias_bwd_params, &bias_bwd_body>(
      "conv2d_bias_bwd_f32", {SUBLINEAR_PARAM(bias_bwd_params, dy), SUBLINEAR_PARAM(bias_bwd_params, db),
                              SUBLINEAR_PARAM(bias_bwd_params, n), SUBLINEAR_PARAM(bias_bwd_params, c),
                              SUBLINEAR_PARAM(bias_bwd_params, plane)});
  return k;
}

#undef SUBLINEAR_IM2COL_LAYOUT

struct geometry {
  std::int64_t n, c, h, w, oc, kh, kw, oh, ow;
  [[nodiscard]] std::int64_t ckk() const { return c * kh * kw; }
  [[nodiscard]] std::int64_t ohw() const { return oh * ow; }
  [[nodiscard]] std::size_t workspace_bytes() const {
    return static_cast<std::size_t>(n * ckk() * ohw()) * sizeof(float);
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

host::dim3 lowering_grid(const geometry& g) {
  // One block per (input channel, batch item) plane.
  return {kernels::blocks_for(g.c), kernels::blocks_for(g.n, 1, kernels::kMaxGridYZ), 1};
}

void launch_im2col(context& ctx, const geometry& g, const conv2d_options& opt, const float* x, float* col) {
  auto p = lowering_params(g, opt);
  p.src = x;
  p.dst = col;
  kernels::launch(ctx, im2col_kernel(), lowering_grid(g), p);
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
  auto* col = static_cast<float*>(ctx.bytes(ws_bytes));
  launch_im2col(ctx, g, opt, x.data, col);
  gemm_args mm;  // y[n] (OC x OHW) = W (OC x CKK) col[n] (CKK x OHW)
  mm.m = g.oc;
  mm.n = g.ohw();
  mm.k = g.ckk();
  mm.a = w.data;
  mm.lda = g.ckk();
  mm.b = col;
  mm.ldb = g.ohw();
  mm.c = y.data;
  mm.ldc = g.ohw();
  mm.batch = g.n;
  mm.stride_a = 0;
  mm.stride_b = g.ckk() * g.ohw();
  mm.stride_c = g.oc * g.ohw();
  gemm(ctx, mm);
  ctx.release_bytes(col, ws_bytes);

  if (bias != nullptr) {
    auto p = kernels::zeroed<bias_fwd_params>();
    p.y = y.data;
    p.b = bias->data;
    p.n = g.n;
    p.c = g.oc;
    p.plane = g.ohw();
    kernels::launch(ctx, bias_fwd_kernel(), {kernels::blocks_for(g.oc), kernels::blocks_for(g.n, 1, kernels::kMaxGridYZ), 1}, p);
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

  {  // dW (OC x CKK) += sum_n dy[n] (OC x OHW) col[n]^T (OHW x CKK)
    auto* col = static_cast<float*>(ctx.bytes(ws_bytes));
    launch_im2col(ctx, g, opt, x.data, col);
    gemm_args mm;
    mm.trans_b = transpose::trans;
    mm.m = g.oc;
    mm.n = g.ckk();
    mm.k = g.ohw();
    mm.a = dy.data;
    mm.lda = g.ohw();
    mm.b = col;
    mm.ldb = g.ohw();
    mm.beta = 1.0f;
    mm.c = dw.data;
    mm.ldc = g.ckk();
    mm.batch = g.n;
    mm.stride_a = g.oc * g.ohw();
    mm.stride_b = g.ckk() * g.ohw();
    mm.stride_c = 0;
    gemm(ctx, mm);
    ctx.release_bytes(col, ws_bytes);
  }

  if (db != nullptr) {
    auto p = kernels::zeroed<bias_bwd_params>();
    p.dy = dy.data;
    p.db = db->data;
    p.n = g.n;
    p.c = g.oc;
    p.plane = g.ohw();
    kernels::launch(ctx, bias_bwd_kernel(), {kernels::blocks_for(g.oc), 1, 1}, p);
  }

  tensor dx;
  if (!need_dx) return dx;
  dx = ctx.empty(x.shape);
  auto* dcol = static_cast<float*>(ctx.bytes(ws_bytes));
  gemm_args mm;  // dcol[n] (CKK x OHW) = W^T (CKK x OC) dy[n] (OC x OHW)
  mm.trans_a = transpose::trans;
  mm.m = g.ckk();
  mm.n = g.ohw();
  mm.k = g.oc;
  mm.a = w.data;
  mm.lda = g.ckk();
  mm.b = dy.data;
  mm.ldb = g.ohw();
  mm.c = dcol;
  mm.ldc = g.ohw();
  mm.batch = g.n;
  mm.stride_a = 0;
  mm.stride_b = g.oc * g.ohw();
  mm.stride_c = g.ckk() * g.ohw();
  gemm(ctx, mm);
  auto p = lowering_params(g, opt);
  p.src = dcol;
  p.dst = dx.data;
  kernels::launch(ctx, col2im_kernel(), lowering_grid(g), p);
  ctx.release_bytes(dcol, ws_bytes);
  return dx;
}

}  // namespace sublinear::workloads::ops
