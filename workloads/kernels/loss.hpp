// Fused softmax + cross-entropy, mean over the batch.
#pragma once

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// logits [B, K] (or [..., K], leading dims flattened), labels [B] holding class indices as
// float values (exact below 2^24; a float tensor so the training loop uploads them like any
// other input). Returns the mean of -log softmax(logits)[label] as a 1-element tensor
// ("softmax_xent_fwd_f32"). A label that is not a class index is found only when the kernel
// runs, and aborts the process with a message, as a device-side assert kills a CUDA context.
tensor softmax_cross_entropy_forward(context& ctx, const tensor& logits, const tensor& labels);

// dlogits = grad_scale * (softmax(logits) - onehot(label)) / B ("softmax_xent_bwd_f32"),
// the softmax recomputed from the logits. grad_scale is d(final loss)/d(this loss), 1 when
// this is the loss being minimized. A new tensor shaped like logits.
tensor softmax_cross_entropy_backward(context& ctx, const tensor& logits, const tensor& labels,
                                      float grad_scale = 1.0f);

}  // namespace sublinear::workloads::ops
