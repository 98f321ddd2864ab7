// The channel-window copy the DenseNet-like model is built on, and an in-place scale.
//
// Note [Concatenation by copies]
// Rationale: a DenseNet layer consumes every earlier feature map of its block. A framework
//   materializes torch.cat(features) for each layer, which makes a dense block's memory
//   grow with the square of its length; that growth is what memory-efficient DenseNet
//   (and recomputation in general) attacks, so the workload reproduces it rather than
//   hiding it behind convolutions that read several inputs.
// Approach: one kernel copies a window of channels from one NCHW tensor into a window of
//   another, optionally adding. Forward concatenation is one launch per input into a
//   fresh tensor; backward slices the concatenation's gradient back into each input's
//   gradient, writing the first contribution and adding the later ones. Each element is
//   touched once per launch, in index order, so the result is the same bits wherever
//   the buffers live.
// Limitations: float32 NCHW only; no fused multi-input launch (a pointer array would
//   need the never-replay treatment of DESIGN.md §6 for no gain here).
#include "workloads/kernels/model_extras.hpp"

#include <cstdint>
#include <string>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

struct channel_copy_params {
  float* dst;
  const float* src;
  std::int64_t batch;
  std::int64_t channels;
  std::int64_t spatial;  // H * W
  std::int64_t dst_channels, dst_offset;
  std::int64_t src_channels, src_offset;
  std::int32_t accumulate;
};

void channel_copy_body(const device::host::launch_config& /*cfg*/, const channel_copy_params& p) {
  for (std::int64_t n = 0; n < p.batch; ++n) {
    for (std::int64_t c = 0; c < p.channels; ++c) {
      float* d = p.dst + ((n * p.dst_channels) + p.dst_offset + c) * p.spatial;
      const float* s = p.src + ((n * p.src_channels) + p.src_offset + c) * p.spatial;
      if (p.accumulate != 0) {
        for (std::int64_t i = 0; i < p.spatial; ++i) d[i] += s[i];
      } else {
        for (std::int64_t i = 0; i < p.spatial; ++i) d[i] = s[i];
      }
    }
  }
}

const device::host::kernel& channel_copy_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<channel_copy_params, &channel_copy_body>(
      "channel_copy_f32",
      {SUBLINEAR_PARAM(channel_copy_params, dst), SUBLINEAR_PARAM(channel_copy_params, src),
       SUBLINEAR_PARAM(channel_copy_params, batch), SUBLINEAR_PARAM(channel_copy_params, channels),
       SUBLINEAR_PARAM(channel_copy_params, spatial), SUBLINEAR_PARAM(channel_copy_params, dst_channels),
       SUBLINEAR_PARAM(channel_copy_params, dst_offset), SUBLINEAR_PARAM(channel_copy_params, src_channels),
       SUBLINEAR_PARAM(channel_copy_params, src_offset), SUBLINEAR_PARAM(channel_copy_params, accumulate)});
  return k;
}

bool is_nchw(const tensor& t) { return t.shape.size() == 4; }

struct scale_params {
  float* x;
  std::int64_t n;
  float alpha;
};

void scale_body(const device::host::launch_config& /*cfg*/, const scale_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.x[i] *= p.alpha;
}

}  // namespace

void channel_copy(context& ctx, const tensor& dst, std::int64_t dst_offset, const tensor& src,
                  std::int64_t src_offset, std::int64_t channels, bool accumulate) {
  const char* op = "channel_copy";
  kernels::require(is_nchw(dst) && is_nchw(src), op,
                   "dst " + kernels::shape_string(dst) + " and src " + kernels::shape_string(src) + " must be NCHW");
  kernels::require(dst.dim(0) == src.dim(0) && dst.dim(2) == src.dim(2) && dst.dim(3) == src.dim(3), op,
                   "dst " + kernels::shape_string(dst) + " and src " + kernels::shape_string(src) +
                       " differ in N, H or W");
  kernels::require(channels >= 0 && dst_offset >= 0 && src_offset >= 0 && dst_offset + channels <= dst.dim(1) &&
                       src_offset + channels <= src.dim(1),
                   op,
                   "window of " + std::to_string(channels) + " channels at dst " + std::to_string(dst_offset) +
                       " / src " + std::to_string(src_offset) + " does not fit dst " + kernels::shape_string(dst) +
                       " and src " + kernels::shape_string(src));
  auto p = kernels::zeroed<channel_copy_params>();
  p.dst = dst.data;
  p.src = src.data;
  p.batch = dst.dim(0);
  p.channels = channels;
  p.spatial = dst.dim(2) * dst.dim(3);
  p.dst_channels = dst.dim(1);
  p.dst_offset = dst_offset;
  p.src_channels = src.dim(1);
  p.src_offset = src_offset;
  p.accumulate = accumulate ? 1 : 0;
  kernels::launch(ctx, channel_copy_kernel(), {kernels::blocks_for(p.batch * channels * p.spatial, 1024), 1, 1}, p);
}

tensor channel_concat(context& ctx, std::span<const tensor> inputs) {
  kernels::require(!inputs.empty(), "channel_concat", "no inputs");
  const tensor& first = inputs.front();
  kernels::require(is_nchw(first), "channel_concat", "input " + kernels::shape_string(first) + " is not NCHW");
  std::int64_t total = 0;
  for (const tensor& t : inputs) {
    kernels::require(is_nchw(t) && t.dim(0) == first.dim(0) && t.dim(2) == first.dim(2) && t.dim(3) == first.dim(3),
                     "channel_concat",
                     "input " + kernels::shape_string(t) + " does not match " + kernels::shape_string(first) +
                         " in N, H and W");
    total += t.dim(1);
  }
  tensor out = ctx.empty({first.dim(0), total, first.dim(2), first.dim(3)});
  std::int64_t offset = 0;
  for (const tensor& t : inputs) {
    channel_copy(ctx, out, offset, t, 0, t.dim(1), false);
    offset += t.dim(1);
  }
  return out;
}

void scale(context& ctx, const tensor& x, float alpha) {
  static const device::host::kernel& k = device::host::register_kernel<scale_params, &scale_body>(
      "scale_f32", {SUBLINEAR_PARAM(scale_params, x), SUBLINEAR_PARAM(scale_params, n),
                    SUBLINEAR_PARAM(scale_params, alpha)});
  auto p = kernels::zeroed<scale_params>();
  p.x = x.data;
  p.n = x.numel();
  p.alpha = alpha;
  kernels::launch(ctx, k, {kernels::blocks_for(p.n, 1024), 1, 1}, p);
}

}  // namespace sublinear::workloads::ops
