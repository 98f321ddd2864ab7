// The host VMM backend: CUDA's virtual-memory semantics on the CPU, with real faults.
//
// Note [Host VMM]
// Rationale: eviction is only proven if touching an evicted page kills the process, as
//   an illegal address does on a GPU, and if releasing a chunk really gives the memory
//   back. Anonymous memory cannot be mapped at two addresses or kept across an unmap,
//   so physical memory has to live in a file.
// Approach: one memfd per host_vmm, ftruncate'd (sparse) to the physical capacity.
//   A chunk is a granularity-aligned offset range of that file, handed out first fit
//   from a map of free ranges that coalesces on release; release_chunk punches a hole
//   so the pages return to the OS. A reservation is PROT_NONE anonymous address space
//   aligned to the granularity. map() places the chunk's file range there with
//   MAP_FIXED and PROT_NONE (no access until set_access, as on CUDA); set_access is an
//   mprotect; unmap() puts a fresh PROT_NONE anonymous mapping back, so the range is a
//   plain reservation again and a stray access raises SIGSEGV. The preconditions of
//   vmm.hpp are checked against a ledger before any system call by the base, checked_vmm
//   (Note [Checked VMM]); this class holds only the system calls.
//   set_access commits and pre-faults the range with one madvise(MADV_POPULATE_READ),
//   so the cost lands on the thread that maps, as on a GPU (cuMemCreate commits, the map
//   call fills the page tables), not on the stream worker that first writes the range.
//   READ suffices: a shared mapping's read-faulted entries are already writable. Why
//   READ and not WRITE, and what faults remain: docs/design-notes.md#host-vmm.
// Limitations: every mapping is a kernel VMA, so a process holds at most
//   vm.max_map_count (65,530 by default) mappings in total. The file's capacity is
//   address space, not a promise: creating a chunk succeeds even when the machine
//   lacks the RAM, and the shortfall appears when pages are first touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "device/checked_vmm.hpp"
#include "device/vmm.hpp"

namespace sublinear::device {

struct host_vmm_options {
  // A power of two and a multiple of the OS page size.
  std::size_t granularity = std::size_t{64} << 10;
  // Bytes of physical memory the device pretends to have; a multiple of the granularity.
  std::size_t physical_capacity = std::size_t{16} << 30;
  // set_access commits and pre-faults its range, as a GPU's map does (Note [Host VMM]).
  // Off, pages are faulted in by the first write: for tests that map far more than they
  // touch.
  bool populate_on_access = true;
};

class host_vmm final : public checked_vmm {
 public:
  // Throws sublinear::config_error for invalid options, sublinear::device_error if the
  // memfd cannot be created.
  explicit host_vmm(host_vmm_options options = {});
  // Gives back every reservation, mapping and chunk still live.
  ~host_vmm() override;
  host_vmm(const host_vmm&) = delete;
  host_vmm& operator=(const host_vmm&) = delete;

  vmm_status copy_to_host(void* host, const void* address, std::size_t bytes) noexcept override;
  vmm_status copy_to_device(void* address, const void* host, std::size_t bytes) noexcept override;

  [[nodiscard]] std::string name() const override { return "host"; }

  // Bytes the OS actually holds for the chunks' pages (touched and not punched out).
  [[nodiscard]] std::size_t resident_bytes() const;

 private:
  // First fit from free_; returns false when no free range is large enough.
  bool take_range(std::size_t size, std::size_t* offset);
  void give_back_range(std::size_t offset, std::size_t size);
  // copy_to_host / copy_to_device: `device_side` is the one of `dst`, `src` that must be mapped.
  vmm_status copy(const char* what, void* dst, const void* src, const void* device_side, std::size_t bytes) noexcept;

  // The system calls behind checked_vmm's operations (Note [Checked VMM]).
  vmm_status do_reserve(std::size_t size, void** base) override;
  void undo_reserve(void* base, std::size_t size) override;
  vmm_status do_release(void* address, std::size_t size) override;
  vmm_status do_create_chunk(std::size_t size, chunk_handle* handle, std::uint64_t* backing) override;
  void undo_create_chunk(chunk_handle handle, const chunk_record& chunk) override;
  vmm_status do_release_chunk(chunk_handle handle, const chunk_record& chunk) override;
  void chunk_released(const chunk_record& chunk) override;
  vmm_status do_map(void* address, std::size_t size, chunk_handle handle,
                    const chunk_record& chunk) override;
  void undo_map(void* address, std::size_t size) override;
  vmm_status do_set_access(void* address, std::size_t size) override;
  vmm_status do_unmap(std::span<const vmm_range> sorted, std::size_t* unmapped) noexcept override;
  [[nodiscard]] std::string& last_error_slot() const noexcept override;

  bool populate_;
  int fd_ = -1;

  // Past the constructor, only the hooks touch these, under checked_vmm's lock.
  std::map<std::size_t, std::size_t> free_;  // memfd offset -> size, coalesced
  chunk_handle next_handle_ = 1;
};

}  // namespace sublinear::device
