// The arithmetic of the hash the GPU takes (Note [Hash on the device] in
// runtime/cuda/block_hash_terms.hpp), on its host reference: the kernel itself runs only on
// a GPU (tests/gpu/runtime/block_hash_test.cpp compares it with this reference).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cuda/block_hash_terms.hpp"

namespace sublinear::runtime {
namespace {

std::vector<unsigned char> random_bytes(std::size_t n, std::uint32_t seed) {
  std::vector<unsigned char> v(n);
  std::mt19937 random(seed);
  for (auto& b : v) b = static_cast<unsigned char>(random());
  return v;
}

TEST(BlockHashTerms, EveryFlippedBitOfAWordChangesTheHash) {
  auto bytes = random_bytes(4096 + 5, 3);
  const std::uint64_t base = block_hash::reference(bytes.data(), bytes.size());
  int flips = 0;
  for (std::size_t at : {std::size_t{0}, std::size_t{8}, std::size_t{2047}, std::size_t{4095}, std::size_t{4100}}) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[at] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_NE(block_hash::reference(bytes.data(), bytes.size()), base) << "byte " << at << " bit " << bit;
      bytes[at] ^= static_cast<unsigned char>(1u << bit);
      ++flips;
    }
  }
  EXPECT_EQ(block_hash::reference(bytes.data(), bytes.size()), base);
  EXPECT_EQ(flips, 40);
}

TEST(BlockHashTerms, SwappedWordsChangeTheHash) {
  auto bytes = random_bytes(1024, 9);
  const std::uint64_t base = block_hash::reference(bytes.data(), bytes.size());
  std::uint64_t first = 0, last = 0;
  std::memcpy(&first, bytes.data(), 8);
  std::memcpy(&last, bytes.data() + 1016, 8);
  ASSERT_NE(first, last);
  std::memcpy(bytes.data(), &last, 8);
  std::memcpy(bytes.data() + 1016, &first, 8);
  EXPECT_NE(block_hash::reference(bytes.data(), bytes.size()), base);
}

TEST(BlockHashTerms, TrailingZerosAndTheTailCount) {
  std::vector<unsigned char> bytes = random_bytes(61, 4);
  const std::uint64_t short_hash = block_hash::reference(bytes.data(), bytes.size());
  bytes.push_back(0);  // the same words, one zero byte longer: only the length differs
  EXPECT_NE(block_hash::reference(bytes.data(), bytes.size()), short_hash);
  bytes.resize(64, 0);
  EXPECT_NE(block_hash::reference(bytes.data(), 64), block_hash::reference(bytes.data(), 56));
  EXPECT_EQ(block_hash::reference(bytes.data(), 0), block_hash::length_term(0));
}

TEST(BlockHashTerms, ATermIsABijectionOfTheWord) {
  // Inverting each step recovers the word: no two words share a term at one index.
  auto invert_xorshift = [](std::uint64_t y, int shift) {
    std::uint64_t x = y;
    for (int k = 0; k < 64 / shift + 1; ++k) x = y ^ (x >> shift);
    return x;
  };
  auto inverse_of_odd = [](std::uint64_t a) {
    std::uint64_t x = a;  // Newton's iteration modulo 2^64
    for (int k = 0; k < 6; ++k) x *= 2 - a * x;
    return x;
  };
  std::mt19937_64 random(5);
  for (int k = 0; k < 1000; ++k) {
    const std::uint64_t word = random(), index = random() % 100000;
    std::uint64_t x = block_hash::term(word, index);
    x = invert_xorshift(x, 29) * inverse_of_odd(0xC4CEB9FE1A85EC53ULL);
    x = invert_xorshift(x, 33) * inverse_of_odd(0xFF51AFD7ED558CCDULL);
    EXPECT_EQ(x ^ (index * 0x9E3779B97F4A7C15ULL), word);
  }
}

}  // namespace
}  // namespace sublinear::runtime
