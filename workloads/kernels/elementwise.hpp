// Element-wise ops of the workload library: fill and seeded init, copies between host and
// device, residual add and gradient accumulation.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// ---- fill and init ("fill_f32", "init_uniform_f32") ----------------------------------------

void fill(context& ctx, const tensor& t, float value);
inline void zero(context& ctx, const tensor& t) { fill(ctx, t, 0.0f); }
// Uniform values in [lo, hi) from the Philox stream (seed, offset): element i takes word
// i % 4 of block i / 4 (see dropout.hpp). The same seed and offset give the same values on
// any buffer.
void init_uniform(context& ctx, const tensor& t, float lo, float hi, std::uint64_t seed,
                  std::uint64_t offset = 0);

// ---- copies --------------------------------------------------------------------------------

// Device to device ("copy_f32"): a new tensor with src's shape and values.
tensor copy(context& ctx, const tensor& src);
// dst = src, same element count.
void copy_into(context& ctx, const tensor& dst, const tensor& src);

// Host <-> device through ctx.dev.memcpy_async on ctx.stream, then a synchronize of that
// stream: when these return, the copy is complete.
tensor upload(context& ctx, const std::vector<float>& host, std::vector<std::int64_t> shape);
void upload_into(context& ctx, const tensor& dst, const float* host);
std::vector<float> download(context& ctx, const tensor& src);
void download_into(context& ctx, const tensor& src, float* host);

// ---- residual add ----------------------------------------------------------------------------

// out = a + b ("add_f32"), a new tensor; a and b have the same element count.
tensor add(context& ctx, const tensor& a, const tensor& b);
// dst += src ("accumulate_f32"): gradient accumulation where two branches meet.
void accumulate(context& ctx, const tensor& dst, const tensor& src);
// Gradients of add: da = dy and db = dy, as two new tensors ("add_bwd_f32", one launch).
std::pair<tensor, tensor> add_backward(context& ctx, const tensor& dy);

}  // namespace sublinear::workloads::ops
