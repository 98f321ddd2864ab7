// The replay engine's device on a GPU: regenerated buffers are recomputed by the driver.
//
// Note [Replay through the driver]
// Rationale: a recipe re-runs recorded launches verbatim (Note [Replay at the launch] in
//   engine.hpp). The recorder keeps each kernel's parameters as one packed block in the
//   device-side layout (tracer/param_packing.hpp), which is exactly what cuLaunchKernel
//   takes through `extra`; no per-kernel knowledge is needed to launch it again.
// Approach: kernels go back through cuLaunchKernel with the recorded handle (a CUfunction,
//   or a CUkernel cast to one: the driver accepts both), dims, shared memory and stream,
//   and the packed block as CU_LAUNCH_PARAM_BUFFER_POINTER / CU_LAUNCH_PARAM_BUFFER_SIZE.
//   Copies go through cuMemcpyAsync (unified addressing resolves host or device sides),
//   sets through cuMemsetD8Async. Validation's downloads and repairs synchronize the stream
//   and copy synchronously. Every call runs under tracer::untraced_scope, so the CUPTI
//   collector does not record the engine's own work, and in the device's primary context
//   when the calling thread has none. Failures throw sublinear::device_error naming the
//   call and the driver's error.
// Limitations: launch attributes of cuLaunchKernelEx (clusters, cooperative, programmatic
//   dependent launch) are not recorded, so a replay is a plain launch; a kernel that needs
//   them fails to launch and the error is reported. A cuGraphLaunch (handle 0) cannot be
//   replayed (the tracer marks it never-replay, so no plan asks). Not run on a GPU in the
//   session that wrote it: the GPU suite exercises it.
//
// This header does not include <cuda.h>.
#pragma once

#include "allocator/runtime/engine.hpp"

struct CUctx_st;  // CUcontext

namespace sublinear::allocator {
struct driver_api;
}

namespace sublinear::runtime {

class cuda_replay_device final : public replay_device {
 public:
  // `api` is the loaded driver (allocator::load_driver); `context` the device's primary
  // context, used on threads that have no current context.
  cuda_replay_device(const allocator::driver_api& api, CUctx_st* context) : api_(api), context_(context) {}

  void replay(const launch_view& op, allocator::stream_handle stream) override;
  void download(void* host_dst, const void* device_src, std::size_t bytes, allocator::stream_handle stream) override;
  void upload(void* device_dst, const void* host_src, std::size_t bytes, allocator::stream_handle stream) override;
  void copy(void* dst, const void* src, std::size_t bytes, allocator::stream_handle stream) override;
  double now_s() override;

 private:
  void enter();
  const allocator::driver_api& api_;
  CUctx_st* context_;
};

}  // namespace sublinear::runtime
