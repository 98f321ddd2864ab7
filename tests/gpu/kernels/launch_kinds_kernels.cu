#include "kernels/launch_kinds_kernels.hpp"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace sublinear::gpu_tests {

extern "C" __global__ void sublinear_gpu_cluster_rank(std::int32_t* out) {
  if (threadIdx.x != 0) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  out[blockIdx.x] = 1000 * static_cast<std::int32_t>(blockIdx.x / cluster.dim_blocks().x) +
                    static_cast<std::int32_t>(cluster.block_rank());
#else
  out[blockIdx.x] = -1;
#endif
}

extern "C" __global__ void sublinear_gpu_add_one(float* x, std::int32_t n) {
  const std::int32_t i = static_cast<std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

cudaError_t launch_cluster_rank(std::int32_t* out, std::int32_t blocks, std::int32_t cluster, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(32);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = cluster > 0 ? 1 : 0;
  return cudaLaunchKernelEx(&config, sublinear_gpu_cluster_rank, out);
}

cudaError_t launch_add_one(float* x, std::int32_t n, cudaStream_t stream) {
  sublinear_gpu_add_one<<<(n + 255) / 256, 256, 0, stream>>>(x, n);
  return cudaGetLastError();
}

}  // namespace sublinear::gpu_tests
