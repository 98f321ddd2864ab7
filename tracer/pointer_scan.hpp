// Pointer discovery: which live blocks a launch's parameter bytes point into.
//
// Note [Pointer scan]
// Rationale: a kernel reaches device memory only through addresses; on a GPU the
//   addresses it receives directly are in its parameter block, whatever the parameter
//   types are (plain pointers, pointer arrays in a by-value struct such as a fused
//   optimizer's TensorListMetadata, an iterator holding a base pointer). Types are not
//   known (cuFuncGetParamInfo gives offsets and sizes only), so every aligned 8-byte word
//   is a candidate, and so is the 8 bytes at any other offset that share no byte with an
//   aligned hit (a pointer inside a packed struct); a candidate that falls inside a live
//   block (interior pointers count: a view, a slice, a channel offset) makes the launch
//   touch that whole block.
// Approach: `block_map` is our own address map of live blocks, maintained from the
//   allocator's alloc/free events: cheaper than asking the allocator under its lock, and
//   replayable from a trace. Lookups are the hot path (every word of every launch), so
//   the map is a hash of 2 MiB pages, each holding the few blocks that overlap it in
//   address order, behind a [lowest base, highest end) range test that rejects most
//   scalars at once. Inserting a block registers it in every page it overlaps, up to
//   `max_paged_span` pages; a larger block goes in an ordered map searched after the
//   pages, so a block costs at most that many entries whatever size a trace gives it.
// Limitations: pointers the kernel finds in device memory (NCCL work FIFOs, batched and
//   grouped GEMM pointer arrays, TMA descriptors, module globals) are invisible here;
//   such kernels go on the never-replay list and whatever they touch is never evicted (a
//   block only read through such memory is not protected: docs/tracer.md). A
//   scalar whose bits happen to equal a live address adds a spurious, harmless touch. A
//   one-past-the-end pointer is not counted (it is the next block's base as often as not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/events.hpp"

namespace sublinear::tracer {

class block_map {
 public:
  struct entry {
    std::uint64_t base = 0;
    std::uint64_t end = 0;  // one past the last byte
    std::uint32_t id = 0;   // the caller's name for the block
  };

  // Adds [base, base + size); a block already at `base` is replaced. size 0 is ignored.
  // Blocks must not overlap (live allocator blocks never do).
  void insert(std::uint64_t base, std::uint64_t size, std::uint32_t id);
  // Removes the block starting at `base`; false if there is none.
  bool erase(std::uint64_t base);
  // The block containing `address` (interior addresses count), or nullptr.
  [[nodiscard]] const entry* find(std::uint64_t address) const noexcept;
  // The block starting exactly at `base`, or nullptr.
  [[nodiscard]] const entry* at(std::uint64_t base) const noexcept;
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  void clear();
  // Every live block, in no particular order.
  [[nodiscard]] std::vector<entry> entries() const;
  // How many (page, block) registrations the map holds: what its memory grows with.
  [[nodiscard]] std::size_t page_entries() const noexcept;

 private:
  static constexpr unsigned page_shift = 21;  // 2 MiB
  static constexpr std::uint64_t max_paged_span = 8;  // pages: larger blocks go in large_
  struct slot {
    std::uint64_t key = 0;     // page number + 1; 0: empty
    std::uint32_t index = 0;   // into pages_
  };
  [[nodiscard]] const std::vector<entry>* page(std::uint64_t page_number) const noexcept;
  std::vector<entry>& page_for_insert(std::uint64_t page_number);
  void grow();

  std::vector<slot> table_;                // open addressing, power-of-two size
  std::vector<std::vector<entry>> pages_;  // each ordered by base
  std::map<std::uint64_t, entry> large_;   // blocks over max_paged_span pages, by base
  std::size_t count_ = 0;
  std::uint64_t lo_ = ~std::uint64_t{0};   // range filter: lo_ <= every base, every end <= hi_
  std::uint64_t hi_ = 0;
};

// One parameter word that points into a live block.
struct scan_hit {
  std::uint32_t param_offset = 0;  // where the word sits in the parameter block
  std::uint32_t block = 0;         // the block's id in the map
  std::uint64_t base = 0;          // the block's base address
  std::uint64_t offset = 0;        // word - base: > 0 for an interior pointer
  bool operator==(const scan_hit&) const = default;
};

// Appends a hit for every 8-byte-aligned word of `params` that lies inside a block of
// `blocks`, and for every 8 bytes at another offset that do and share no byte with an
// aligned hit or an earlier unaligned one (in parameter order; Note [Pointer scan]).
// Bytes past the last whole 8 are not scanned.
void scan_params(std::span<const std::byte> params, const block_map& blocks,
                 std::vector<scan_hit>& out);

// Kernels whose memory reach the scan cannot see (Note [Pointer scan], Limitations).
//
// Patterns are globs ('*' any run, '?' one character) matched case-insensitively against
// the whole kernel name (mangled names included, hence the leading '*' in the defaults).
// A pattern starting with '!' exempts what earlier patterns matched: the last pattern
// that matches decides. TMA descriptors are recognized by layout instead (see
// has_tensor_map_param), by the CUDA collector only.
class never_replay_list {
 public:
  never_replay_list() = default;
  explicit never_replay_list(std::vector<std::string> patterns);

  // NCCL, grouped and pointer-array GEMMs, batched GEMM (strided batched exempt: its
  // operands are by value), TMA-specialized CUTLASS kernels.
  [[nodiscard]] static never_replay_list defaults();
  // A comma-separated list; the word "default" stands for the default patterns, so
  // "default,!*batched*,my_allreduce*" extends and trims them. Empty items are skipped;
  // throws sublinear::config_error for a pattern that is only "!".
  [[nodiscard]] static never_replay_list parse(std::string_view list);

  void add(std::string pattern);
  [[nodiscard]] bool matches(std::string_view kernel_name) const;
  [[nodiscard]] const std::vector<std::string>& patterns() const noexcept { return patterns_; }

 private:
  std::vector<std::string> patterns_;
};

// True when a parameter is exactly 128 bytes at a 64-aligned offset: the size and
// alignment of a CUtensorMap, whose address encoding is opaque. Only meaningful for CUDA
// kernels (a host kernel's 16-pointer array has the same shape and is scanned fine).
[[nodiscard]] bool has_tensor_map_param(std::span<const param_slot> params) noexcept;

// Case-insensitive glob match of the whole `text` ('*' and '?').
[[nodiscard]] bool glob_match(std::string_view pattern, std::string_view text) noexcept;

}  // namespace sublinear::tracer
