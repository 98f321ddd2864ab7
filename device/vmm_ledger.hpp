// Bookkeeping shared by the VMM backends: which reservations, chunks and mappings exist.
//
// Note [VMM ledger]
// Rationale: the conformance suite demands the same answer from every backend for the
//   same misuse, but the devices disagree: CUDA happily releases a mapped chunk (it is
//   reference counted) and mmap happily maps over a live mapping. Checking the
//   preconditions of vmm.hpp against one record, before any device call, makes "misuse
//   returns invalid_argument" a property of sublinear rather than of a driver version.
// Approach: three ordered maps keyed by address or handle. Every check_* returns nullptr
//   when the call may proceed, or a static reason for last_error(); the backend performs
//   the device call and only then records the change, so a failed call changes nothing.
//   checked_vmm, the backends' base, does the checking and recording for both
//   (Note [Checked VMM]).
// Limitations: not thread-safe; checked_vmm holds its mutex around it. Internal to
//   the allocator's backends (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>

#include "device/vmm.hpp"

namespace sublinear::device::detail {

class vmm_ledger {
 public:
  struct chunk {
    std::size_t size = 0;
    std::uint64_t backing = 0;  // backend-defined: the host's memfd offset
    std::size_t mappings = 0;   // live mappings of this chunk
  };
  struct mapping {
    std::size_t size = 0;
    chunk_handle handle = 0;
  };

  // `granularity` must be a power of two.
  explicit vmm_ledger(std::size_t granularity) noexcept;

  [[nodiscard]] const char* check_reserve(std::size_t size) const noexcept;
  [[nodiscard]] const char* check_release(const void* address, std::size_t size) const noexcept;
  [[nodiscard]] const char* check_create_chunk(std::size_t size) const noexcept;
  [[nodiscard]] const char* check_release_chunk(chunk_handle handle) const noexcept;
  [[nodiscard]] const char* check_map(const void* address, std::size_t size,
                                      chunk_handle handle) const noexcept;
  [[nodiscard]] const char* check_set_access(const void* address, std::size_t size) const noexcept;
  [[nodiscard]] const char* check_unmap(const void* address, std::size_t size) const noexcept;
  // unmap_ranges' precondition: every range passes check_unmap and no two overlap (so a
  // batch naming one mapping twice is refused before anything is unmapped). `sorted` must
  // be the batch in address order.
  [[nodiscard]] const char* check_unmap_ranges(std::span<const vmm_range> sorted) const noexcept;

  // Record a successful device call. The caller has checked first; these may throw
  // std::bad_alloc (the backend turns it into a status).
  void add_reservation(const void* address, std::size_t size);
  void remove_reservation(const void* address) noexcept;
  void add_chunk(chunk_handle handle, std::size_t size, std::uint64_t backing);
  void remove_chunk(chunk_handle handle) noexcept;
  void add_mapping(const void* address, std::size_t size, chunk_handle handle);
  // Returns the handle that was mapped there.
  chunk_handle remove_mapping(const void* address) noexcept;

  [[nodiscard]] const chunk* find_chunk(chunk_handle handle) const noexcept;
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  [[nodiscard]] std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }

  // For teardown: everything still live, in address (or handle) order.
  [[nodiscard]] const std::map<std::uintptr_t, std::size_t>& reservations() const noexcept {
    return reservations_;
  }
  [[nodiscard]] const std::map<chunk_handle, chunk>& chunks() const noexcept { return chunks_; }
  [[nodiscard]] const std::map<std::uintptr_t, mapping>& mappings() const noexcept {
    return mappings_;
  }

 private:
  [[nodiscard]] const char* check_range(const void* address, std::size_t size) const noexcept;
  [[nodiscard]] bool aligned(std::uintptr_t value) const noexcept {
    return (value & (granularity_ - 1)) == 0;
  }
  // The reservation holding [begin, end), or end() of reservations_.
  [[nodiscard]] std::map<std::uintptr_t, std::size_t>::const_iterator reservation_holding(
      std::uintptr_t begin, std::uintptr_t end) const noexcept;
  // True if any mapping intersects [begin, end).
  [[nodiscard]] bool any_mapping_in(std::uintptr_t begin, std::uintptr_t end) const noexcept;

  std::size_t granularity_;
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> size
  std::map<chunk_handle, chunk> chunks_;
  std::map<std::uintptr_t, mapping> mappings_;  // address -> mapping
  std::size_t chunk_bytes_ = 0;
  std::size_t mapped_bytes_ = 0;
};

}  // namespace sublinear::device::detail
