// See block_hashes.hpp.
#include "tracer/block_hashes.hpp"

#include <cstring>
#include <iterator>

namespace sublinear::tracer {

bool all_bytes_are(const void* data, std::size_t bytes, std::uint8_t value) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t pattern = 0;
  std::memset(&pattern, value, sizeof pattern);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != pattern) return false;
  }
  for (; i < bytes; ++i)
    if (p[i] != value) return false;
  return true;
}

std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept {
  // Word-at-a-time multiply-xorshift in four lanes of their own seed, 32 bytes a step (one
  // lane's multiplies do not wait for another's), folded at the end: fast enough to hash
  // every touched block of a traced iteration and the replay engine's checks (Note [Unseen
  // writes]), and any changed word changes the result with overwhelming probability.
  const auto* p = static_cast<const unsigned char*>(data);
  auto mix = [](std::uint64_t& h, std::uint64_t w) {
    h ^= w * 0xFF51AFD7ED558CCDULL;
    h = (h << 31) | (h >> 33);
    h *= 0xC4CEB9FE1A85EC53ULL;
  };
  std::uint64_t lane[4] = {0x9E3779B97F4A7C15ULL ^ (bytes * 0xC2B2AE3D27D4EB4FULL), 0x243F6A8885A308D3ULL,
                           0x13198A2E03707344ULL, 0xA4093822299F31D0ULL};
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    std::uint64_t w[4];
    std::memcpy(w, p + i, sizeof w);
    for (int k = 0; k < 4; ++k) mix(lane[k], w[k]);
  }
  std::uint64_t h = lane[0];
  for (int k = 1; k < 4; ++k) mix(h, lane[k]);
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    mix(h, w);
  }
  if (i < bytes) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, bytes - i);
    mix(h, w ^ 0xA5);
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  return h;
}

bool kept_hashes::find(const block_extent& b, std::uint64_t epoch, std::uint64_t& hash) const {
  std::lock_guard lock(mutex_);
  const auto it = by_base_.find(b.base);
  if (it == by_base_.end() || it->second.size != b.size || it->second.allocation != b.allocation ||
      it->second.epoch != epoch) {
    return false;
  }
  hash = it->second.hash;
  return true;
}

void kept_hashes::keep(const block_extent& b, std::uint64_t epoch, std::uint64_t hash) {
  std::lock_guard lock(mutex_);
  drop_overlapping(b.base, b.base + b.size);
  by_base_.emplace(b.base, entry{b.size, b.allocation, epoch, hash});
}

void kept_hashes::drop(std::uint64_t base, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  drop_overlapping(base, base + bytes);
}

std::size_t kept_hashes::size() const {
  std::lock_guard lock(mutex_);
  return by_base_.size();
}

void kept_hashes::drop_overlapping(std::uint64_t base, std::uint64_t end) {
  auto it = by_base_.lower_bound(base);
  // The kept extents are disjoint: only the one before `base` can reach into the range
  // from below.
  if (it != by_base_.begin()) {
    const auto prev = std::prev(it);
    if (prev->first + prev->second.size > base) by_base_.erase(prev);
  }
  while (it != by_base_.end() && it->first < end) it = by_base_.erase(it);
}

}  // namespace sublinear::tracer
