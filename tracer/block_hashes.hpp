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

// Note [Filled fresh blocks]
// Rationale: a block allocated in a traced iteration whose first kernel does not change
//   it has, by the hashes alone, no producer (Note [Unknown producers] in analysis.cpp):
//   it is never evicted, and no recipe may rebuild it, so nothing a recipe through it
//   would rebuild can be evicted either. cuDNN hands each forward convolution a 1 KiB
//   workspace, allocated around it, that the chosen kernel leaves as it found it: every
//   convolution output would be unrebuildable. Hashes cannot tell such a kernel from one
//   reading bytes an unseen writer (a pointer inside a descriptor) put there, nor from one
//   rewriting the bytes the same block held in the previous iteration at the same address.
// Approach: while tracing, the engine fills every block it hands out with
//   `fresh_fill_byte`, and waits for the fill (replay_device::fill). A collector hashing
//   a block before a kernel (one with no kept hash) also checks whether every byte is
//   still the fill; if so, and the kernel leaves the bytes as they were, the launch's
//   record says so (trace::fresh, the FRESH section of the trace file). Analysis then
//   knows that no one wrote the block since it was allocated, seen or not: what its
//   first user reads there is garbage, which a replay into scratch reproduces as well
//   as any, so the block needs no producer (policy::buffer::unwritten_at_first_use). An
//   unseen writer, even one writing the bytes of the iteration before, leaves something
//   other than the fill, and the block stays without a producer. A fresh record is not a
//   write: counted as one, the slot of cuBLAS's workspace, which every GEMM is handed,
//   would become a writing slot (Note [Write generalization] in analysis.cpp), and every
//   recipe reading it would be refused (`EngineFaults.*PersistentWorkspace*`).
// Limitations: a block some writer filled entirely with the fill byte (0xA5: -2.9e-16
//   as float, finite in every float format, so programs that read their fresh memory see
//   no NaN) reads as fresh. The fill costs a device memset and a stream synchronization
//   per allocation in the traced iterations only.
inline constexpr std::uint8_t fresh_fill_byte = 0xA5;

// Whether every one of `bytes` bytes at `data` is `value`.
[[nodiscard]] bool all_bytes_are(const void* data, std::size_t bytes, std::uint8_t value) noexcept;

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
