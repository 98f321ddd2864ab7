// BatchNorm over NCHW (BatchNorm2d) or [N, C] (BatchNorm1d), training and inference.
#pragma once

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

struct batchnorm_forward_result {
  tensor y;            // [N, C, H, W]
  tensor save_mean;    // [C], batch mean
  tensor save_invstd;  // [C], 1 / sqrt(biased batch variance + eps)
};

// Training-mode forward ("batchnorm_fwd_train_f32", one launch): normalizes with the batch
// statistics and UPDATES running_mean and running_var IN PLACE:
//   running = (1 - momentum) * running + momentum * batch_stat,
// with the unbiased batch variance (PyTorch's convention). That in-place update is a side
// effect a replay must not repeat (DESIGN.md §8). gamma, beta, running_* are [C].
batchnorm_forward_result batchnorm2d_forward_train(context& ctx, const tensor& x, const tensor& gamma,
                                                   const tensor& beta, const tensor& running_mean,
                                                   const tensor& running_var, float momentum = 0.1f,
                                                   float eps = 1e-5f);

// Inference-mode forward with the running statistics ("batchnorm_fwd_eval_f32").
tensor batchnorm2d_forward_eval(context& ctx, const tensor& x, const tensor& gamma, const tensor& beta,
                                const tensor& running_mean, const tensor& running_var, float eps = 1e-5f);

// Backward of the training forward ("batchnorm_bwd_f32", one launch): ACCUMULATES
// dgamma += sum(dy * xhat) and dbeta += sum(dy) per channel; returns dx as a new tensor.
tensor batchnorm2d_backward(context& ctx, const tensor& x, const tensor& gamma, const tensor& save_mean,
                            const tensor& save_invstd, const tensor& dy, const tensor& dgamma,
                            const tensor& dbeta);

}  // namespace sublinear::workloads::ops
