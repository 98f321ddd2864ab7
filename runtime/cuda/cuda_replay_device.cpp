// See Note [Replay through the driver] in cuda_replay_device.hpp.
#include "runtime/cuda/cuda_replay_device.hpp"


#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda/driver_table.hpp"
#include "sublinear/error.hpp"
#include "tracer/cupti/cupti_collector.hpp"

namespace sublinear::runtime {

namespace {
CUdeviceptr device_ptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
CUstream cu_stream(device::stream_handle s) { return static_cast<CUstream>(s); }
}  // namespace

cuda_replay_device::cuda_replay_device(const device::driver_api& api, CUctx_st* context)
    : link_(api, context), hasher_(api), api_(api), context_(context) {
  // Optional entry points (drivers before 12.4 lack them).
  func_param_info_ = device::optional_driver_symbol("cuFuncGetParamInfo");
  kernel_param_info_ = device::optional_driver_symbol("cuKernelGetParamInfo");
  func_get_attribute_ = device::optional_driver_symbol("cuFuncGetAttribute");
  kernel_get_function_ = device::optional_driver_symbol("cuKernelGetFunction");
  kernel_get_attribute_ = device::optional_driver_symbol("cuKernelGetAttribute");
  func_set_attribute_ = device::optional_driver_symbol("cuFuncSetAttribute");
  kernel_set_attribute_ = device::optional_driver_symbol("cuKernelSetAttribute");
  launch_kernel_ex_ = device::optional_driver_symbol("cuLaunchKernelEx");
}

int cuda_replay_device::launch_once(const launch_view& op, CUfunc_st* fn, device::stream_handle stream, void** params,
                               void** extra) const {
  if (op.attributes.empty()) {
    return api_.launch_kernel(fn, op.grid.x, op.grid.y, op.grid.z, op.block.x, op.block.y, op.block.z, op.shared_mem,
                              cu_stream(stream), params, extra);
  }
  // Note [Launch attributes] (device/launch_attributes.hpp): the recorded attributes again.
  auto* ex = reinterpret_cast<decltype(&::cuLaunchKernelEx)>(launch_kernel_ex_);
  if (ex == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  static_assert(sizeof(CUlaunchAttributeValue) == device::launch_attribute_value_bytes);
  constexpr std::size_t inline_attrs = 8;
  CUlaunchAttribute local[inline_attrs];
  std::vector<CUlaunchAttribute> many;
  CUlaunchAttribute* attrs = local;
  if (op.attributes.size() > inline_attrs) {
    many.resize(op.attributes.size());
    attrs = many.data();
  }
  for (std::size_t i = 0; i < op.attributes.size(); ++i) {
    attrs[i] = CUlaunchAttribute{};
    attrs[i].id = static_cast<CUlaunchAttributeID>(op.attributes[i].id);
    std::memcpy(&attrs[i].value, op.attributes[i].value.data(), device::launch_attribute_value_bytes);
  }
  CUlaunchConfig config{};
  config.gridDimX = op.grid.x;
  config.gridDimY = op.grid.y;
  config.gridDimZ = op.grid.z;
  config.blockDimX = op.block.x;
  config.blockDimY = op.block.y;
  config.blockDimZ = op.block.z;
  config.sharedMemBytes = op.shared_mem;
  config.hStream = cu_stream(stream);
  config.attrs = attrs;
  config.numAttrs = static_cast<unsigned>(op.attributes.size());
  return ex(&config, fn, params, extra);
}

cuda_replay_device::attribute_answer cuda_replay_device::attribute(std::uint64_t handle, int which) const {
  auto* get = reinterpret_cast<decltype(&::cuFuncGetAttribute)>(func_get_attribute_);
  auto* get_kernel = reinterpret_cast<decltype(&::cuKernelGetAttribute)>(kernel_get_attribute_);
  const auto attr = static_cast<CUfunction_attribute>(which);
  attribute_answer out{CUDA_ERROR_NOT_SUPPORTED, 0, handle_kind::unknown};
  const auto f = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(handle));
  if (get != nullptr && (out.result = get(&out.value, attr, f)) == CUDA_SUCCESS) {
    out.kind = handle_kind::function;
    return out;
  }
  CUdevice device = 0;
  const auto k = reinterpret_cast<CUkernel>(static_cast<std::uintptr_t>(handle));
  if (get_kernel != nullptr && api_.ctx_get_device != nullptr && api_.ctx_get_device(&device) == CUDA_SUCCESS &&
      (out.result = get_kernel(&out.value, attr, k, device)) == CUDA_SUCCESS) {
    out.kind = handle_kind::kernel;
  }
  return out;
}

std::optional<int> cuda_replay_device::shared_limit(std::uint64_t handle) const {
  const attribute_answer a = attribute(handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  if (a.kind == handle_kind::unknown) return std::nullopt;
  return a.value;
}

int cuda_replay_device::set_shared_limit(std::uint64_t handle, int bytes) const {
  auto* set = reinterpret_cast<decltype(&::cuFuncSetAttribute)>(func_set_attribute_);
  auto* set_kernel = reinterpret_cast<decltype(&::cuKernelSetAttribute)>(kernel_set_attribute_);
  const auto f = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(handle));
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (set != nullptr) r = set(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  if (r == CUDA_SUCCESS) return r;
  CUdevice device = 0;
  const auto k = reinterpret_cast<CUkernel>(static_cast<std::uintptr_t>(handle));
  if (set_kernel != nullptr && api_.ctx_get_device != nullptr && api_.ctx_get_device(&device) == CUDA_SUCCESS) {
    r = set_kernel(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes, k, device);
  }
  return r;
}

std::vector<std::pair<std::size_t, std::size_t>> cuda_replay_device::parameter_layout(std::uint64_t handle) const {
  std::vector<std::pair<std::size_t, std::size_t>> layout;
  auto* func_info = reinterpret_cast<decltype(&::cuFuncGetParamInfo)>(func_param_info_);
  auto* kernel_info = reinterpret_cast<decltype(&::cuKernelGetParamInfo)>(kernel_param_info_);
  std::size_t offset = 0, size = 0;
  const auto f = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(handle));
  const bool as_function = func_info != nullptr && func_info(f, 0, &offset, &size) == CUDA_SUCCESS;
  const auto k = reinterpret_cast<CUkernel>(static_cast<std::uintptr_t>(handle));
  if (!as_function && (kernel_info == nullptr || kernel_info(k, 0, &offset, &size) != CUDA_SUCCESS)) return layout;
  for (std::size_t i = 0;; ++i) {
    const CUresult r = as_function ? func_info(f, i, &offset, &size) : kernel_info(k, i, &offset, &size);
    if (r != CUDA_SUCCESS) break;  // past the last parameter
    layout.emplace_back(offset, size);
  }
  return layout;
}

std::vector<std::size_t> cuda_replay_device::parameter_offsets(std::uint64_t handle) const {
  std::vector<std::size_t> offsets;
  for (const auto& [offset, size] : parameter_layout(handle)) offsets.push_back(offset);
  return offsets;
}

std::string cuda_replay_device::result_name(int result) const {
  const char* name = nullptr;
  if (api_.get_error_name != nullptr) (void)api_.get_error_name(static_cast<CUresult>(result), &name);
  return name != nullptr ? std::string(name) : "CUresult " + std::to_string(result);
}

namespace {
constexpr std::pair<CUfunction_attribute, const char*> reported_attributes[] = {
    {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block"},
    {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "static shared"},
    {CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "max dynamic shared"},
    {CU_FUNC_ATTRIBUTE_NUM_REGS, "registers"},
    {CU_FUNC_ATTRIBUTE_PTX_VERSION, "PTX version"},
    {CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, "cluster size must be set"},
    {CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, "required cluster width"},
    {CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, "non-portable cluster size allowed"}};
}  // namespace

std::string cuda_replay_device::function_attributes(std::uint64_t handle) const {
  // A CUfunction answers cuFuncGetAttribute; a CUkernel cast to one answers
  // cuKernelGetAttribute for a device instead.
  const handle_kind kind = attribute(handle, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK).kind;
  std::string out;
  if (kind == handle_kind::unknown) {
    out = "the driver answers no attribute query for the handle, as a CUfunction or a CUkernel;";
  } else {
    out = kind == handle_kind::function ? "the handle is a CUfunction:" : "the handle is a CUkernel:";
    for (const auto& [which, label] : reported_attributes) {
      const attribute_answer a = attribute(handle, which);
      out += std::string(" ") + label + " " +
             (a.kind != handle_kind::unknown ? std::to_string(a.value) : result_name(a.result)) + ";";
    }
  }
  const auto layout = parameter_layout(handle);
  std::size_t end = 0;
  for (const auto& [offset, size] : layout) end = std::max(end, offset + size);
  out += " the driver gives " + std::to_string(layout.size()) + " parameter(s) ending at byte " + std::to_string(end);
  return out;
}

void cuda_replay_device::enter() {
  CUcontext current = nullptr;
  SUBLINEAR_CU_CHECK(api_, api_.ctx_get_current(&current));
  if (current == nullptr) SUBLINEAR_CU_CHECK(api_, api_.ctx_set_current(context_));
}

void cuda_replay_device::replay(const launch_view& op, device::stream_handle stream) {
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
      // Both launch forms with one function value; empty when launched, else what the
      // driver said.
      const auto launch = [&](CUfunction fn) -> std::string {
        const auto packed = static_cast<CUresult>(launch_once(op, fn, stream, nullptr, size != 0 ? extra : nullptr));
        if (packed == CUDA_SUCCESS) return {};
        std::string retry = "not tried";
        if (packed == CUDA_ERROR_INVALID_VALUE && size != 0) {
          // The kernelParams form, one pointer per parameter into the same packed block.
          const std::vector<std::size_t> offsets = parameter_offsets(op.kernel_handle);
          std::vector<void*> args;
          for (std::size_t o : offsets)
            if (o < size) args.push_back(const_cast<std::byte*>(op.params.data()) + o);
          if (!args.empty() && args.size() == offsets.size()) {
            const auto r = static_cast<CUresult>(launch_once(op, fn, stream, args.data(), nullptr));
            if (r == CUDA_SUCCESS) return {};
            retry = "refused too (" + result_name(r) + ", " + std::to_string(args.size()) + " parameter(s))";
          } else {
            retry = "not possible (the driver gave " + std::to_string(offsets.size()) + " parameter offsets)";
          }
        }
        return result_name(packed) + " with the " + std::to_string(size) + "-byte packed parameter block; the " +
               "kernelParams form " + retry;
      };
      std::string refused = launch(f);
      if (refused.empty()) break;
      // Note [Dynamic shared memory limit] (device/host/device.hpp): the program may
      // have lowered the function's limit since the recorded launch (cuDNN sets it to
      // what each launch needs); raise it for this launch and put it back.
      if (const std::optional<int> limit = shared_limit(op.kernel_handle);
          limit && op.shared_mem > 0 && *limit < static_cast<int>(op.shared_mem)) {
        const int r = set_shared_limit(op.kernel_handle, static_cast<int>(op.shared_mem));
        if (r != CUDA_SUCCESS) {
          refused += "; raising its dynamic shared memory limit from " + std::to_string(*limit) + " to " +
                     std::to_string(op.shared_mem) + " B failed (" + result_name(r) + ")";
        } else {
          const std::string again = launch(f);
          // Put back as a courtesy: a limit left higher refuses no later launch, so a
          // failure here does not make the replay (queued by now) a failure.
          (void)set_shared_limit(op.kernel_handle, *limit);
          if (again.empty()) break;
          refused += "; with its dynamic shared memory limit raised from " + std::to_string(*limit) + " to " +
                     std::to_string(op.shared_mem) + " B: " + again;
        }
      }
      // A CUkernel handle: launch the CUfunction it stands for in the current context.
      auto* resolve = reinterpret_cast<decltype(&::cuKernelGetFunction)>(kernel_get_function_);
      CUfunction resolved = nullptr;
      std::string second = "; no CUfunction to try instead (cuKernelGetFunction ";
      if (resolve == nullptr) {
        second += "is missing)";
      } else if (const CUresult r = resolve(&resolved, reinterpret_cast<CUkernel>(f)); r != CUDA_SUCCESS) {
        second += "said " + result_name(r) + ")";
      } else if (resolved == f) {
        second += "gave the same handle)";
      } else {
        const std::string again = launch(resolved);
        if (again.empty()) break;
        second = "; the CUfunction cuKernelGetFunction gives for it: " + again;
      }
      // Everything that decides whether a plain launch is accepted, for the report: a
      // cuDNN BatchNorm kernel refused this way on an H200 (docs/gpu-suite.md).
      std::string with;
      for (const device::launch_attribute& a : op.attributes)
        with += (with.empty() ? "; launch attributes " : ", ") + device::launch_attribute_name(a.id);
      throw device_error(std::string("sublinear: ") + (op.attributes.empty() ? "cuLaunchKernel" : "cuLaunchKernelEx") +
                         " refused the replay: " + refused + second + with + "; launch grid " +
                         std::to_string(op.grid.x) + "x" + std::to_string(op.grid.y) + "x" +
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
                                  device::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.stream_synchronize(cu_stream(stream)));
  SUBLINEAR_CU_CHECK(api_, api_.memcpy_dtoh(host_dst, device_ptr(device_src), bytes));
}

void cuda_replay_device::upload(void* device_dst, const void* host_src, std::size_t bytes,
                                device::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.stream_synchronize(cu_stream(stream)));
  SUBLINEAR_CU_CHECK(api_, api_.memcpy_htod(device_ptr(device_dst), host_src, bytes));
}

std::byte* cuda_replay_device::allocate_host_copy(std::size_t bytes) {
  if (api_.memcpy_async != nullptr) {
    enter();
    if (std::byte* p = link_.pinned(bytes); p != nullptr) {
      pinned_copies_.insert(p);
      return p;
    }
  }
  return replay_device::allocate_host_copy(bytes);
}

void cuda_replay_device::free_host_copy(std::byte* p) noexcept {
  if (pinned_copies_.erase(p) != 0) {
    link_.unpin(p);
    return;
  }
  replay_device::free_host_copy(p);
}

bool cuda_replay_device::downloads_on_stream() { return link_.can_pin() && api_.memcpy_async != nullptr; }

bool cuda_replay_device::download_on_stream(void* host_dst, const void* device_src, std::size_t bytes,
                                            device::stream_handle stream) {
  // Pageable memory would make the copy wait for the stream anyway.
  if (pinned_copies_.count(host_dst) == 0)
    return replay_device::download_on_stream(host_dst, device_src, bytes, stream);
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.memcpy_async(device_ptr(host_dst), device_ptr(device_src), bytes, cu_stream(stream)));
  return true;
}

