// The kernels behind resnet_kernels.hpp.
#include <cmath>

#include "resnet/resnet_kernels.hpp"

namespace sublinear::gpu_tests::resnet {
namespace {

constexpr int threads = 256;

unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 64 ? b : 65535 * 64);
}

// Grid-stride loops: any n fits the grid above.
#define SUBLINEAR_FOR_EACH(i, n)                                                                  \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void fill_uniform_kernel(philox_state rng, float* out, std::int64_t n, float lo, float hi) {
  SUBLINEAR_FOR_EACH(i, n) { out[i] = lo + (hi - lo) * philox_uniform(rng, static_cast<std::uint64_t>(i)); }
}

__global__ void fill_labels_kernel(philox_state rng, std::int32_t* labels, std::int32_t n, std::int32_t classes) {
  SUBLINEAR_FOR_EACH(i, n) {
    const auto c = static_cast<std::int32_t>(philox_uniform(rng, static_cast<std::uint64_t>(i)) * classes);
    labels[i] = c < classes ? c : classes - 1;
  }
}

__global__ void relu_kernel(float* x, std::int64_t n) {
  SUBLINEAR_FOR_EACH(i, n) { x[i] = x[i] > 0.0f ? x[i] : 0.0f; }
}

__global__ void relu_backward_kernel(const float* y, float* dy, std::int64_t n) {
  SUBLINEAR_FOR_EACH(i, n) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

__global__ void add_kernel(float* y, const float* x, std::int64_t n) {
  SUBLINEAR_FOR_EACH(i, n) { y[i] += x[i]; }
}

__global__ void average_pool_kernel(const float* x, float* out, std::int64_t planes, std::int64_t hw) {
  SUBLINEAR_FOR_EACH(p, planes) {
    float sum = 0.0f;
    for (std::int64_t j = 0; j < hw; ++j) sum += x[p * hw + j];
    out[p] = sum / static_cast<float>(hw);
  }
}

__global__ void average_pool_backward_kernel(const float* dout, float* dx, std::int64_t planes, std::int64_t hw) {
  SUBLINEAR_FOR_EACH(i, planes * hw) { dx[i] = dout[i / hw] / static_cast<float>(hw); }
}

__global__ void add_row_bias_kernel(float* m, const float* bias, std::int32_t rows, std::int32_t cols) {
  SUBLINEAR_FOR_EACH(i, static_cast<std::int64_t>(rows) * cols) { m[i] += bias[i % cols]; }
}

__global__ void softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels, float* loss,
                                             float* dlogits, std::int32_t rows, std::int32_t cols) {
  SUBLINEAR_FOR_EACH(r, rows) {
    const float* row = logits + r * cols;
    float top = row[0];
    for (std::int32_t c = 1; c < cols; ++c) top = fmaxf(top, row[c]);
    float sum = 0.0f;
    for (std::int32_t c = 0; c < cols; ++c) sum += expf(row[c] - top);
    const std::int32_t label = labels[r];
    loss[r] = logf(sum) - (row[label] - top);
    for (std::int32_t c = 0; c < cols; ++c) {
      const float p = expf(row[c] - top) / sum;
      dlogits[r * cols + c] = (p - (c == label ? 1.0f : 0.0f)) / static_cast<float>(rows);
    }
  }
}

__global__ void column_sums_kernel(const float* m, float* out, std::int32_t rows, std::int32_t cols) {
  SUBLINEAR_FOR_EACH(c, cols) {
    float sum = 0.0f;
    for (std::int32_t r = 0; r < rows; ++r) sum += m[static_cast<std::int64_t>(r) * cols + c];
    out[c] = sum;
  }
}

__global__ void sgd_kernel(float* w, const float* g, std::int64_t n, float lr) {
  SUBLINEAR_FOR_EACH(i, n) { w[i] -= lr * g[i]; }
}

}  // namespace

cudaError_t fill_uniform(philox_state rng, float* out, std::int64_t n, float lo, float hi, cudaStream_t stream) {
  fill_uniform_kernel<<<blocks_for(n), threads, 0, stream>>>(rng, out, n, lo, hi);
  return cudaGetLastError();
}

cudaError_t fill_labels(philox_state rng, std::int32_t* labels, std::int32_t n, std::int32_t classes,
                        cudaStream_t stream) {
  fill_labels_kernel<<<blocks_for(n), threads, 0, stream>>>(rng, labels, n, classes);
  return cudaGetLastError();
}

cudaError_t relu_in_place(float* x, std::int64_t n, cudaStream_t stream) {
  relu_kernel<<<blocks_for(n), threads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t relu_backward_in_place(const float* y, float* dy, std::int64_t n, cudaStream_t stream) {
  relu_backward_kernel<<<blocks_for(n), threads, 0, stream>>>(y, dy, n);
  return cudaGetLastError();
}

cudaError_t add_in_place(float* y, const float* x, std::int64_t n, cudaStream_t stream) {
  add_kernel<<<blocks_for(n), threads, 0, stream>>>(y, x, n);
  return cudaGetLastError();
}

cudaError_t average_pool(const float* x, float* out, std::int64_t planes, std::int64_t hw, cudaStream_t stream) {
  average_pool_kernel<<<blocks_for(planes), threads, 0, stream>>>(x, out, planes, hw);
  return cudaGetLastError();
}

cudaError_t average_pool_backward(const float* dout, float* dx, std::int64_t planes, std::int64_t hw,
                                  cudaStream_t stream) {
  average_pool_backward_kernel<<<blocks_for(planes * hw), threads, 0, stream>>>(dout, dx, planes, hw);
  return cudaGetLastError();
}

cudaError_t add_row_bias(float* m, const float* bias, std::int32_t rows, std::int32_t cols, cudaStream_t stream) {
  add_row_bias_kernel<<<blocks_for(static_cast<std::int64_t>(rows) * cols), threads, 0, stream>>>(m, bias, rows,
                                                                                                   cols);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* loss, float* dlogits,
                                  std::int32_t rows, std::int32_t cols, cudaStream_t stream) {
  softmax_cross_entropy_kernel<<<blocks_for(rows), threads, 0, stream>>>(logits, labels, loss, dlogits, rows, cols);
  return cudaGetLastError();
}

cudaError_t column_sums(const float* m, float* out, std::int32_t rows, std::int32_t cols, cudaStream_t stream) {
  column_sums_kernel<<<blocks_for(cols), threads, 0, stream>>>(m, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t sgd_step(float* w, const float* g, std::int64_t n, float lr, cudaStream_t stream) {
  sgd_kernel<<<blocks_for(n), threads, 0, stream>>>(w, g, n, lr);
  return cudaGetLastError();
}

}  // namespace sublinear::gpu_tests::resnet
