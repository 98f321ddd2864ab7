// Content hashes of device blocks for write observation: the hash function and the
// hashes kept for reuse between kernels (Note [Hash reuse] in host/host_collector.hpp).
// Shared by the host and the CUPTI collectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "tracer/recorder.hpp"

namespace sublinear::tracer {

// 64-bit content hash used by write observation (fast, not cryptographic).
[[nodiscard]] std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept;

// The hashes an observing collector keeps for reuse (Note [Hash reuse]), shared with the
// host functions on the streams. Thread-safe.
class kept_hashes {
 public:
  // The hash of `b` kept in `epoch`, if any.
  [[nodiscard]] bool find(const block_extent& b, std::uint64_t epoch, std::uint64_t& hash) const;
  // Keeps `hash` for `b` (taken in `epoch`), dropping every kept hash it overlaps.
  void keep(const block_extent& b, std::uint64_t epoch, std::uint64_t hash);
  // Drops the hashes of blocks overlapping [base, base + bytes).
  void drop(std::uint64_t base, std::uint64_t bytes);
  [[nodiscard]] std::size_t size() const;

 private:
  struct entry {
    std::uint64_t size;
    std::uint32_t allocation;
    std::uint64_t epoch;
    std::uint64_t hash;
  };
  void drop_overlapping(std::uint64_t base, std::uint64_t end);  // mutex_ held
  mutable std::mutex mutex_;
  std::map<std::uint64_t, entry> by_base_;  // disjoint extents, by base address
};

}  // namespace sublinear::tracer
