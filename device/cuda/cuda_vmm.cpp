// See Note [CUDA VMM] in cuda_vmm.hpp.
#include "device/cuda/cuda_vmm.hpp"

#include <cstdint>
#include <string>

#include "device/cuda/driver_table.hpp"

namespace sublinear::device {

namespace {

// vmm::last_error() is per thread; checked_vmm writes its refusals here too.
thread_local std::string cuda_last_error;

vmm_status status_of(CUresult result) noexcept {
  switch (result) {
    case CUDA_SUCCESS:
      return vmm_status::ok;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return vmm_status::out_of_memory;
    case CUDA_ERROR_INVALID_VALUE:
      return vmm_status::invalid_argument;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
      return vmm_status::no_device;
    default:
      return vmm_status::device_error;
  }
}

// Records the driver's error for last_error() and turns it into a status.
vmm_status fail(const driver_api& api, const char* call, CUresult result) noexcept {
  try {
    cuda_last_error = std::string(call) + ": " + error_text(&api, result);
  } catch (...) {
  }
  return status_of(result);
}

CUdeviceptr to_device_ptr(const void* p) noexcept {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}

CUmemAllocationProp chunk_properties(int device) noexcept {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

cuda_vmm::cuda_vmm(const driver_api& api, int device, CUctx_st* context, std::size_t granularity,
                   std::size_t capacity)
    : checked_vmm(granularity, capacity), api_(api), device_(device), context_(context) {}

cuda_vmm::~cuda_vmm() {
  const auto lock = lock_ledger();
  // Teardown may run at process exit after the driver has shut down: nothing to check.
  if (enter("~cuda_vmm") == vmm_status::ok) {
    for (const auto& [address, m] : ledger().mappings()) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_unmap(static_cast<CUdeviceptr>(address), m.size));
    }
    for (const auto& [handle, c] : ledger().chunks()) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_release(handle));
    }
    for (const auto& [base, size] : ledger().reservations()) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_address_free(static_cast<CUdeviceptr>(base), size));
    }
  }
  SUBLINEAR_CU_UNCHECKED(api_.primary_ctx_release(device_));
}

vmm_status cuda_vmm::enter(const char* what) noexcept {
  CUcontext current = nullptr;
  if (const CUresult r = api_.ctx_get_current(&current); r != CUDA_SUCCESS) {
    return fail(api_, what, r);
  }
  if (current != nullptr) return vmm_status::ok;
  if (const CUresult r = api_.ctx_set_current(context_); r != CUDA_SUCCESS) {
    return fail(api_, what, r);
  }
  return vmm_status::ok;
}

std::string& cuda_vmm::last_error_slot() const noexcept { return cuda_last_error; }

// The hooks below run under checked_vmm's lock, after the ledger has accepted the call
// (Note [Checked VMM]). Each makes the primary context current first.

vmm_status cuda_vmm::do_reserve(std::size_t size, void** base) {
  if (const vmm_status s = enter("reserve"); s != vmm_status::ok) return s;
  CUdeviceptr ptr = 0;
  if (const CUresult r = api_.mem_address_reserve(&ptr, size, granularity(), 0, 0);
      r != CUDA_SUCCESS) {
    return fail(api_, "cuMemAddressReserve", r);
  }
  *base = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  return vmm_status::ok;
}

void cuda_vmm::undo_reserve(void* base, std::size_t size) {
  SUBLINEAR_CU_UNCHECKED(api_.mem_address_free(to_device_ptr(base), size));
}

vmm_status cuda_vmm::do_release(void* address, std::size_t size) {
  if (const vmm_status s = enter("release"); s != vmm_status::ok) return s;
  if (const CUresult r = api_.mem_address_free(to_device_ptr(address), size); r != CUDA_SUCCESS) {
    return fail(api_, "cuMemAddressFree", r);
  }
  return vmm_status::ok;
}

vmm_status cuda_vmm::do_create_chunk(std::size_t size, chunk_handle* handle,
                                     std::uint64_t* backing) {
  if (const vmm_status s = enter("create_chunk"); s != vmm_status::ok) return s;
  const CUmemAllocationProp prop = chunk_properties(device_);
  CUmemGenericAllocationHandle h = 0;
  if (const CUresult r = api_.mem_create(&h, size, &prop, 0); r != CUDA_SUCCESS) {
    return fail(api_, "cuMemCreate", r);
  }
  *handle = h;
  *backing = 0;
  return vmm_status::ok;
}

void cuda_vmm::undo_create_chunk(chunk_handle handle, const chunk_record& /*chunk*/) {
  SUBLINEAR_CU_UNCHECKED(api_.mem_release(handle));
}

vmm_status cuda_vmm::do_release_chunk(chunk_handle handle, const chunk_record& /*chunk*/) {
  if (const vmm_status s = enter("release_chunk"); s != vmm_status::ok) return s;
  if (const CUresult r = api_.mem_release(handle); r != CUDA_SUCCESS) {
    return fail(api_, "cuMemRelease", r);
  }
  return vmm_status::ok;
}

