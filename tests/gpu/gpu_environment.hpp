// Whether this process can run CUDA work, and why not: every GPU test and program asks
// this first and skips (tests) or exits with skip_exit_code (programs) with the reason.
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

namespace sublinear::gpu_tests {

// The exit status of a GPU program that could not run here (the convention of automake
// and CTest's SKIP_RETURN_CODE).
inline constexpr int skip_exit_code = 77;

// "" when device 0 can be used, otherwise the reason, starting "no CUDA driver: " or
// "no CUDA device: ". cudart opens libcuda lazily, so this works (and fails cleanly) on a
// machine with only the toolkit's link stub.
inline std::string cuda_unavailable_reason() {
  // cudart reports a missing driver as an "insufficient" one; say what is really missing.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    return std::string("no CUDA driver: libcuda.so.1 cannot be loaded (") + (why != nullptr ? why : "not found") +
           "); run on a machine with an NVIDIA GPU and its driver";
  }
  dlclose(driver);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return std::string("no CUDA driver: cudaGetDeviceCount failed with ") + cudaGetErrorName(e) + " (" +
           cudaGetErrorString(e) + "); run on a machine with an NVIDIA GPU and driver";
  }
  if (count == 0) return "no CUDA device: the driver reports none";
  return "";
}

}  // namespace sublinear::gpu_tests
