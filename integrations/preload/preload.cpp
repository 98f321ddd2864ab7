// libsublinear_preload.so: the CUDA allocation entry points, interposed with LD_PRELOAD,
// over the process runtime (runtime/cuda/process_runtime.hpp). The library also
// carries InitializeInjection (tracer/cupti/injection.cpp, linked whole), so the same file
// is named by CUDA_INJECTION64_PATH; `sublinear run` sets both.
//
// Note [Preload interposition]
// Rationale: a framework that allocates through cudaMalloc (PyTorch with
//   PYTORCH_NO_CUDA_MEMORY_CACHING=1, JAX with XLA_PYTHON_CLIENT_ALLOCATOR=platform, a C++
//   trainer) can be given sublinear's allocator without a code change only by replacing
//   the functions it calls. The preload must never make a program fail that runs without
//   it: on a machine without a driver, with SUBLINEAR_DISABLE or a malformed setting, it
//   passes everything through.
// Approach: cudaMalloc, cudaFree, cudaMallocAsync, cudaFreeAsync, cuMemAlloc_v2,
//   cuMemFree_v2, cuMemAllocAsync, cuMemFreeAsync, cudaMemGetInfo and cuMemGetInfo_v2 are
//   defined here. An allocation goes to the process runtime's caching allocator when the
//   runtime is active and serves the calling thread's current device; otherwise, and for
//   every pointer the runtime does not own, the call goes to the real function (dlsym
//   RTLD_NEXT, then an already loaded libcudart / libcuda). Frees keep the real calls'
//   ordering (cudaFree synchronizes the context; the async frees order reuse after the
//   freeing stream). With a budget, the memory queries report the budget as the total and
//   what is unmapped under it as free. At load, a constructor checks the settings and
//   that libcuda.so.1 can be opened: if not, it prints one line saying why sublinear is
//   inactive, and the process runs untouched.
// Limitations: programs linked with the static CUDA runtime (nvcc's default) call their
//   own copy of cudaMalloc, which no preload can replace: build with -cudart shared or use
//   the C API. Some allocation routes are not interposed and keep working unchanged, and
//   a failed allocation does not set cudart's sticky last error (the details:
//   docs/design-notes.md#preload-interposition). Loading libsublinear.so as well
//   (sublinear.torch.enable) gives a second, separate runtime: use one route per process.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "common/text.hpp"
#include "device/cuda/driver_api.hpp"
#include "integrations/cli/supervise.hpp"
#include "allocator/default_allocator.hpp"
#include "runtime/cuda/process_runtime.hpp"
#include "runtime/settings.hpp"
#include "sublinear/error.hpp"
#include "sublinear/export.h"
#include "sublinear/version.h"

// The mark of a sublinear preload library, with the version it was built as: `sublinear
// run` reads it from the file before preloading it (Note [Preload library check]).
extern "C" {
SUBLINEAR_API extern const char sublinear_preload_version[];
const char sublinear_preload_version[] = SUBLINEAR_VERSION_STRING;
}

