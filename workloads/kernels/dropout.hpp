// Dropout with a counter-based RNG whose seed and offset travel by value in the kernel's
// parameters, so that replaying the recorded launch reproduces the mask bit for bit.
#pragma once

#include <array>
#include <cstdint>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// Philox-4x32-10 (Salmon et al., SC'11): four 32-bit words from a 128-bit counter and a
// 64-bit key, no state.
[[nodiscard]] std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter,
                                                         std::array<std::uint32_t, 2> key);

// The uniform [0, 1) value that the (seed, offset) stream gives element `index`: Philox with
// key = seed and counter = (index / 4, offset) (each as two 32-bit words, low first), word
// index % 4, top 24 bits scaled by 2^-24. Dropout and init_uniform both use it.
[[nodiscard]] float philox_uniform(std::uint64_t seed, std::uint64_t offset, std::int64_t index);

// Where a dropout call draws from: the caller advances `offset` between calls (PyTorch's
// generator does the same), so two calls with one seed get independent masks.
struct rng_stream {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  // The state to pass to one call, advancing this stream for the next.
  rng_stream next() { return rng_stream{seed, offset++}; }
};

// y = x * keep / (1 - p) where keep = philox_uniform(seed, offset, i) >= p
// ("dropout_fwd_f32"). p in [0, 1]; p == 1 gives zeros. The mask is not stored: backward
// recomputes it from the same seed and offset, which is exactly what a replay does too.
tensor dropout_forward(context& ctx, const tensor& x, float p, rng_stream rng);
// dx = dy * keep / (1 - p), with the forward's p and rng ("dropout_bwd_f32").
tensor dropout_backward(context& ctx, const tensor& dy, float p, rng_stream rng);

}  // namespace sublinear::workloads::ops
