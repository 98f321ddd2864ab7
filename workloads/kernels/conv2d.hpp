// 2-D convolution, NCHW, as im2col + GEMM a sample at a time, with a workspace allocated
// around each pass (Note [Convolution workspace] in conv2d.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

struct conv2d_options {
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;

  static conv2d_options square(std::int64_t stride, std::int64_t pad) { return {stride, stride, pad, pad}; }
};

// [N, OC, OH, OW] for x [N, C, H, W] and w [OC, C, KH, KW]; throws config_error when the
// shapes do not fit.
std::vector<std::int64_t> conv2d_output_shape(const tensor& x, const tensor& w, const conv2d_options& opt);
// Bytes of the workspace one forward (and each of the two backward passes) allocates: one
// sample's lowering, C*KH*KW * OH*OW floats.
std::size_t conv2d_workspace_bytes(const tensor& x, const tensor& w, const conv2d_options& opt);

// y = conv(x, w) + bias (bias [OC] or nullptr). Allocates y, then a workspace with
// ctx.bytes(), launches "conv2d_fwd_f32" (per sample: im2col into the workspace, then
// y[n] = W col) and releases the workspace right after; then "conv2d_bias_fwd_f32".
tensor conv2d_forward(context& ctx, const tensor& x, const tensor& w, const tensor* bias,
                      const conv2d_options& opt);

// ACCUMULATES dw += sum_n dy[n] col[n]^T ("conv2d_bwd_filter_f32", its own workspace) and
// db += sums of dy over N, OH, OW ("conv2d_bias_bwd_f32") if db is given. If need_dx,
// returns dx ("conv2d_bwd_data_f32": per sample, dcol = W^T dy[n] into a second workspace,
// then col2im sums it into dx[n]); otherwise returns an empty tensor.
tensor conv2d_backward(context& ctx, const tensor& x, const tensor& w, const tensor& dy,
                       const conv2d_options& opt, const tensor& dw, const tensor* db, bool need_dx = true);

}  // namespace sublinear::workloads::ops
