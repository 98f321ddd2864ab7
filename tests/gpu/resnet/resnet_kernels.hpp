// The element-wise and reduction kernels of the ResNet-style training program
// (resnet_train.cpp); convolutions, batch normalization and GEMMs come from cuDNN and
// cuBLAS. Every kernel is deterministic: reductions run in a fixed order, no atomics.
// Layouts are NCHW for feature maps and row-major [rows][cols] for matrices.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/philox.hpp"

namespace sublinear::gpu_tests::resnet {

// out[i] = lo + (hi - lo) * uniform(rng, i): the input images, drawn on the device.
cudaError_t fill_uniform(philox_state rng, float* out, std::int64_t n, float lo, float hi, cudaStream_t stream);
// labels[i] = floor(uniform(rng, i) * classes).
cudaError_t fill_labels(philox_state rng, std::int32_t* labels, std::int32_t n, std::int32_t classes,
                        cudaStream_t stream);
// x = max(x, 0) in place.
cudaError_t relu_in_place(float* x, std::int64_t n, cudaStream_t stream);
// dy = y > 0 ? dy : 0 in place (y: the ReLU's output).
cudaError_t relu_backward_in_place(const float* y, float* dy, std::int64_t n, cudaStream_t stream);
// y += x.
cudaError_t add_in_place(float* y, const float* x, std::int64_t n, cudaStream_t stream);
// out[c] = mean of x[c][0..hw) for each of `planes` planes (N * C).
cudaError_t average_pool(const float* x, float* out, std::int64_t planes, std::int64_t hw, cudaStream_t stream);
// dx[c][j] = dout[c] / hw.
cudaError_t average_pool_backward(const float* dout, float* dx, std::int64_t planes, std::int64_t hw,
                                  cudaStream_t stream);
// m[r][c] += bias[c].
cudaError_t add_row_bias(float* m, const float* bias, std::int32_t rows, std::int32_t cols, cudaStream_t stream);
// For each row (sample): loss[r] = -log softmax(logits[r])[labels[r]];
// dlogits[r] = (softmax(logits[r]) - onehot(labels[r])) / rows.
cudaError_t softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* loss, float* dlogits,
                                  std::int32_t rows, std::int32_t cols, cudaStream_t stream);
// out[c] = m[0][c] + m[1][c] + ... in row order.
cudaError_t column_sums(const float* m, float* out, std::int32_t rows, std::int32_t cols, cudaStream_t stream);
// w -= lr * g.
cudaError_t sgd_step(float* w, const float* g, std::int64_t n, float lr, cudaStream_t stream);

}  // namespace sublinear::gpu_tests::resnet
