// The kernel of Note [Hash on the device] (block_hash_terms.hpp), compiled by nvcc into a
// fatbin that the runtime embeds and loads with cuModuleLoadData (cuda_block_hash.cpp):
// the product links no CUDA runtime, so nothing registers it at load.
#include "runtime/cuda/block_hash_terms.hpp"

namespace bh = sublinear::runtime::block_hash;

// Adds the hash of `bytes` at `data` (8-byte aligned) to *out, which starts at zero. Any
// grid: each thread sums a grid-stride share of the words, each block adds its sum once.
extern "C" __global__ void sublinear_block_hash(const unsigned long long* data, unsigned long long bytes,
                                                unsigned long long* out) {
  const unsigned long long words = bytes / 8;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long first = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long sum = 0;
  for (unsigned long long i = first; i < words; i += stride) sum += bh::term(data[i], i);
  if (first == 0) {
    sum += bh::length_term(bytes);
    if (bytes % 8 != 0) {
      const auto* tail = reinterpret_cast<const unsigned char*>(data) + 8 * words;
      sum += bh::term(bh::tail_word(tail, bytes % 8), words);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xFFFFFFFFu, sum, offset);
  __shared__ unsigned long long warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp != 0) return;
  sum = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xFFFFFFFFu, sum, offset);
  if (lane == 0) atomicAdd(out, sum);
}
