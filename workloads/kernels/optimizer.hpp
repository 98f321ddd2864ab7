// Optimizer steps as multi-tensor kernels: many parameter tensors per launch, their
// pointers in arrays inside a by-value params struct (PyTorch's multi_tensor_apply).
#pragma once

#include <cstdint>
#include <span>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// Tensors per launch; a longer list is split into several launches, in list order.
inline constexpr int kMultiTensorMax = 32;

struct sgd_options {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

// For each i and element j ("sgd_momentum_step_f32"):
//   g = grad + weight_decay * param;  buf = momentum * buf + g;  param -= lr * buf.
// Updates params and momentum_bufs in place; bufs start at zero (the caller zeroes them).
void sgd_step(context& ctx, std::span<const tensor> params, std::span<const tensor> grads,
              std::span<const tensor> momentum_bufs, const sgd_options& opt);

struct adam_options {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // L2, added to the gradient (Adam, not AdamW)
};

// One Adam step, step >= 1 counting from 1 ("adam_step_f32"):
//   g = grad + weight_decay * param
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   param -= lr * (m / bc1) / (sqrt(v / bc2) + eps),  bc = 1 - beta^step (double, rounded to float)
// Updates params, m and v in place; m and v start at zero.
void adam_step(context& ctx, std::span<const tensor> params, std::span<const tensor> grads,
               std::span<const tensor> m, std::span<const tensor> v, std::int64_t step, const adam_options& opt);

// The scalar bias correction the Adam kernel uses: 1 - beta^step in double, rounded to float.
[[nodiscard]] float adam_bias_correction(float beta, std::int64_t step);

}  // namespace sublinear::workloads::ops
