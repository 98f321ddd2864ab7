// Loading the CUDA driver at run time.
//
// Note [Driver by dlopen]
// Rationale: sublinear must load, run its host device and say clearly what is missing on
//   a machine without an NVIDIA driver; a library linked against libcuda fails earlier,
//   at load time, with a loader error the user cannot act on.
// Approach: libcuda.so.1 is opened with dlopen on first use and every entry point the
//   backends need is resolved by name (the versioned names cuda.h maps to, e.g.
//   cuDeviceTotalMem_v2), then cuInit(0) is called once. The result, success or the
//   reason for failure, is kept for the life of the process; the library is never closed.
// Limitations: the default-stream flavour is the legacy one (the plain symbol names, not
//   the _ptsz/_ptds variants).
//
// This header does not include <cuda.h>, so tests and code outside device/cuda can ask
// whether a driver is present. The table of entry points is in driver_table.hpp.
#pragma once

#include <string>

namespace sublinear::device {

// The soname opened with dlopen.
inline constexpr const char* driver_library = "libcuda.so.1";

// The resolved entry points (complete type in device/cuda/driver_table.hpp).
struct driver_api;

// The process's driver, loaded and initialized on first call; thread-safe. Returns
// nullptr when the library, an entry point or cuInit is missing or fails, and then puts
// the reason in *why (when why is not null): every reason names libcuda.so.1.
const driver_api* load_driver(std::string* why = nullptr) noexcept;

}  // namespace sublinear::device
