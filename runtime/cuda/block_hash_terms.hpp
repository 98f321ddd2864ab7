// The content hash the GPU computes where the bytes are, as one definition for the kernel
// (block_hash_kernel.cu) and its host reference (the GPU test compares the two).
//
// Note [Hash on the device]
// Rationale: the engine hashes blocks around launches in planned iterations (Note [Unseen
//   writes] in runtime/engine_writes.cpp). Copying each block to the host to hash it there
//   stalls the launching thread until the stream drains, and moves every hashed byte over
//   the PCIe link the offloads use (hundreds of MB an iteration on an LSTM). Hashed where
//   the bytes are, a block costs one kernel reading HBM and eight bytes back.
// Approach: the hash is a sum, modulo 2^64, of one term per 8-byte word, each term a
//   bijection of the word mixed with its index (an odd multiply and xor-shifts, each
//   invertible), plus a term of the length. A sum does not depend on the order threads
//   add, so any grid computes the same value, and changing one word always changes it
//   (its term changes, no other does); several changed words cancel with probability
//   about 2^-64. Bytes past the last whole word form one zero-padded word. The result is
//   ready when an event recorded after its copy has completed (a query, no wait), so the
//   engine settles its checks as the stream passes them, as on the host device.
// Limitations: it is not tracer::hash_bytes; the engine compares only hashes of one
//   buffer, at one address, so the two never meet. A block not 8-byte aligned, a build
//   without nvcc, or a driver that refuses the image (sm_80, sm_90, compute_80 PTX) hashes
//   on the host as before. Compiled here, run only on a GPU (test_gpu_block_hash).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SUBLINEAR_HOST_DEVICE __host__ __device__
#else
#define SUBLINEAR_HOST_DEVICE
#endif

namespace sublinear::runtime::block_hash {

// Word `index`'s term: for a fixed index, a different word gives a different term.
SUBLINEAR_HOST_DEVICE inline std::uint64_t term(std::uint64_t word, std::uint64_t index) {
  std::uint64_t x = word ^ (index * 0x9E3779B97F4A7C15ULL);
  x *= 0xFF51AFD7ED558CCDULL;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ULL;
  x ^= x >> 29;
  return x;
}

// The term of the block's length, so that blocks differing only in trailing zeros differ.
SUBLINEAR_HOST_DEVICE inline std::uint64_t length_term(std::uint64_t bytes) {
  return term(bytes, ~std::uint64_t{0});
}

// The bytes past the last whole word, zero-padded into one little-endian word.
SUBLINEAR_HOST_DEVICE inline std::uint64_t tail_word(const unsigned char* tail, std::uint64_t count) {
  std::uint64_t w = 0;
  for (std::uint64_t k = 0; k < count; ++k) w |= static_cast<std::uint64_t>(tail[k]) << (8 * k);
  return w;
}

// The host reference: what the kernel computes for `bytes` at `data`.
inline std::uint64_t reference(const void* data, std::uint64_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::uint64_t words = bytes / 8;
  std::uint64_t sum = length_term(bytes);
  for (std::uint64_t i = 0; i < words; ++i) {
    std::uint64_t w = 0;
    for (int k = 0; k < 8; ++k) w |= static_cast<std::uint64_t>(p[8 * i + static_cast<std::uint64_t>(k)]) << (8 * k);
    sum += term(w, i);
  }
  if (bytes % 8 != 0) sum += term(tail_word(p + 8 * words, bytes % 8), words);
  return sum;
}

}  // namespace sublinear::runtime::block_hash
