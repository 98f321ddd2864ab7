// See Note [Replay through the driver] in cuda_replay_device.hpp.
#include "allocator/runtime/cuda/cuda_replay_device.hpp"

#include <chrono>
#include <cstdint>
#include <string>

#include "allocator/cuda/driver_table.hpp"
#include "sublinear/error.hpp"
#include "tracer/cupti/cupti_collector.hpp"

namespace sublinear::runtime {

namespace {
CUdeviceptr device_ptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
CUstream cu_stream(allocator::stream_handle s) { return static_cast<CUstream>(s); }
}  // namespace

void cuda_replay_device::enter() {
  CUcontext current = nullptr;
  SUBLINEAR_CU_CHECK(api_, api_.ctx_get_current(&current));
  if (current == nullptr) SUBLINEAR_CU_CHECK(api_, api_.ctx_set_current(context_));
}

void cuda_replay_device::replay(const launch_view& op, allocator::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  switch (op.what) {
    case launch_view::kind::kernel: {
      if (op.kernel_handle == 0) {
        throw device_error("sublinear: a cuGraphLaunch cannot be replayed (its nodes were not recorded)");
      }
      // The packed block is the device-side layout; the driver copies it at launch, so
      // the engine's buffer may change afterwards.
      std::size_t size = op.params.size();
      void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<std::byte*>(op.params.data()),
                       CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
      SUBLINEAR_CU_CHECK(api_, api_.launch_kernel(reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(op.kernel_handle)),
                                                  op.grid.x, op.grid.y, op.grid.z, op.block.x, op.block.y, op.block.z,
                                                  op.shared_mem, cu_stream(stream), nullptr,
                                                  size != 0 ? extra : nullptr));
      break;
    }
    case launch_view::kind::memcpy:
      SUBLINEAR_CU_CHECK(api_, api_.memcpy_async(device_ptr(op.dst), device_ptr(op.src), op.bytes, cu_stream(stream)));
      break;
    case launch_view::kind::memset:
      SUBLINEAR_CU_CHECK(api_, api_.memset_d8_async(device_ptr(op.dst), static_cast<unsigned char>(op.value), op.bytes,
                                                    cu_stream(stream)));
      break;
  }
}

void cuda_replay_device::download(void* host_dst, const void* device_src, std::size_t bytes,
                                  allocator::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.stream_synchronize(cu_stream(stream)));
  SUBLINEAR_CU_CHECK(api_, api_.memcpy_dtoh(host_dst, device_ptr(device_src), bytes));
}

void cuda_replay_device::upload(void* device_dst, const void* host_src, std::size_t bytes,
                                allocator::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.stream_synchronize(cu_stream(stream)));
  SUBLINEAR_CU_CHECK(api_, api_.memcpy_htod(device_ptr(device_dst), host_src, bytes));
}

void cuda_replay_device::copy(void* dst, const void* src, std::size_t bytes, allocator::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.memcpy_async(device_ptr(dst), device_ptr(src), bytes, cu_stream(stream)));
}

double cuda_replay_device::now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace sublinear::runtime
