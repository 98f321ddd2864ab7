// The CUPTI collector: records a GPU process's launches, copies, sets and events into a
// recorder, with kernel durations from CUPTI's activity records.
//
// Note [CUPTI collector]
// Rationale: every launch path on a GPU (cudart, cuBLAS's static cudart, Triton, NCCL)
//   ends in the driver, and CUPTI's driver-domain callbacks see them all; an LD_PRELOAD
//   of cuLaunchKernel does not (research/cuda_mechanisms.md §1-3).
// Approach: libcupti is opened with dlopen (libcupti.so, then libcupti.so.13), like the
//   driver (allocator/cuda/driver_api.hpp), so the library loads on machines without
//   either and says what is missing. One subscriber enables single driver cbids:
//   cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel (each with its _ptsz
//   form), async copies (cuMemcpyAsync, HtoD/DtoH/DtoD) and sets (D8, D32), cuEventRecord,
//   cuStreamWaitEvent and cuGraphLaunch. At EXIT of a successful call the launch is
//   recorded: the parameter layout comes from cuFuncGetParamInfo, or cuKernelGetParamInfo
//   when the handle is a CUkernel cast to CUfunction (cached per handle); kernelParams
//   and extra are normalized into one packed block (param_packing.hpp); a
//   cuLaunchKernelEx whose attributes name an event is flagged. CONCURRENT_KERNEL,
//   MEMCPY and MEMSET activity records are joined to launches by correlation id and give
//   durations (flush()). A thread_local guard keeps our own driver calls (layout
//   queries) from re-entering the callback.
// Limitations: CUPTI allows one subscriber per process: under Nsight, cuda-gdb or
//   torch.profiler the constructor throws cupti_unavailable, and the caller must run
//   without recomputation. A cuGraphLaunch is recorded as one never-replay launch of a
//   pseudo kernel "[cuGraphLaunch]" (its nodes are not enumerated yet), so the blocks it
//   touches are unknown and the runtime must treat the iteration as unsafe to plan. Kernel
//   handles are not invalidated at module unload.
#pragma once

#include <memory>
#include <string>

#include "sublinear/error.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::tracer {

// CUPTI or the driver cannot be used: missing library, no driver, another subscriber.
class cupti_unavailable : public device_error {
 public:
  using device_error::device_error;
};

struct cupti_options {
  bool durations = true;         // enable the activity API for kernel/copy/set durations
  bool flag_tensor_maps = true;  // a 128-byte, 64-aligned parameter makes a kernel never-replay
};

class cupti_collector {
 public:
  // Loads libcupti and the driver and subscribes; throws cupti_unavailable saying why.
  // At most one collector exists per process. `rec` must outlive it.
  explicit cupti_collector(recorder& rec, cupti_options options = {});
  // Flushes activity records, then unsubscribes.
  ~cupti_collector();
  cupti_collector(const cupti_collector&) = delete;
  cupti_collector& operator=(const cupti_collector&) = delete;

  // Delivers pending activity records (durations) to the recorder. Call after the device
  // work of an iteration has completed (a synchronize), before recorder::take().
  void flush();

  // "" when a collector can be created here, otherwise the reason (for tests and `sublinear
  // doctor`). Does not subscribe.
  [[nodiscard]] static std::string unavailable_reason();

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace sublinear::tracer
