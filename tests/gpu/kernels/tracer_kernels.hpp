// Hand-written CUDA kernels that exercise what the CUPTI tracer must get right: pointers
// hidden in by-value structs (and interior ones), a counter-based RNG seeded by value, an
// in-place update and a kernel pair that communicates through a workspace.
//
// The kernels are compiled by nvcc (tracer_kernels.cu); this header is plain C++ so that
// the tests are compiled with the project's warnings. Every launcher returns the launch's
// cudaError_t and enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/philox.hpp"

namespace sublinear::gpu_tests {

// Two inputs and an output behind one by-value parameter. `n` sits between two pointers,
// so the second pointer is at offset 16 after 4 bytes of padding.
struct gather_operands {
  const float* a;
  std::int32_t n;
  const float* b;  // may point inside its block (an interior pointer)
  float* out;
};

// A by-value array of pointers, the shape of a multi-tensor optimizer's argument.
struct pointer_triple {
  float* p[3];
};

// Names as the driver reports them (extern "C" kernels: no mangling).
inline constexpr const char* gather_kernel_name = "sublinear_gpu_gather";
inline constexpr const char* relu_kernel_name = "sublinear_gpu_relu_in_place";
inline constexpr const char* partial_sums_kernel_name = "sublinear_gpu_partial_sums";
inline constexpr const char* finish_sum_kernel_name = "sublinear_gpu_finish_sum";
inline constexpr const char* dropout_kernel_name = "sublinear_gpu_philox_dropout";

// out[i] = a[i] + b[i]; extra.p[k][i] = out[i] + k.
cudaError_t launch_gather(gather_operands ops, pointer_triple extra, cudaStream_t stream);
// x[i] = max(x[i], 0), in place.
cudaError_t launch_relu_in_place(float* x, std::int32_t n, cudaStream_t stream);
// workspace[b] = the sum of in[i] for i = b, b + blocks, ... (one partial sum per block).
cudaError_t launch_partial_sums(const float* in, std::int32_t n, float* workspace, std::int32_t blocks,
                                cudaStream_t stream);
// out[0] = workspace[0] + ... + workspace[blocks - 1], in that order.
cudaError_t launch_finish_sum(const float* workspace, std::int32_t blocks, float* out, cudaStream_t stream);
// out[i] = uniform(rng, i) < keep ? in[i] * scale : 0.
cudaError_t launch_philox_dropout(philox_state rng, const float* in, float* out, std::int32_t n, float keep,
                                  float scale, cudaStream_t stream);

// The dropout kernel's result, computed on the host.
void philox_dropout_reference(philox_state rng, const float* in, float* out, std::int32_t n, float keep,
                              float scale);

}  // namespace sublinear::gpu_tests