namespace {

using sublinear::runtime::process_runtime;

// Set when sublinear must stay out of the way for the rest of the process.
std::atomic<bool> g_pass_through{false};

void say_inactive(const std::string& why) {
  if (g_pass_through.exchange(true)) return;
  std::fprintf(stderr, "%s; sublinear is inactive in this process and CUDA calls pass through unchanged\n",
               why.c_str());
}

// The process runtime, created on first use; nullptr when sublinear passes through.
process_runtime* runtime() {
  if (g_pass_through.load(std::memory_order_relaxed)) return nullptr;
  if (process_runtime* rt = process_runtime::existing()) return rt;
  std::string why;
  process_runtime* rt = process_runtime::instance(&why);
  if (rt == nullptr) {
    say_inactive(why);
    return nullptr;
  }
  // The C entry points this library exports use the same allocator.
  if (sublinear::allocator::default_allocator() == nullptr) sublinear::allocator::set_default_allocator(&rt->allocator());
  return rt;
}

// The runtime, if it exists and owns the block starting at `p`. A pointer into the middle
// of one of our blocks is the caller's error: *interior is set and the caller refuses it.
process_runtime* owner_of(const void* p, bool* interior) {
  *interior = false;
  if (p == nullptr) return nullptr;
  process_runtime* rt = process_runtime::existing();
  if (rt == nullptr) return nullptr;
  const auto block = rt->allocator().find(p);
  if (!block) return nullptr;
  *interior = block->base != p;
  return rt;
}

// ---- the real functions ---------------------------------------------------------------------------

template <class Fn>
Fn lookup(const char* name, Fn self, const char* const* libraries) {
  void* p = ::dlsym(RTLD_NEXT, name);
  if (p == reinterpret_cast<void*>(self)) p = nullptr;
  for (const char* const* lib = libraries; p == nullptr && *lib != nullptr; ++lib) {
    // Only a library the program has loaded already: loading one here would change it.
    if (void* h = ::dlopen(*lib, RTLD_NOW | RTLD_NOLOAD)) {
      p = ::dlsym(h, name);
      ::dlclose(h);
    }
  }
  Fn out = nullptr;
  if (p != nullptr && p != reinterpret_cast<void*>(self)) out = reinterpret_cast<Fn>(p);
  return out;
}

constexpr const char* runtime_libraries[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so", nullptr};
constexpr const char* driver_libraries[] = {"libcuda.so.1", "libcuda.so", nullptr};

// The next definition of `name`, resolved once.
#define SUBLINEAR_REAL(fn, libraries)                                                 \
  ([] {                                                                               \
    static const auto real_fn = lookup<decltype(&::fn)>(#fn, &::fn, (libraries));    \
    return real_fn;                                                                   \
  }())

void say_missing(const char* what) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    std::fprintf(stderr, "sublinear: %s is called but no CUDA library defining it is loaded in this process\n", what);
  }
}

void report_failure(const char* call, std::size_t size, const std::exception& e) {
  std::fprintf(stderr, "sublinear: %s of %s failed: %s\n", call, sublinear::format_bytes(size).c_str(), e.what());
}

enum class outcome { ok, out_of_memory, failed };

// Allocates `size` bytes on `stream` from the runtime; nothing when it does not serve here.
outcome allocate(process_runtime& rt, void** out, std::size_t size, void* stream, const char* call) {
  try {
    *out = rt.allocator().allocate(size, stream);
    return outcome::ok;
  } catch (const sublinear::out_of_memory& e) {
    report_failure(call, size, e);
    return outcome::out_of_memory;
  } catch (const std::exception& e) {
    report_failure(call, size, e);
    return outcome::failed;
  }
}

// Frees a block of ours: after the context's work (synchronous frees) or in `stream`'s
// order (asynchronous ones).
bool release(process_runtime& rt, void* p, bool synchronous, void* stream) {
  try {
    if (synchronous) {
      rt.synchronize();
    } else if (const auto block = rt.allocator().find(p); block && block->stream != stream) {
      rt.allocator().record_stream(p, stream);
    }
    rt.allocator().deallocate(p);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: freeing %p failed: %s\n", p, e.what());
    return false;
  }
}

// Fills free/total from the budget; false when there is no budget to report.
bool budget_memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  process_runtime* rt = runtime();
  if (rt == nullptr || free_bytes == nullptr || total_bytes == nullptr || !rt->serves_current_device()) return false;
  const std::size_t total = rt->reported_total_memory();
  if (total == 0) return false;
  const std::size_t mapped = rt->allocator().get_stats().mapped;
  *total_bytes = total;
  *free_bytes = mapped < total ? total - mapped : 0;
  return true;
}

// Tells `sublinear run` that this process loaded the library (Note [Run supervision]),
// once: the variable goes, so the program's own children do not write.
void tell_run_command() {
  const char* text = std::getenv(sublinear::cli::kRunFdVariable);
  if (text == nullptr) return;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  ::unsetenv(sublinear::cli::kRunFdVariable);
  struct stat st {};
  if (end == text || *end != '\0' || fd < 0 || fd > 1 << 20 || ::fstat(static_cast<int>(fd), &st) != 0 ||
      !S_ISFIFO(st.st_mode)) {
    return;  // not the pipe `sublinear run` made: write nothing
  }
  const char loaded = 1;
  (void)!::write(static_cast<int>(fd), &loaded, 1);
  ::close(static_cast<int>(fd));
}

__attribute__((constructor)) void on_load() {
  tell_run_command();
  try {
    const sublinear::runtime::settings s = sublinear::runtime::read_settings_from_environment();
    if (s.disable) {
      g_pass_through.store(true);  // asked for: nothing to say
      return;
    }
  } catch (const std::exception& e) {
    say_inactive(e.what());
    return;
  }
  // Opened, not initialized: cuInit belongs to the program (it may never use CUDA, or fork
  // first). load_driver reuses the handle later.
  if (::dlopen(sublinear::device::driver_library, RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    const char* detail = ::dlerror();
    say_inactive(std::string("sublinear: no NVIDIA GPU driver on this machine (") +
                 sublinear::device::driver_library + " cannot be loaded: " +
                 (detail != nullptr ? detail : "not found") + ")");
  }
}

}  // namespace

// ---- the CUDA runtime ----------------------------------------------------------------------------------

extern "C" {

SUBLINEAR_API cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (process_runtime* rt = runtime(); rt != nullptr && devPtr != nullptr && rt->serves_current_device()) {
    switch (allocate(*rt, devPtr, size, nullptr, "cudaMalloc")) {
      case outcome::ok: return cudaSuccess;
      case outcome::out_of_memory: return cudaErrorMemoryAllocation;
      case outcome::failed: return cudaErrorUnknown;
    }
  }
  const auto real = SUBLINEAR_REAL(cudaMalloc, runtime_libraries);
  if (real == nullptr) {
    say_missing("cudaMalloc");
    return cudaErrorInitializationError;
  }
  return real(devPtr, size);
}

