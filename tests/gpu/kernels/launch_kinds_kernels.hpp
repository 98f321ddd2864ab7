// Hand-written CUDA kernels launched in the ways Hopper libraries launch theirs: with a
// thread-block cluster (cudaLaunchKernelEx and cudaLaunchAttributeClusterDimension, as
// cuBLASLt, CUTLASS 3 and flash attention do), and inside a captured CUDA graph (as
// torch.compile's reduce-overhead mode does). Plain C++ header; the kernels are in
// launch_kinds_kernels.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sublinear::gpu_tests {

inline constexpr const char* cluster_rank_kernel_name = "sublinear_gpu_cluster_rank";
inline constexpr const char* add_one_kernel_name = "sublinear_gpu_add_one";

// out[b] = 1000 * (b / cluster) + the block's rank in its cluster, one entry per block of a
// `blocks`-block grid launched with clusters of `cluster` blocks along x (`cluster` 0: a
// plain launch, every block alone in its cluster). Needs compute capability 9.0 for
// clusters; without them out[b] = -1.
cudaError_t launch_cluster_rank(std::int32_t* out, std::int32_t blocks, std::int32_t cluster, cudaStream_t stream);

// x[i] += 1.
cudaError_t launch_add_one(float* x, std::int32_t n, cudaStream_t stream);

}  // namespace sublinear::gpu_tests
