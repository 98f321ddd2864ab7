// The narrow virtual-memory interface every device backend implements.
//
// Note [VMM interface]
// Rationale: eviction needs the three things CUDA's VMM API offers and cudaMalloc does
//   not: an address that outlives its physical pages, physical memory in explicit
//   chunks, and access that is granted per mapped range. Everything above this
//   interface (caching, eviction, replay) is device-agnostic and runs on the host
//   device in tests.
// Approach: seven primitives with the same preconditions as cuMemAddressReserve /
//   cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease. Every call
//   returns a status; none throws. The allocator turns statuses into exceptions.
// Limitations: a mapping covers a whole chunk (no sub-range unmap), exactly as on CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace sublinear::device {

enum class vmm_status : std::uint8_t {
  ok = 0,
  out_of_memory,     // no physical memory left for create_chunk
  invalid_argument,  // misaligned address or size, unknown handle, overlapping map
  no_device,         // the driver or device is absent (CUDA backend on a CPU machine)
  device_error,      // any other error reported by the device layer
};

const char* to_string(vmm_status status) noexcept;

// An opaque physical-chunk handle (CUmemGenericAllocationHandle on CUDA).
using chunk_handle = std::uint64_t;

// A mapped range, for unmap_ranges.
struct vmm_range {
  void* address = nullptr;
  std::size_t size = 0;
};

class vmm {
 public:
  virtual ~vmm() = default;

  // Mapping granularity in bytes: every size and address passed below must be a
  // multiple of it. A power of two.
  [[nodiscard]] virtual std::size_t granularity() const noexcept = 0;

  // Total physical memory the device offers (used for budgets given as a fraction).
  [[nodiscard]] virtual std::size_t physical_capacity() const noexcept = 0;

  // Reserves `size` bytes of address space with no physical memory behind it.
  virtual vmm_status reserve(std::size_t size, void** address) noexcept = 0;
  // Releases a whole reservation. Precondition: nothing in it is mapped.
  virtual vmm_status release(void* address, std::size_t size) noexcept = 0;

  // Creates a physical chunk of `size` bytes. Fails with out_of_memory when the
  // device has no room; never maps anything.
  virtual vmm_status create_chunk(std::size_t size, chunk_handle* handle) noexcept = 0;
  // Releases a chunk. Precondition: the chunk is not mapped anywhere.
  virtual vmm_status release_chunk(chunk_handle handle) noexcept = 0;

  // Maps the whole chunk at `address` (inside a reservation, not yet mapped). A chunk may
  // be mapped at several addresses at once; each shows the same bytes (Note
  // [Stream-ordered handoff]). The range is not accessible until set_access.
  virtual vmm_status map(void* address, std::size_t size, chunk_handle handle) noexcept = 0;
  // Grants read/write access to a mapped range (one call may cover several chunks).
  virtual vmm_status set_access(void* address, std::size_t size) noexcept = 0;
  // Unmaps a range previously mapped by exactly one map() call. Does NOT wait for
  // pending device work: callers must know the range is idle (see Note [Deferred unmap]).
  virtual vmm_status unmap(void* address, std::size_t size) noexcept = 0;
  // Unmaps several ranges, each with unmap()'s preconditions, in any order; if one range
  // is wrong (or two overlap) nothing is unmapped. A backend may merge adjacent ranges
  // into one call; the host VMM does (Note [Batched unmap] in host_vmm.cpp). Both
  // backends get their override from checked_vmm (Note [Checked VMM]). The default, for
  // wrappers that only forward unmap(), calls unmap() for each and stops at the first
  // failure: it does not check the batch first.
  virtual vmm_status unmap_ranges(std::span<const vmm_range> ranges) noexcept {
    for (const vmm_range& r : ranges) {
      const vmm_status s = unmap(r.address, r.size);
      if (s != vmm_status::ok) return s;
    }
    return vmm_status::ok;
  }

  // Synchronous copies between host memory and a mapped, accessible device range (every
  // granule of [address, address + bytes) mapped). They wait for nothing else: the caller
  // knows no device work touches the range. The allocator moves a segment's live parts
  // through them when it cuts a free block's pages out of the segment (Note [Segment
  // trim] in allocator/detail/segment_trim.hpp).
  virtual vmm_status copy_to_host(void* host, const void* address, std::size_t bytes) noexcept = 0;
  virtual vmm_status copy_to_device(void* address, const void* host, std::size_t bytes) noexcept = 0;

  // Human-readable name for reports and test names: "host", "cuda".
  [[nodiscard]] virtual std::string name() const = 0;
  // Detail about the last failure on this thread (the driver's error name, errno text).
  [[nodiscard]] virtual std::string last_error() const = 0;
};

}  // namespace sublinear::device
