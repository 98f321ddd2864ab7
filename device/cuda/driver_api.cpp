// See Note [Driver by dlopen] in driver_api.hpp.
#include "device/cuda/driver_api.hpp"

#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "device/cuda/driver_table.hpp"
#include "sublinear/error.hpp"

namespace sublinear::device {

namespace {

struct load_result {
  std::unique_ptr<driver_api> api;
  std::string why;
};

template <class Fn>
bool resolve(void* library, const char* symbol, Fn& slot) {
  void* address = ::dlsym(library, symbol);
  if (address == nullptr) return false;
  static_assert(sizeof(address) == sizeof(slot));
  // dlsym returns an object pointer; copying the bits is the portable way to a
  // function pointer.
  std::memcpy(&slot, &address, sizeof(slot));
  return true;
}

load_result load_once() {
  load_result out;
  void* library = ::dlopen(driver_library, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* detail = ::dlerror();
    out.why = std::string(driver_library) +
              " not found: no NVIDIA driver on this machine (dlopen: " +
              (detail != nullptr ? detail : "unknown error") +
              "); sublinear needs a driver for the CUDA backend - use the host device "
              "(sublinear demo) on machines without a GPU";
    return out;
  }
  auto api = std::make_unique<driver_api>();
  const char* missing = nullptr;
  // The symbol string is the exported (versioned) name; the static_assert ties it to
  // the type cuda.h declares for that name.
#define SUBLINEAR_RESOLVE(member, symbol)                                           \
  static_assert(std::is_same_v<decltype(api->member), decltype(&::symbol)>);        \
  if (missing == nullptr && !resolve(library, #symbol, api->member)) missing = #symbol

  SUBLINEAR_RESOLVE(init, cuInit);
  SUBLINEAR_RESOLVE(get_error_name, cuGetErrorName);
  SUBLINEAR_RESOLVE(get_error_string, cuGetErrorString);
  SUBLINEAR_RESOLVE(device_get, cuDeviceGet);
  SUBLINEAR_RESOLVE(device_get_count, cuDeviceGetCount);
  SUBLINEAR_RESOLVE(device_total_mem, cuDeviceTotalMem_v2);
  SUBLINEAR_RESOLVE(ctx_get_current, cuCtxGetCurrent);
  SUBLINEAR_RESOLVE(ctx_set_current, cuCtxSetCurrent);
  SUBLINEAR_RESOLVE(primary_ctx_retain, cuDevicePrimaryCtxRetain);
  SUBLINEAR_RESOLVE(primary_ctx_release, cuDevicePrimaryCtxRelease_v2);
  SUBLINEAR_RESOLVE(mem_get_allocation_granularity, cuMemGetAllocationGranularity);
  SUBLINEAR_RESOLVE(mem_address_reserve, cuMemAddressReserve);
  SUBLINEAR_RESOLVE(mem_address_free, cuMemAddressFree);
  SUBLINEAR_RESOLVE(mem_create, cuMemCreate);
  SUBLINEAR_RESOLVE(mem_release, cuMemRelease);
  SUBLINEAR_RESOLVE(mem_map, cuMemMap);
  SUBLINEAR_RESOLVE(mem_unmap, cuMemUnmap);
  SUBLINEAR_RESOLVE(mem_set_access, cuMemSetAccess);
  SUBLINEAR_RESOLVE(memcpy_htod, cuMemcpyHtoD_v2);
  SUBLINEAR_RESOLVE(memcpy_dtoh, cuMemcpyDtoH_v2);
  SUBLINEAR_RESOLVE(event_create, cuEventCreate);
  SUBLINEAR_RESOLVE(event_record, cuEventRecord);
  SUBLINEAR_RESOLVE(event_query, cuEventQuery);
  SUBLINEAR_RESOLVE(event_synchronize, cuEventSynchronize);
  SUBLINEAR_RESOLVE(event_destroy, cuEventDestroy_v2);
  SUBLINEAR_RESOLVE(stream_synchronize, cuStreamSynchronize);
  SUBLINEAR_RESOLVE(ctx_get_device, cuCtxGetDevice);
  SUBLINEAR_RESOLVE(ctx_synchronize, cuCtxSynchronize);
  SUBLINEAR_RESOLVE(device_get_name, cuDeviceGetName);
  SUBLINEAR_RESOLVE(mem_get_info, cuMemGetInfo_v2);
  SUBLINEAR_RESOLVE(launch_kernel, cuLaunchKernel);
  SUBLINEAR_RESOLVE(memcpy_async, cuMemcpyAsync);
  SUBLINEAR_RESOLVE(memset_d8_async, cuMemsetD8Async);
#undef SUBLINEAR_RESOLVE

  if (missing != nullptr) {
    out.why = std::string(driver_library) + " lacks " + missing +
              ": the NVIDIA driver is too old for sublinear's CUDA backend; update the driver "
              "or use the host device (sublinear demo)";
    return out;
  }
  // Nothing else works before cuInit; a stub library or a driver without a usable GPU
  // fails here, and that is worth saying as plainly as a missing library.
  const CUresult result = api->init(0);
  if (result != CUDA_SUCCESS) {
    out.why = std::string(driver_library) + " loaded but cuInit failed: " +
              error_text(api.get(), result) +
              "; sublinear's CUDA backend needs a working driver and GPU - use the host "
              "device (sublinear demo) otherwise";
    return out;
  }
  out.api = std::move(api);
  return out;
}

}  // namespace

const driver_api* load_driver(std::string* why) noexcept {
  static const load_result loaded = [] {
    try {
      return load_once();
    } catch (...) {
      load_result failed;
      failed.why = "loading libcuda.so.1 failed: out of memory";
      return failed;
    }
  }();
  if (loaded.api == nullptr && why != nullptr) {
    try {
      *why = loaded.why;
    } catch (...) {
    }
  }
  return loaded.api.get();
}

void* optional_driver_symbol(const char* symbol) {
  void* library = ::dlopen(driver_library, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  void* address = ::dlsym(library, symbol);
  ::dlclose(library);  // load_driver's handle keeps it loaded
  return address;
}

std::string error_text(const driver_api* api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api != nullptr) {
    if (api->get_error_name(result, &name) != CUDA_SUCCESS) name = nullptr;
    if (api->get_error_string(result, &text) != CUDA_SUCCESS) text = nullptr;
  }
  std::string out = name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

bool retain_device(const driver_api& api, int ordinal, CUdevice* device, CUcontext* context,
                   std::string* why) {
  auto refuse = [&](const std::string& text) {
    if (why != nullptr) *why = text;
    return false;
  };
  int count = 0;
  if (const CUresult r = api.device_get_count(&count); r != CUDA_SUCCESS) {
    return refuse("cuDeviceGetCount failed: " + error_text(&api, r));
  }
  if (ordinal < 0 || ordinal >= count) {
    return refuse("CUDA device " + std::to_string(ordinal) + " not present: the driver reports " +
                  std::to_string(count) + " device(s)");
  }
  if (const CUresult r = api.device_get(device, ordinal); r != CUDA_SUCCESS) {
    return refuse("cuDeviceGet(" + std::to_string(ordinal) + ") failed: " + error_text(&api, r));
  }
  if (const CUresult r = api.primary_ctx_retain(context, *device); r != CUDA_SUCCESS) {
    return refuse("cuDevicePrimaryCtxRetain failed: " + error_text(&api, r));
  }
  return true;
}

void throw_cu_error(const driver_api& api, CUresult result, const char* call, const char* file,
                    int line) {
  throw device_error(std::string("sublinear: ") + call + " failed: " + error_text(&api, result) +
                     " at " + file + ":" + std::to_string(line));
}

}  // namespace sublinear::device
