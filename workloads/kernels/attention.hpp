// Multi-head scaled dot-product self-attention (the core between the projections):
// out = softmax(Q K^T / sqrt(d) [+ causal mask]) V, per batch element and head.
//
// Layout: token-major. Q, K, V and the output are [B, S, heads * d] row-major: a token's
// row holds its heads side by side (head h at columns [h*d, (h+1)*d)), exactly what a
// linear layer over [B*S, model] produces, so no transpose is needed on either side. The
// packed form takes a fused projection's output [B, S, 3 * heads * d], each row being
// Q | K | V. The probabilities are [B, heads, S, S].
#pragma once

#include <cstdint>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

struct attention_output {
  tensor out;    // [B, S, heads * d]
  tensor probs;  // [B, heads, S, S], the softmax, saved for backward (zero above the
                 // diagonal when causal)
};

struct attention_grads {
  tensor dq, dk, dv;  // each [B, S, heads * d]
};

// q, k, v: [B, S, heads * d]. `causal`: token i attends to tokens 0..i only.
attention_output attention_forward(context& ctx, const tensor& q, const tensor& k, const tensor& v,
                                   std::int64_t heads, bool causal = false);
// dout: [B, S, heads * d]; probs from the forward. Returns new dq, dk, dv. Masked entries
// have zero probability, so no mask argument is needed.
attention_grads attention_backward(context& ctx, const tensor& dout, const tensor& q, const tensor& k,
                                   const tensor& v, const tensor& probs, std::int64_t heads);

// qkv: [B, S, 3 * heads * d] (Q | K | V per row).
attention_output attention_forward_packed(context& ctx, const tensor& qkv, std::int64_t heads,
                                          bool causal = false);
// Returns d(qkv): [B, S, 3 * heads * d].
tensor attention_backward_packed(context& ctx, const tensor& dout, const tensor& qkv, const tensor& probs,
                                 std::int64_t heads);

}  // namespace sublinear::workloads::ops
