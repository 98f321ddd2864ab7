/* sublinear's C API.
 *
 * The allocation entry points have the signatures PyTorch's CUDAPluggableAllocator loads
 * (torch/csrc/cuda/CUDAPluggableAllocator.h): alloc(size, device, stream) and
 * free(ptr, size, device, stream). They use the process's default allocator, which a
 * program installs (the host device, the preload library, the PyTorch integration) or,
 * failing that, is created on first use over the CUDA driver when one is present.
 * Streams are opaque: cudaStream_t on a GPU, a host-device stream on the host device. */
#ifndef SUBLINEAR_SUBLINEAR_H
#define SUBLINEAR_SUBLINEAR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sublinear/export.h"
#include "sublinear/version.h" /* SUBLINEAR_VERSION_MAJOR, _MINOR, _PATCH, _STRING */

#ifdef __cplusplus
extern "C" {
#endif

/* Returns device memory, or NULL on failure (sublinear_last_error() says why). */
SUBLINEAR_API void* sublinear_alloc(ssize_t size, int device, void* stream);
/* Frees memory from sublinear_alloc. size, device and stream may be the values given
 * at allocation (PyTorch passes them); the allocator does not need them. */
SUBLINEAR_API void sublinear_free(void* ptr, ssize_t size, int device, void* stream);
/* The block containing ptr is also used on stream (PyTorch's record_stream). */
SUBLINEAR_API void sublinear_record_stream(void* ptr, void* stream);
/* Gives cached pages back to the device (PyTorch's empty_cache / reset hook). */
SUBLINEAR_API void sublinear_empty_cache(void);

typedef struct sublinear_stats {
  uint64_t allocated, allocated_peak;
  uint64_t mapped, mapped_peak;
  uint64_t reserved, reserved_peak;
  uint64_t evicted, evicted_total;
  uint64_t budget;
  uint64_t allocs, frees, evictions, restores;
  uint64_t map_calls, unmap_calls, set_access_calls;
  uint64_t resident_peak; /* peak of allocated minus evicted bytes */
} sublinear_stats;

/* Fills *out with the default allocator's statistics. Returns 0, or -1 with no
 * allocator installed or created yet. */
SUBLINEAR_API int sublinear_get_stats(sublinear_stats* out);
SUBLINEAR_API void sublinear_reset_peaks(void);
/* Marks a training-iteration boundary (the runtime and the tracer start a new iteration
 * here). Frameworks call it from their optimizer step; without it, SUBLINEAR_ITERATION=auto
 * detects the period of the launch sequence. */
SUBLINEAR_API void sublinear_mark_iteration(void);

/* Writes the process runtime's JSON report (docs/reports.md) to path; NULL or "" means
 * the SUBLINEAR_REPORT path. Returns 0, or -1 with sublinear_last_error() saying why (no
 * runtime, no driver, no path, an I/O error). The report is also written at exit when
 * SUBLINEAR_REPORT is set. */
SUBLINEAR_API int sublinear_write_report(const char* path);

/* One line describing sublinear in this process: "active on <device>, budget <X>, state
 * <Y>", or "inactive: <why>" (no CUDA driver, SUBLINEAR_DISABLE, a malformed setting).
 * Creates the process runtime if none exists yet. The text stays valid until the next
 * call on the same thread. */
SUBLINEAR_API const char* sublinear_status(void);

/* The last error on this thread, or "" if none. */
SUBLINEAR_API const char* sublinear_last_error(void);

/* The library's version, the SUBLINEAR_VERSION_STRING it was built with: a program built
 * against one release's header can check that it loaded the same release's library. */
SUBLINEAR_API const char* sublinear_version(void);

/* Checks one setting (docs/settings.md) with the parser the runtime reads it with: name is
 * a SUBLINEAR_* variable, value its text ("" means unset where the default is unset).
 * Returns 0 when sublinear accepts it, or -1 with sublinear_last_error() naming the
 * setting, the value and the accepted forms (for an unknown name, the settings there are).
 * Reads no environment and creates nothing. */
SUBLINEAR_API int sublinear_check_setting(const char* name, const char* value);

/* Setting number `index` (0, 1, ... in documentation order): its variable name, its
 * accepted forms, and whether it is a yes/no switch. Returns 0, or -1 past the last
 * setting. Any output pointer may be NULL; the strings live as long as the library. */
SUBLINEAR_API int sublinear_setting_info(size_t index, const char** name, const char** forms, int* is_switch);

#ifdef __cplusplus
}
#endif
#endif
