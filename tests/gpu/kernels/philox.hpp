// Philox4x32-10, the counter-based generator eager PyTorch and cuRAND use for dropout,
// written once for host and device.
//
// Note [Philox in the GPU suite]
// Rationale: the replay engine's claim about RNG is that a kernel seeded by value (seed and
//   offset in its parameter bytes) regenerates the same numbers when its recorded bytes are
//   launched again. The suite needs such kernels of its own, and a host copy of the
//   generator to check that the device drew exactly the numbers it should have.
// Approach: the standard Philox 4x32 round function with 10 rounds (Salmon et al., SC'11).
//   The counter is (element group, offset); the key is the seed. Element i uses word i % 4
//   of the block for group i / 4, so every element has its own number and no two launches
//   with different offsets share one.
// Limitations: only what the suite needs (uniform floats in [0, 1) with 24 bits).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SUBLINEAR_GPU_HD __host__ __device__
#else
#define SUBLINEAR_GPU_HD
#endif

namespace sublinear::gpu_tests {

// Seed and offset, passed to kernels by value as eager PyTorch passes them.
struct philox_state {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
};

struct philox_block {
  std::uint32_t v[4];
};

SUBLINEAR_GPU_HD inline philox_block philox4x32_10(philox_block counter, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(m0) * counter.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(m1) * counter.v[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    counter = philox_block{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
    key0 += w0;
    key1 += w1;
  }
  return counter;
}

// The uniform number in [0, 1) of element `i` for `state`.
SUBLINEAR_GPU_HD inline float philox_uniform(philox_state state, std::uint64_t i) {
  const std::uint64_t group = i / 4;
  const philox_block counter{{static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32),
                              static_cast<std::uint32_t>(state.offset),
                              static_cast<std::uint32_t>(state.offset >> 32)}};
  const philox_block r = philox4x32_10(counter, static_cast<std::uint32_t>(state.seed),
                                       static_cast<std::uint32_t>(state.seed >> 32));
  return static_cast<float>(r.v[i % 4] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace sublinear::gpu_tests
