// The kernels behind tracer_kernels.hpp. extern "C" so the names CUPTI reports are the
// ones the tests look for.
#include "kernels/tracer_kernels.hpp"

namespace sg = sublinear::gpu_tests;

extern "C" __global__ void sublinear_gpu_gather(sg::gather_operands ops, sg::pointer_triple extra) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= ops.n) return;
  const float v = ops.a[i] + ops.b[i];
  ops.out[i] = v;
  for (int k = 0; k < 3; ++k) extra.p[k][i] = v + static_cast<float>(k);
}

extern "C" __global__ void sublinear_gpu_relu_in_place(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] < 0.0f) x[i] = 0.0f;
}

extern "C" __global__ void sublinear_gpu_partial_sums(const float* in, int n, float* workspace, int blocks) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  float sum = 0.0f;
  for (int i = b; i < n; i += blocks) sum += in[i];
  workspace[b] = sum;
}

extern "C" __global__ void sublinear_gpu_finish_sum(const float* workspace, int blocks, float* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int b = 0; b < blocks; ++b) sum += workspace[b];
  out[0] = sum;
}

extern "C" __global__ void sublinear_gpu_philox_dropout(sg::philox_state rng, const float* in, float* out, int n,
                                                        float keep, float scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = sg::philox_uniform(rng, static_cast<unsigned long long>(i)) < keep ? in[i] * scale : 0.0f;
}

namespace sublinear::gpu_tests {
namespace {
constexpr int threads = 256;
unsigned blocks_for(int n) { return static_cast<unsigned>((n + threads - 1) / threads); }
}  // namespace

cudaError_t launch_gather(gather_operands ops, pointer_triple extra, cudaStream_t stream) {
  sublinear_gpu_gather<<<blocks_for(ops.n), threads, 0, stream>>>(ops, extra);
  return cudaGetLastError();
}

cudaError_t launch_relu_in_place(float* x, std::int32_t n, cudaStream_t stream) {
  sublinear_gpu_relu_in_place<<<blocks_for(n), threads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t launch_partial_sums(const float* in, std::int32_t n, float* workspace, std::int32_t blocks,
                                cudaStream_t stream) {
  sublinear_gpu_partial_sums<<<blocks_for(blocks), threads, 0, stream>>>(in, n, workspace, blocks);
  return cudaGetLastError();
}

cudaError_t launch_finish_sum(const float* workspace, std::int32_t blocks, float* out, cudaStream_t stream) {
  sublinear_gpu_finish_sum<<<1, 1, 0, stream>>>(workspace, blocks, out);
  return cudaGetLastError();
}

cudaError_t launch_philox_dropout(philox_state rng, const float* in, float* out, std::int32_t n, float keep,
                                  float scale, cudaStream_t stream) {
  sublinear_gpu_philox_dropout<<<blocks_for(n), threads, 0, stream>>>(rng, in, out, n, keep, scale);
  return cudaGetLastError();
}

void philox_dropout_reference(philox_state rng, const float* in, float* out, std::int32_t n, float keep,
                              float scale) {
  for (std::int32_t i = 0; i < n; ++i) {
    out[i] = philox_uniform(rng, static_cast<std::uint64_t>(i)) < keep ? in[i] * scale : 0.0f;
  }
}

}  // namespace sublinear::gpu_tests
