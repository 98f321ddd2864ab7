// See Note [Replay through the driver] in cuda_replay_device.hpp.
#include "allocator/runtime/cuda/cuda_replay_device.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "allocator/cuda/driver_table.hpp"
#include "sublinear/error.hpp"
#include "tracer/cupti/cupti_collector.hpp"

namespace sublinear::runtime {

namespace {
CUdeviceptr device_ptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
CUstream cu_stream(allocator::stream_handle s) { return static_cast<CUstream>(s); }
}  // namespace

cuda_replay_device::cuda_replay_device(const allocator::driver_api& api, CUctx_st* context)
    : api_(api), context_(context) {
  // The same library load_driver opened; optional entry points (drivers before 12.4 lack them).
  if (void* h = ::dlopen(allocator::driver_library, RTLD_NOW | RTLD_NOLOAD); h != nullptr) {
    func_param_info_ = ::dlsym(h, "cuFuncGetParamInfo");
    kernel_param_info_ = ::dlsym(h, "cuKernelGetParamInfo");
    func_get_attribute_ = ::dlsym(h, "cuFuncGetAttribute");
  }
}

std::vector<std::size_t> cuda_replay_device::parameter_offsets(std::uint64_t handle) const {
  std::vector<std::size_t> offsets;
  auto* func_info = reinterpret_cast<decltype(&::cuFuncGetParamInfo)>(func_param_info_);
  auto* kernel_info = reinterpret_cast<decltype(&::cuKernelGetParamInfo)>(kernel_param_info_);
  std::size_t offset = 0, size = 0;
  const auto f = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(handle));
  const bool as_function = func_info != nullptr && func_info(f, 0, &offset, &size) == CUDA_SUCCESS;
  const auto k = reinterpret_cast<CUkernel>(static_cast<std::uintptr_t>(handle));
  if (!as_function && (kernel_info == nullptr || kernel_info(k, 0, &offset, &size) != CUDA_SUCCESS)) return offsets;
  for (std::size_t i = 0;; ++i) {
    const CUresult r = as_function ? func_info(f, i, &offset, &size) : kernel_info(k, i, &offset, &size);
    if (r != CUDA_SUCCESS) break;  // past the last parameter
    offsets.push_back(offset);
  }
  return offsets;
}

std::string cuda_replay_device::result_name(int result) const {
  const char* name = nullptr;
  if (api_.get_error_name != nullptr) (void)api_.get_error_name(static_cast<CUresult>(result), &name);
  return name != nullptr ? std::string(name) : "CUresult " + std::to_string(result);
}

std::string cuda_replay_device::function_attributes(std::uint64_t handle) const {
  auto* get = reinterpret_cast<decltype(&::cuFuncGetAttribute)>(func_get_attribute_);
  if (get == nullptr) return "the function's attributes are unknown (no cuFuncGetAttribute)";
  const auto f = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(handle));
  const std::pair<CUfunction_attribute, const char*> wanted[] = {
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block"},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "static shared"},
      {CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "max dynamic shared"},
      {CU_FUNC_ATTRIBUTE_NUM_REGS, "registers"},
      {CU_FUNC_ATTRIBUTE_PTX_VERSION, "PTX version"},
      {CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, "required cluster width"},
      {CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, "non-portable cluster size allowed"}};
  std::string out = "the function (as a CUfunction):";
  for (const auto& [attribute, label] : wanted) {
    int value = 0;
    const CUresult r = get(&value, attribute, f);
    out += std::string(" ") + label + " " + (r == CUDA_SUCCESS ? std::to_string(value) : result_name(r)) + ";";
  }
  out += " parameter offsets from the driver: " + std::to_string(parameter_offsets(handle).size());
  return out;
}

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
      const auto f = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(op.kernel_handle));
      const CUresult packed = api_.launch_kernel(f, op.grid.x, op.grid.y, op.grid.z, op.block.x, op.block.y,
                                                 op.block.z, op.shared_mem, cu_stream(stream), nullptr,
                                                 size != 0 ? extra : nullptr);
      if (packed == CUDA_SUCCESS) break;
      std::string retry = "not tried";
      if (packed == CUDA_ERROR_INVALID_VALUE && size != 0) {
        // The kernelParams form, one pointer per parameter into the same packed block.
        const std::vector<std::size_t> offsets = parameter_offsets(op.kernel_handle);
        std::vector<void*> args;
        for (std::size_t o : offsets)
          if (o < size) args.push_back(const_cast<std::byte*>(op.params.data()) + o);
        if (!args.empty() && args.size() == offsets.size()) {
          const CUresult r = api_.launch_kernel(f, op.grid.x, op.grid.y, op.grid.z, op.block.x, op.block.y,
                                                op.block.z, op.shared_mem, cu_stream(stream), args.data(), nullptr);
          if (r == CUDA_SUCCESS) break;
          retry = "refused too (" + result_name(r) + ", " + std::to_string(args.size()) + " parameter(s))";
        } else {
          retry = "not possible (the driver gave " + std::to_string(offsets.size()) + " parameter offsets)";
        }
      }
      // Everything that decides whether a plain launch is accepted, for the report: a
      // cuDNN BatchNorm kernel refused this way on an H200 (docs/gpu-suite.md).
      throw device_error("sublinear: cuLaunchKernel refused the replay: " + result_name(packed) + " with the " +
                         std::to_string(size) + "-byte packed parameter block; the kernelParams form " + retry +
                         "; launch grid " + std::to_string(op.grid.x) + "x" + std::to_string(op.grid.y) + "x" +
                         std::to_string(op.grid.z) + ", block " + std::to_string(op.block.x) + "x" +
                         std::to_string(op.block.y) + "x" + std::to_string(op.block.z) + ", dynamic shared " +
                         std::to_string(op.shared_mem) + " B; " + function_attributes(op.kernel_handle));
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

void cuda_replay_device::fill(void* dst, std::uint8_t value, std::size_t bytes, allocator::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.memset_d8_async(device_ptr(dst), value, bytes, cu_stream(stream)));
  SUBLINEAR_CU_CHECK(api_, api_.stream_synchronize(cu_stream(stream)));
}

double cuda_replay_device::now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace sublinear::runtime
