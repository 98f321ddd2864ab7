// See Note [CUDA VMM] in cuda_vmm.hpp.
#include "device/cuda/cuda_vmm.hpp"

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "device/cuda/driver_table.hpp"

namespace sublinear::device {

namespace {

thread_local std::string cuda_last_error;

void set_error(const char* what, const char* why) noexcept {
  try {
    cuda_last_error = std::string(what) + ": " + why;
  } catch (...) {
    // Out of memory while describing a failure: keep the previous text.
  }
}

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

template <class Fn>
vmm_status guarded(const char* what, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    set_error(what, "out of host memory for bookkeeping");
    return vmm_status::out_of_memory;
  } catch (...) {
    set_error(what, "unexpected exception");
    return vmm_status::device_error;
  }
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
    : api_(api),
      device_(device),
      context_(context),
      granularity_(granularity),
      capacity_(capacity),
      ledger_(granularity) {}

cuda_vmm::~cuda_vmm() {
  const std::lock_guard lock(mutex_);
  // Teardown may run at process exit after the driver has shut down: nothing to check.
  if (enter("~cuda_vmm") == vmm_status::ok) {
    for (const auto& [address, m] : ledger_.mappings()) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_unmap(static_cast<CUdeviceptr>(address), m.size));
    }
    for (const auto& [handle, c] : ledger_.chunks()) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_release(handle));
    }
    for (const auto& [base, size] : ledger_.reservations()) {
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

std::string cuda_vmm::last_error() const { return cuda_last_error; }

std::size_t cuda_vmm::chunk_bytes_in_use() const {
  const std::lock_guard lock(mutex_);
  return ledger_.chunk_bytes();
}

vmm_status cuda_vmm::reserve(std::size_t size, void** address) noexcept {
  return guarded("reserve", [&] {
    if (address == nullptr) {
      set_error("reserve", "address out-parameter is null");
      return vmm_status::invalid_argument;
    }
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_reserve(size)) {
      set_error("reserve", why);
      return vmm_status::invalid_argument;
    }
    if (const vmm_status s = enter("reserve"); s != vmm_status::ok) return s;
    CUdeviceptr base = 0;
    if (const CUresult r = api_.mem_address_reserve(&base, size, granularity_, 0, 0);
        r != CUDA_SUCCESS) {
      return fail(api_, "cuMemAddressReserve", r);
    }
    void* p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(base));
    try {
      ledger_.add_reservation(p, size);
    } catch (...) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_address_free(base, size));
      throw;
    }
    *address = p;
    return vmm_status::ok;
  });
}

vmm_status cuda_vmm::release(void* address, std::size_t size) noexcept {
  return guarded("release", [&] {
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_release(address, size)) {
      set_error("release", why);
      return vmm_status::invalid_argument;
    }
    if (const vmm_status s = enter("release"); s != vmm_status::ok) return s;
    if (const CUresult r = api_.mem_address_free(to_device_ptr(address), size);
        r != CUDA_SUCCESS) {
      return fail(api_, "cuMemAddressFree", r);
    }
    ledger_.remove_reservation(address);
    return vmm_status::ok;
  });
}

vmm_status cuda_vmm::create_chunk(std::size_t size, chunk_handle* handle) noexcept {
  return guarded("create_chunk", [&] {
    if (handle == nullptr) {
      set_error("create_chunk", "handle out-parameter is null");
      return vmm_status::invalid_argument;
    }
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_create_chunk(size)) {
      set_error("create_chunk", why);
      return vmm_status::invalid_argument;
    }
    if (const vmm_status s = enter("create_chunk"); s != vmm_status::ok) return s;
    const CUmemAllocationProp prop = chunk_properties(device_);
    CUmemGenericAllocationHandle h = 0;
    if (const CUresult r = api_.mem_create(&h, size, &prop, 0); r != CUDA_SUCCESS) {
      return fail(api_, "cuMemCreate", r);
    }
    try {
      ledger_.add_chunk(h, size, 0);
    } catch (...) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_release(h));
      throw;
    }
    *handle = h;
    return vmm_status::ok;
  });
}

vmm_status cuda_vmm::release_chunk(chunk_handle handle) noexcept {
  return guarded("release_chunk", [&] {
    const std::lock_guard lock(mutex_);
    // The driver would accept a mapped chunk (it counts references); the interface
    // does not, so that misuse is caught here.
    if (const char* why = ledger_.check_release_chunk(handle)) {
      set_error("release_chunk", why);
      return vmm_status::invalid_argument;
    }
    if (const vmm_status s = enter("release_chunk"); s != vmm_status::ok) return s;
    if (const CUresult r = api_.mem_release(handle); r != CUDA_SUCCESS) {
      return fail(api_, "cuMemRelease", r);
    }
    ledger_.remove_chunk(handle);
    return vmm_status::ok;
  });
}

vmm_status cuda_vmm::map(void* address, std::size_t size, chunk_handle handle) noexcept {
  return guarded("map", [&] {
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_map(address, size, handle)) {
      set_error("map", why);
      return vmm_status::invalid_argument;
    }
    if (const vmm_status s = enter("map"); s != vmm_status::ok) return s;
    if (const CUresult r = api_.mem_map(to_device_ptr(address), size, 0, handle, 0);
        r != CUDA_SUCCESS) {
      return fail(api_, "cuMemMap", r);
    }
    try {
      ledger_.add_mapping(address, size, handle);
    } catch (...) {
      SUBLINEAR_CU_UNCHECKED(api_.mem_unmap(to_device_ptr(address), size));
      throw;
    }
    return vmm_status::ok;
  });
}

vmm_status cuda_vmm::set_access(void* address, std::size_t size) noexcept {
  return guarded("set_access", [&] {
    const std::lock_guard lock(mutex_);
    if (const char* why = ledger_.check_set_access(address, size)) {
      set_error("set_access", why);
      return vmm_status::invalid_argument;
    }
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
  });
}

vmm_status cuda_vmm::unmap(void* address, std::size_t size) noexcept {
  const vmm_range one[] = {{address, size}};
  return unmap_ranges(one);
}

// The whole batch is checked against the ledger first, as the host backend does (Note
// [Batched unmap] in host_vmm.cpp): one bad or repeated range unmaps nothing. Then one
// cuMemUnmap per mapping. Found on the first GPU run (session 22): the default, which
// unmapped range by range, left the good ranges of a refused batch unmapped.
vmm_status cuda_vmm::unmap_ranges(std::span<const vmm_range> ranges) noexcept {
  return guarded("unmap", [&] {
    const std::lock_guard lock(mutex_);
    std::vector<vmm_range> sorted(ranges.begin(), ranges.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const vmm_range& a, const vmm_range& b) { return a.address < b.address; });
    if (const char* why = ledger_.check_unmap_ranges(sorted)) {
      set_error("unmap", why);
      return vmm_status::invalid_argument;
    }
    if (sorted.empty()) return vmm_status::ok;
    if (const vmm_status s = enter("unmap"); s != vmm_status::ok) return s;
    for (const vmm_range& r : sorted) {
      if (const CUresult e = api_.mem_unmap(to_device_ptr(r.address), r.size); e != CUDA_SUCCESS) {
        return fail(api_, "cuMemUnmap", e);
      }
      ledger_.remove_mapping(r.address);
    }
    return vmm_status::ok;
  });
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