vmm_status cuda_vmm::do_map(void* address, std::size_t size, chunk_handle handle,
                            const chunk_record& /*chunk*/) {
  if (const vmm_status s = enter("map"); s != vmm_status::ok) return s;
  if (const CUresult r = api_.mem_map(to_device_ptr(address), size, 0, handle, 0);
      r != CUDA_SUCCESS) {
    return fail(api_, "cuMemMap", r);
  }
  return vmm_status::ok;
}

void cuda_vmm::undo_map(void* address, std::size_t size) {
  SUBLINEAR_CU_UNCHECKED(api_.mem_unmap(to_device_ptr(address), size));
}

vmm_status cuda_vmm::do_set_access(void* address, std::size_t size) {
  if (const vmm_status s = enter("set_access"); s != vmm_status::ok) return s;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (const CUresult r = api_.mem_set_access(to_device_ptr(address), size, &access, 1);
      r != CUDA_SUCCESS) {
    return fail(api_, "cuMemSetAccess", r);
  }
  return vmm_status::ok;
}

// One cuMemUnmap per mapping, after checked_vmm has checked the whole batch as the host
// backend's merged unmap needs (Note [Batched unmap] in host_vmm.cpp): one bad or
// repeated range unmaps nothing (unmapping range by range would leave the good ranges of
// a refused batch unmapped). Whether one cuMemUnmap may span several mappings is not
// relied on.
vmm_status cuda_vmm::do_unmap(std::span<const vmm_range> sorted, std::size_t* unmapped) noexcept {
  *unmapped = 0;
  if (const vmm_status s = enter("unmap"); s != vmm_status::ok) return s;
  for (const vmm_range& r : sorted) {
    if (const CUresult e = api_.mem_unmap(to_device_ptr(r.address), r.size); e != CUDA_SUCCESS) {
      return fail(api_, "cuMemUnmap", e);
    }
    ++*unmapped;
  }
  return vmm_status::ok;
}

vmm_status cuda_vmm::copy_to_device(void* device_address, const void* host,
                                    std::size_t bytes) noexcept {
  if (const vmm_status s = enter("copy_to_device"); s != vmm_status::ok) return s;
  if (const CUresult r = api_.memcpy_htod(to_device_ptr(device_address), host, bytes);
      r != CUDA_SUCCESS) {
    return fail(api_, "cuMemcpyHtoD", r);
  }
  return vmm_status::ok;
}

vmm_status cuda_vmm::copy_to_host(void* host, const void* device_address,
                                  std::size_t bytes) noexcept {
  if (const vmm_status s = enter("copy_to_host"); s != vmm_status::ok) return s;
  if (const CUresult r = api_.memcpy_dtoh(host, to_device_ptr(device_address), bytes);
      r != CUDA_SUCCESS) {
    return fail(api_, "cuMemcpyDtoH", r);
  }
  return vmm_status::ok;
}

std::unique_ptr<cuda_vmm> make_cuda_vmm(int device, std::string* why) noexcept {
  try {
    const driver_api* api = load_driver(why);
    if (api == nullptr) return nullptr;
    CUdevice dev = 0;
    CUcontext context = nullptr;
    if (!retain_device(*api, device, &dev, &context, why)) return nullptr;
    // From here on a refusal must give the context back.
    auto refuse = [&](const std::string& text) -> std::unique_ptr<cuda_vmm> {
      SUBLINEAR_CU_UNCHECKED(api->primary_ctx_release(dev));
      if (why != nullptr) *why = text;
      return nullptr;
    };
    std::size_t total = 0;
    if (const CUresult r = api->device_total_mem(&total, dev); r != CUDA_SUCCESS) {
      return refuse("cuDeviceTotalMem failed: " + error_text(api, r));
    }
    const CUmemAllocationProp prop = chunk_properties(dev);
    std::size_t granularity = 0;
    if (const CUresult r = api->mem_get_allocation_granularity(
            &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
        r != CUDA_SUCCESS) {
      return refuse("cuMemGetAllocationGranularity failed: " + error_text(api, r) +
                    " (does device " + std::to_string(device) + " support virtual memory management?)");
    }
    if (granularity == 0 || (granularity & (granularity - 1)) != 0) {
      return refuse("the driver reports a granularity of " + std::to_string(granularity) +
                    " bytes, not a power of two");
    }
    return std::unique_ptr<cuda_vmm>(new cuda_vmm(*api, dev, context, granularity, total));
  } catch (...) {
    if (why != nullptr) {
      try {
        *why = "creating the CUDA VMM failed: out of memory";
      } catch (...) {
      }
    }
    return nullptr;
  }
}

}  // namespace sublinear::device
