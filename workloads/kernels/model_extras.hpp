// Ops the models need beyond the kernel library: a channel-window copy between NCHW
// tensors, which is how the DenseNet-like model concatenates feature maps and splits the
// concatenation's gradient back into its inputs, and an in-place scale, which averages
// the LSTM's per-step losses.
#pragma once

#include <cstdint>
#include <span>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// For every n < N, c < channels and spatial index s ("channel_copy_f32", one launch):
//   dst[n, dst_offset + c, s]  =  src[n, src_offset + c, s]   (accumulate == false)
//   dst[n, dst_offset + c, s] +=  src[n, src_offset + c, s]   (accumulate == true)
// dst and src are NCHW with the same N, H and W and any channel counts that hold the
// window; throws config_error otherwise.
void channel_copy(context& ctx, const tensor& dst, std::int64_t dst_offset, const tensor& src,
                  std::int64_t src_offset, std::int64_t channels, bool accumulate);

// A new [N, sum C_i, H, W] tensor holding the inputs side by side along channels, one
// channel_copy launch per input, in order. Every input has the same N, H and W.
tensor channel_concat(context& ctx, std::span<const tensor> inputs);

// x *= alpha, in place ("scale_f32"): turns a sum of losses into their mean.
void scale(context& ctx, const tensor& x, float alpha);

}  // namespace sublinear::workloads::ops
