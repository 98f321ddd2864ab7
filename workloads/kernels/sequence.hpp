// Small ops the sequence models need around their cells and blocks: the GELU activation
// of the Transformer's feed-forward layer, mean pooling over the sequence for a
// classification head, and selecting one step of a [B, S, D] sequence (an LSTM's input
// at step t, or last-token pooling).
#pragma once

#include <cstdint>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// y = x * Phi(x) (the exact, erf-based GELU), elementwise, any shape.
tensor gelu_forward(context& ctx, const tensor& x);
// Returns dx = dy * (Phi(x) + x * phi(x)).
tensor gelu_backward(context& ctx, const tensor& dy, const tensor& x);

// x: [B, S, D] -> [B, D], the mean over S (summed in index order).
tensor sequence_mean_forward(context& ctx, const tensor& x);
// dy: [B, D] -> dx: [B, seq, D], dx[b, s] = dy[b] / seq.
tensor sequence_mean_backward(context& ctx, const tensor& dy, std::int64_t seq);

// x: [B, S, D] -> [B, D], the rows x[:, step, :].
tensor sequence_select_forward(context& ctx, const tensor& x, std::int64_t step);
// Accumulates dx[:, step, :] += dy (dx: [B, S, D], dy: [B, D]). Accumulating rather than
// returning a new [B, S, D] tensor lets an unrolled model collect T steps' gradients in
// one buffer (the caller zeroes it once) instead of T mostly-zero ones.
void sequence_select_backward(context& ctx, const tensor& dy, tensor& dx, std::int64_t step);

}  // namespace sublinear::workloads::ops
