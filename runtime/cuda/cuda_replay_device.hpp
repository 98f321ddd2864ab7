// The replay engine's device on a GPU: regenerated buffers are recomputed by the driver.
//
// Note [Replay through the driver]
// Rationale: a recipe re-runs recorded launches verbatim (Note [Replay at the launch] in
//   runtime/engine_regenerate.cpp). The recorder keeps each kernel's parameters as one packed block in the
//   device-side layout (tracer/param_packing.hpp), which is exactly what cuLaunchKernel
//   takes through `extra`; no per-kernel knowledge is needed to launch it again.
// Approach: kernels go back through cuLaunchKernel with the recorded handle (a CUfunction,
//   or a CUkernel cast to one: the driver accepts both), dims, shared memory and stream,
//   and the packed block as CU_LAUNCH_PARAM_BUFFER_POINTER / CU_LAUNCH_PARAM_BUFFER_SIZE.
//   Copies go through cuMemcpyAsync (unified addressing resolves host or device sides),
//   sets through cuMemsetD8Async; validation's downloads and repairs copy synchronously.
//   Every call runs under tracer::untraced_scope (the CUPTI collector does not record the
//   engine's own work), in the device's primary context when the calling thread has none.
//   Failures throw sublinear::device_error naming the call and the driver's error.
//   A launch refused with CUDA_ERROR_INVALID_VALUE is tried again: in the kernelParams
//   form, with the function's dynamic shared memory limit raised to what the launch
//   recorded (Note [Dynamic shared memory limit] in device/host/device.hpp), and, for a
//   CUkernel, as the CUfunction cuKernelGetFunction gives for it. A launch still refused
//   throws with everything that decides whether a launch is accepted. The retries and
//   the cuDNN kernels that need them: docs/design-notes.md#replay-through-the-driver.
//   A launch recorded with attributes (Note [Launch attributes] in
//   device/launch_attributes.hpp) goes back through cuLaunchKernelEx with them, in both
//   parameter forms.
// Limitations: a cuGraphLaunch (handle 0) cannot be replayed (the
//   tracer marks it never-replay, so no plan asks). A launch the driver still refuses
//   throws; the engine turns that into a validation mismatch while a copy exists (Note
//   [Failed recipe] in runtime/engine_regenerate.cpp).
//
// This header does not include <cuda.h>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_block_hash.hpp"
#include "runtime/cuda/cuda_copy_link.hpp"
#include "runtime/engine.hpp"

struct CUctx_st;   // CUcontext
struct CUfunc_st;  // CUfunction

namespace sublinear::device {
struct driver_api;
}

namespace sublinear::runtime {

class cuda_replay_device final : public replay_device {
 public:
  // `api` is the loaded driver (device::load_driver); `context` the device's primary
  // context, used on threads that have no current context.
  cuda_replay_device(const device::driver_api& api, CUctx_st* context);

  void replay(const launch_view& op, device::stream_handle stream) override;
  void download(void* host_dst, const void* device_src, std::size_t bytes, device::stream_handle stream) override;
  void upload(void* device_dst, const void* host_src, std::size_t bytes, device::stream_handle stream) override;
  void copy(void* dst, const void* src, std::size_t bytes, device::stream_handle stream) override;
  void fill(void* dst, std::uint8_t value, std::size_t bytes, device::stream_handle stream) override;
  void synchronize(device::stream_handle stream) override;
  double now_s() override;
  // On the GPU by a kernel where it can (Note [Hash on the device] in block_hash_terms.hpp),
  // else the default's copy to the host.
  hash_result hash(const void* device_src, std::size_t bytes, device::stream_handle stream) override;
  std::string hash_site() override;
  // Input copies in pinned memory, queued on the program's stream (cuMemcpyAsync), the
  // host not waiting; the defaults where the driver gives no pinned memory.
  std::byte* allocate_host_copy(std::size_t bytes) override;
  void free_host_copy(std::byte* p) noexcept override;
  bool download_on_stream(void* host_dst, const void* device_src, std::size_t bytes,
                          device::stream_handle stream) override;
  bool downloads_on_stream() override;
  // Offload copies on copy streams into a pinned pool (Note [CUDA copy link]); the
  // synchronous defaults where the driver lacks an entry point.
  std::byte* host_pool(std::size_t bytes) override;
  copy_handle copy_to_host(void* host_dst, const void* device_src, std::size_t bytes,
                           device::stream_handle after) override;
  copy_handle copy_to_device(void* device_dst, const void* host_src, std::size_t bytes,
                             device::stream_handle after) override;
  bool copy_done(copy_handle c) override { return link_.done(c); }
  void wait_copy(copy_handle c) override { link_.wait(c); }
  void stream_wait_copy(device::stream_handle stream, copy_handle c) override { link_.stream_wait(stream, c); }
  void release_copy(copy_handle c) noexcept override { link_.release(c); }
  link_figures link() override;

 private:
  cuda_copy_link link_;
  std::unordered_set<const void*> pinned_copies_;  // allocate_host_copy's pinned blocks
  cuda_block_hash hasher_;
  // The kernel can hash at `device_src` (loaded, and the address 8-byte aligned).
  bool hash_on_device(const void* device_src);
  void enter();
  // One launch of `op` as `fn` on `stream`, plain or with its attributes (cuLaunchKernelEx);
  // the driver's CUresult (CUDA_ERROR_NOT_SUPPORTED without cuLaunchKernelEx).
  [[nodiscard]] int launch_once(const launch_view& op, CUfunc_st* fn, device::stream_handle stream, void** params,
                           void** extra) const;
  // The parameter offsets of a kernel handle (a CUfunction, else a CUkernel); empty when
  // the driver cannot say.
  [[nodiscard]] std::vector<std::size_t> parameter_offsets(std::uint64_t handle) const;
  // Offset and size of each parameter, as the driver gives them.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> parameter_layout(std::uint64_t handle) const;
  const device::driver_api& api_;
  CUctx_st* context_;
  void* func_param_info_ = nullptr;    // cuFuncGetParamInfo, when the driver has it
  void* kernel_param_info_ = nullptr;  // cuKernelGetParamInfo
  void* func_get_attribute_ = nullptr;  // cuFuncGetAttribute (for refusals' messages)
  void* kernel_get_attribute_ = nullptr;  // cuKernelGetAttribute (idem, for CUkernel handles)
  void* kernel_get_function_ = nullptr;  // cuKernelGetFunction: a CUkernel's CUfunction here
  void* func_set_attribute_ = nullptr;   // cuFuncSetAttribute
  void* kernel_set_attribute_ = nullptr;  // cuKernelSetAttribute
  void* launch_kernel_ex_ = nullptr;      // cuLaunchKernelEx
  // One CUfunction_attribute of a kernel handle: asked as a CUfunction, else as a CUkernel
  // on the current device. `kind` says which answered; `result` is the last CUresult.
  enum class handle_kind : std::uint8_t { unknown, function, kernel };
  struct attribute_answer {
    int result = 0;
    int value = 0;
    handle_kind kind = handle_kind::unknown;
  };
  [[nodiscard]] attribute_answer attribute(std::uint64_t handle, int which) const;
  // The handle's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; nothing when the driver
  // answers neither query.
  [[nodiscard]] std::optional<int> shared_limit(std::uint64_t handle) const;
  // Sets it; the driver's result (a CUresult).
  [[nodiscard]] int set_shared_limit(std::uint64_t handle, int bytes) const;
  [[nodiscard]] std::string result_name(int result) const;
  [[nodiscard]] std::string function_attributes(std::uint64_t handle) const;
};

}  // namespace sublinear::runtime
