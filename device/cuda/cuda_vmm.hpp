// The CUDA VMM backend: the vmm interface over the driver's cuMem* calls.
//
// Note [CUDA VMM]
// Rationale: eviction needs an address that outlives its physical pages, which only
//   the driver's VMM API offers (cuMemAddressReserve / cuMemCreate / cuMemMap /
//   cuMemSetAccess / cuMemUnmap / cuMemRelease).
// Approach: pinned device-local chunks on one device; the granularity is the driver's
//   RECOMMENDED one (2 MiB on current GPUs), the capacity cuDeviceTotalMem. Every call
//   is checked against the same ledger as the host backend before the driver sees it
//   (checked_vmm, Note [Checked VMM]), so misuse gets the same answer on both; this
//   class holds only the driver calls. The driver is loaded with dlopen
//   (Note [Driver by dlopen]); calls run in the device's primary context, made current
//   on a thread that has none.
// Limitations: one device per instance, read/write access granted to that device only
//   (no peer access). Unmap does not wait for queued kernels (see Note [Deferred unmap]).
//
// This header does not include <cuda.h>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "device/checked_vmm.hpp"
#include "device/vmm.hpp"

struct CUctx_st;  // CUcontext, as cuda.h declares it

namespace sublinear::device {

struct driver_api;

class cuda_vmm final : public checked_vmm {
 public:
  // Unmaps, releases and frees whatever is still live, then releases the primary context.
  ~cuda_vmm() override;
  cuda_vmm(const cuda_vmm&) = delete;
  cuda_vmm& operator=(const cuda_vmm&) = delete;

  [[nodiscard]] std::string name() const override { return "cuda"; }

  [[nodiscard]] int device() const noexcept { return device_; }

  // cuMemcpyHtoD / cuMemcpyDtoH: the host cannot dereference device addresses. A copy
  // touching a range without access fails.
  vmm_status copy_to_device(void* device_address, const void* host, std::size_t bytes) noexcept override;
  vmm_status copy_to_host(void* host, const void* device_address, std::size_t bytes) noexcept override;

 private:
  friend std::unique_ptr<cuda_vmm> make_cuda_vmm(int device, std::string* why) noexcept;
  cuda_vmm(const driver_api& api, int device, CUctx_st* context, std::size_t granularity,
           std::size_t capacity);
  // Makes the primary context current if this thread has none.
  [[nodiscard]] vmm_status enter(const char* what) noexcept;

  // The driver calls behind checked_vmm's operations (Note [Checked VMM]).
  vmm_status do_reserve(std::size_t size, void** base) override;
  void undo_reserve(void* base, std::size_t size) override;
  vmm_status do_release(void* address, std::size_t size) override;
  vmm_status do_create_chunk(std::size_t size, chunk_handle* handle, std::uint64_t* backing) override;
  void undo_create_chunk(chunk_handle handle, const chunk_record& chunk) override;
  vmm_status do_release_chunk(chunk_handle handle, const chunk_record& chunk) override;
  vmm_status do_map(void* address, std::size_t size, chunk_handle handle,
                    const chunk_record& chunk) override;
  void undo_map(void* address, std::size_t size) override;
  vmm_status do_set_access(void* address, std::size_t size) override;
  vmm_status do_unmap(std::span<const vmm_range> sorted, std::size_t* unmapped) noexcept override;
  [[nodiscard]] std::string& last_error_slot() const noexcept override;

  const driver_api& api_;
  int device_;
  CUctx_st* context_;
};

// The VMM of CUDA device `device` (an ordinal), or nullptr with the reason in *why when
// there is no driver, no such device, or the driver refuses.
std::unique_ptr<cuda_vmm> make_cuda_vmm(int device, std::string* why = nullptr) noexcept;

}  // namespace sublinear::device
