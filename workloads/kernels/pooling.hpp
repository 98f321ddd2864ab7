// Max pooling and global average pooling over NCHW.
#pragma once

#include <cstdint>
#include <vector>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

struct pool2d_options {
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 2, stride_w = 2;
  std::int64_t pad_h = 0, pad_w = 0;

  static pool2d_options square(std::int64_t kernel, std::int64_t stride, std::int64_t pad) {
    return {kernel, kernel, stride, stride, pad, pad};
  }
};

// y[n, c, oy, ox] = max of the window ("maxpool2d_fwd_f32"); padding never wins. Nothing
// is saved: backward recomputes each window's argmax from x (ties go to the first position
// in row-major window order), so it needs x, not an index tensor.
tensor maxpool2d_forward(context& ctx, const tensor& x, const pool2d_options& opt);
// dx: each dy routed to its window's argmax, summed where windows overlap
// ("maxpool2d_bwd_f32"). A new tensor shaped like x.
tensor maxpool2d_backward(context& ctx, const tensor& x, const tensor& dy, const pool2d_options& opt);

// [N, C, H, W] -> [N, C]: the mean of each plane ("global_avgpool_fwd_f32").
tensor global_avgpool_forward(context& ctx, const tensor& x);
// dx[n, c, :, :] = dy[n, c] / (H * W) ("global_avgpool_bwd_f32"); x_shape is the forward's input shape.
tensor global_avgpool_backward(context& ctx, const tensor& dy, const std::vector<std::int64_t>& x_shape);

}  // namespace sublinear::workloads::ops