std::byte* cuda_replay_device::host_pool(std::size_t bytes) {
  if (!link_.available()) return replay_device::host_pool(bytes);
  enter();
  return link_.host_pool(bytes);
}

replay_device::copy_handle cuda_replay_device::copy_to_host(void* host_dst, const void* device_src, std::size_t bytes,
                                                            device::stream_handle after) {
  if (!link_.available()) return replay_device::copy_to_host(host_dst, device_src, bytes, after);
  enter();
  return link_.copy(host_dst, device_src, bytes, after, true);
}

replay_device::copy_handle cuda_replay_device::copy_to_device(void* device_dst, const void* host_src,
                                                              std::size_t bytes, device::stream_handle after) {
  if (!link_.available()) return replay_device::copy_to_device(device_dst, host_src, bytes, after);
  enter();
  return link_.copy(device_dst, host_src, bytes, after, false);
}

replay_device::link_figures cuda_replay_device::link() {
  if (!link_.available()) return replay_device::link();
  enter();
  return link_.figures();
}

void cuda_replay_device::copy(void* dst, const void* src, std::size_t bytes, device::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.memcpy_async(device_ptr(dst), device_ptr(src), bytes, cu_stream(stream)));
}

void cuda_replay_device::fill(void* dst, std::uint8_t value, std::size_t bytes, device::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.memset_d8_async(device_ptr(dst), value, bytes, cu_stream(stream)));
  SUBLINEAR_CU_CHECK(api_, api_.stream_synchronize(cu_stream(stream)));
}

void cuda_replay_device::synchronize(device::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  SUBLINEAR_CU_CHECK(api_, api_.stream_synchronize(cu_stream(stream)));
}

bool cuda_replay_device::hash_on_device(const void* device_src) {
  return reinterpret_cast<std::uintptr_t>(device_src) % 8 == 0 && hasher_.unavailable_reason().empty();
}

// A buffer keeps its address, so every hash of it is taken the same way, and the engine
// compares only hashes of one buffer (Note [Hash on the device]).
hash_result cuda_replay_device::hash(const void* device_src, std::size_t bytes, device::stream_handle stream) {
  const tracer::untraced_scope untraced;
  enter();
  if (hash_on_device(device_src)) return hasher_.hash(device_src, bytes, stream);
  return replay_device::hash(device_src, bytes, stream);
}

std::string cuda_replay_device::hash_site() {
  const tracer::untraced_scope untraced;
  enter();
  const std::string& why = hasher_.unavailable_reason();
  return why.empty() ? "hashed on the GPU" : "copied to the host and hashed there: " + why;
}

double cuda_replay_device::now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace sublinear::runtime