SUBLINEAR_API cudaError_t cudaFree(void* devPtr) {
  bool interior = false;
  if (process_runtime* rt = owner_of(devPtr, &interior)) {
    if (interior) return cudaErrorInvalidValue;
    return release(*rt, devPtr, true, nullptr) ? cudaSuccess : cudaErrorUnknown;
  }
  const auto real = SUBLINEAR_REAL(cudaFree, runtime_libraries);
  if (real == nullptr) {
    say_missing("cudaFree");
    return cudaErrorInitializationError;
  }
  return real(devPtr);
}

SUBLINEAR_API cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  if (process_runtime* rt = runtime(); rt != nullptr && devPtr != nullptr && rt->serves_current_device()) {
    switch (allocate(*rt, devPtr, size, hStream, "cudaMallocAsync")) {
      case outcome::ok: return cudaSuccess;
      case outcome::out_of_memory: return cudaErrorMemoryAllocation;
      case outcome::failed: return cudaErrorUnknown;
    }
  }
  const auto real = SUBLINEAR_REAL(cudaMallocAsync, runtime_libraries);
  if (real == nullptr) {
    say_missing("cudaMallocAsync");
    return cudaErrorInitializationError;
  }
  return real(devPtr, size, hStream);
}

SUBLINEAR_API cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  bool interior = false;
  if (process_runtime* rt = owner_of(devPtr, &interior)) {
    if (interior) return cudaErrorInvalidValue;
    return release(*rt, devPtr, false, hStream) ? cudaSuccess : cudaErrorUnknown;
  }
  const auto real = SUBLINEAR_REAL(cudaFreeAsync, runtime_libraries);
  if (real == nullptr) {
    say_missing("cudaFreeAsync");
    return cudaErrorInitializationError;
  }
  return real(devPtr, hStream);
}

SUBLINEAR_API cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (budget_memory_info(free, total)) return cudaSuccess;
  const auto real = SUBLINEAR_REAL(cudaMemGetInfo, runtime_libraries);
  if (real == nullptr) {
    say_missing("cudaMemGetInfo");
    return cudaErrorInitializationError;
  }
  return real(free, total);
}

// ---- the driver -----------------------------------------------------------------------------------------

SUBLINEAR_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (process_runtime* rt = runtime(); rt != nullptr && dptr != nullptr && rt->serves_current_device()) {
    void* p = nullptr;
    switch (allocate(*rt, &p, bytesize, nullptr, "cuMemAlloc")) {
      case outcome::ok: *dptr = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); return CUDA_SUCCESS;
      case outcome::out_of_memory: return CUDA_ERROR_OUT_OF_MEMORY;
      case outcome::failed: return CUDA_ERROR_UNKNOWN;
    }
  }
  const auto real = SUBLINEAR_REAL(cuMemAlloc_v2, driver_libraries);
  if (real == nullptr) {
    say_missing("cuMemAlloc_v2");
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return real(dptr, bytesize);
}

SUBLINEAR_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  void* p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(dptr));
  bool interior = false;
  if (process_runtime* rt = owner_of(p, &interior)) {
    if (interior) return CUDA_ERROR_INVALID_VALUE;
    return release(*rt, p, true, nullptr) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  }
  const auto real = SUBLINEAR_REAL(cuMemFree_v2, driver_libraries);
  if (real == nullptr) {
    say_missing("cuMemFree_v2");
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return real(dptr);
}

SUBLINEAR_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  if (process_runtime* rt = runtime(); rt != nullptr && dptr != nullptr && rt->serves_current_device()) {
    void* p = nullptr;
    switch (allocate(*rt, &p, bytesize, hStream, "cuMemAllocAsync")) {
      case outcome::ok: *dptr = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); return CUDA_SUCCESS;
      case outcome::out_of_memory: return CUDA_ERROR_OUT_OF_MEMORY;
      case outcome::failed: return CUDA_ERROR_UNKNOWN;
    }
  }
  const auto real = SUBLINEAR_REAL(cuMemAllocAsync, driver_libraries);
  if (real == nullptr) {
    say_missing("cuMemAllocAsync");
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return real(dptr, bytesize, hStream);
}

SUBLINEAR_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  void* p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(dptr));
  bool interior = false;
  if (process_runtime* rt = owner_of(p, &interior)) {
    if (interior) return CUDA_ERROR_INVALID_VALUE;
    return release(*rt, p, false, hStream) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  }
  const auto real = SUBLINEAR_REAL(cuMemFreeAsync, driver_libraries);
  if (real == nullptr) {
    say_missing("cuMemFreeAsync");
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return real(dptr, hStream);
}

SUBLINEAR_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (budget_memory_info(free, total)) return CUDA_SUCCESS;
  const auto real = SUBLINEAR_REAL(cuMemGetInfo_v2, driver_libraries);
  if (real == nullptr) {
    say_missing("cuMemGetInfo_v2");
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return real(free, total);
}

}  // extern "C"
