// The driver entry points resolved by load_driver, and the checks around them.
//
// Internal to device/cuda: it includes <cuda.h>, whose include directory only the
// sources of this directory get. See Note [Driver by dlopen] in driver_api.hpp.
#pragma once

#include <cuda.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "device/cuda/driver_api.hpp"

namespace sublinear::device {

// Member names drop the "cu" prefix and the version suffix; the types come from cuda.h
// (decltype of the versioned function), so a mismatch with the header fails to compile.
struct driver_api {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceTotalMem_v2) device_total_mem = nullptr;
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease_v2) primary_ctx_release = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemcpyHtoD_v2) memcpy_htod = nullptr;
  decltype(&::cuMemcpyDtoH_v2) memcpy_dtoh = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventQuery) event_query = nullptr;
  decltype(&::cuEventSynchronize) event_synchronize = nullptr;
  decltype(&::cuEventDestroy_v2) event_destroy = nullptr;
  decltype(&::cuStreamSynchronize) stream_synchronize = nullptr;
  // The process runtime (runtime/cuda): replay, status and device queries.
  decltype(&::cuCtxGetDevice) ctx_get_device = nullptr;
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuDeviceGetName) device_get_name = nullptr;
  decltype(&::cuMemGetInfo_v2) mem_get_info = nullptr;
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  decltype(&::cuMemcpyAsync) memcpy_async = nullptr;
  decltype(&::cuMemsetD8Async) memset_d8_async = nullptr;
};

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; works before the driver is loaded too.
std::string error_text(const driver_api* api, CUresult result);

// Throws sublinear::device_error naming the call, file:line and the error name.
[[noreturn]] void throw_cu_error(const driver_api& api, CUresult result, const char* call,
                                 const char* file, int line);

// Looks up device `ordinal` and retains its primary context (the caller releases it
// with primary_ctx_release). On failure returns false with the reason in *why.
bool retain_device(const driver_api& api, int ordinal, CUdevice* device, CUcontext* context,
                   std::string* why);

// The address of an entry point of the driver load_driver opened, or nullptr where the
// driver lacks it or is not loaded: for features that work, or turn off, without it.
void* optional_driver_symbol(const char* symbol);

inline void cu_check(const driver_api& api, CUresult result, const char* call, const char* file,
                     int line) {
  if (result != CUDA_SUCCESS) throw_cu_error(api, result, call, file, line);
}

}  // namespace sublinear::device

// SUBLINEAR_CU_CHECK(api, api.mem_map(...)): throws sublinear::device_error on failure.
#define SUBLINEAR_CU_CHECK(api, call) \
  ::sublinear::device::cu_check((api), (call), #call, __FILE__, __LINE__)

// SUBLINEAR_OPTIONAL_ENTRY(slot, cuMemHostAlloc): `slot` (of the function's own type, checked
// at compile time) gets the entry point, or nullptr (optional_driver_symbol).
#define SUBLINEAR_OPTIONAL_ENTRY(slot, symbol)                                                   \
  do {                                                                                           \
    static_assert(std::is_same_v<std::remove_reference_t<decltype(slot)>, decltype(&::symbol)>); \
    void* address_ = ::sublinear::device::optional_driver_symbol(#symbol);                      \
    static_assert(sizeof(address_) == sizeof(slot));                                             \
    std::memcpy(&(slot), &address_, sizeof(slot));                                               \
  } while (false)

// A call whose failure is deliberately ignored (teardown, where the driver may already be
// shut down). Greppable on purpose.
#define SUBLINEAR_CU_UNCHECKED(call) static_cast<void>(call)
