// The CUPTI collector (Note [CUPTI collector] in cupti_collector.hpp).
#include "tracer/cupti/cupti_collector.hpp"

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/cuda/driver_api.hpp"
#include "tracer/block_hashes.hpp"
#include "tracer/param_packing.hpp"

namespace sublinear::tracer {

namespace {

// ---- libraries, resolved once ------------------------------------------------------------------

struct cupti_api {
  decltype(&::cuptiSubscribe) subscribe = nullptr;
  decltype(&::cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&::cuptiEnableCallback) enable_callback = nullptr;
  decltype(&::cuptiGetResultString) result_string = nullptr;
  decltype(&::cuptiActivityRegisterCallbacks) activity_register = nullptr;
  decltype(&::cuptiActivityEnable) activity_enable = nullptr;
  decltype(&::cuptiActivityDisable) activity_disable = nullptr;
  decltype(&::cuptiActivityFlushAll) activity_flush_all = nullptr;
  decltype(&::cuptiActivityGetNextRecord) activity_next = nullptr;
};

// Driver entry points the allocator's table does not carry (CUDA >= 12.4 for ParamInfo).
struct driver_extras {
  decltype(&::cuFuncGetParamInfo) func_param_info = nullptr;
  decltype(&::cuKernelGetParamInfo) kernel_param_info = nullptr;
  decltype(&::cuFuncGetName) func_name = nullptr;
  decltype(&::cuKernelGetName) kernel_name = nullptr;
  // Write observation (Note [Write observation on CUDA]); optional: without them no
  // launch is observed.
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuMemcpyDtoH_v2) memcpy_dtoh = nullptr;
};

template <class Fn>
bool resolve(void* lib, const char* name, Fn& out, std::string& missing) {
  out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (out == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return out != nullptr;
}

struct loaded_cupti {
  cupti_api api;
  std::string why;  // empty when loaded
};

const loaded_cupti& cupti_library() {
  static const loaded_cupti lib = [] {
    loaded_cupti l;
    void* h = nullptr;
    std::string errors;
    // The loader's search path first; then the toolkit's own CUPTI directory, which is
    // rarely on it (extras/CUPTI/lib64 under CUDA_HOME, CUDA_PATH or /usr/local/cuda).
    std::vector<std::string> candidates{"libcupti.so", "libcupti.so.13"};
    const char* roots[] = {std::getenv("CUDA_HOME"), std::getenv("CUDA_PATH"), "/usr/local/cuda"};
    for (const char* root : roots) {
      if (root != nullptr && *root != '\0') candidates.push_back(std::string(root) + "/extras/CUPTI/lib64/libcupti.so");
    }
    for (const std::string& name : candidates) {
      h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) break;
      const char* e = dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (e != nullptr ? e : name);
    }
    if (h == nullptr) {
      l.why = "libcupti.so could not be loaded (" + errors +
              "); install the CUDA toolkit's CUPTI and add its library directory to LD_LIBRARY_PATH";
      return l;
    }
    std::string missing;
    resolve(h, "cuptiSubscribe", l.api.subscribe, missing);
    resolve(h, "cuptiUnsubscribe", l.api.unsubscribe, missing);
    resolve(h, "cuptiEnableCallback", l.api.enable_callback, missing);
    resolve(h, "cuptiGetResultString", l.api.result_string, missing);
    resolve(h, "cuptiActivityRegisterCallbacks", l.api.activity_register, missing);
    resolve(h, "cuptiActivityEnable", l.api.activity_enable, missing);
    resolve(h, "cuptiActivityDisable", l.api.activity_disable, missing);
    resolve(h, "cuptiActivityFlushAll", l.api.activity_flush_all, missing);
    resolve(h, "cuptiActivityGetNextRecord", l.api.activity_next, missing);
    if (!missing.empty()) l.why = "libcupti.so lacks " + missing + " (CUPTI from CUDA 13 or later is required)";
    return l;
  }();
  return lib;
}

struct loaded_driver {
  driver_extras api;
  std::string why;
};

// Resolves the entry points the allocator's table lacks from an open libcuda handle.
void resolve_extras(void* h, loaded_driver& l) {
  std::string missing;
  resolve(h, "cuFuncGetParamInfo", l.api.func_param_info, missing);
  resolve(h, "cuKernelGetParamInfo", l.api.kernel_param_info, missing);
  resolve(h, "cuFuncGetName", l.api.func_name, missing);
  resolve(h, "cuKernelGetName", l.api.kernel_name, missing);
  std::string optional;
  resolve(h, "cuCtxSynchronize", l.api.ctx_synchronize, optional);
  resolve(h, "cuMemcpyDtoH_v2", l.api.memcpy_dtoh, optional);
  if (!missing.empty()) {
    l.why = std::string(device::driver_library) + " lacks " + missing +
            " (a driver for CUDA 12.4 or later is required to read kernel parameter layouts)";
  }
}

// `inside_injection`: called from InitializeInjection, inside cuInit (Note [Launch listener]):
// the library is loaded and must not be initialized from here. Decided by the first call.
const loaded_driver& driver_library(bool inside_injection = false) {
  static const loaded_driver lib = [inside_injection] {
    loaded_driver l;
    if (inside_injection) {
      if (void* h = dlopen(device::driver_library, RTLD_NOW | RTLD_NOLOAD); h != nullptr) {
        resolve_extras(h, l);
        return l;
      }
    }
    if (device::load_driver(&l.why) == nullptr) return l;
    // load_driver keeps libcuda.so.1 open; take another reference to the same handle.
    void* h = dlopen(device::driver_library, RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) {
      l.why = std::string(device::driver_library) + " is not loaded although the driver initialized";
      return l;
    }
    resolve_extras(h, l);
    return l;
  }();
  return lib;
}

std::string result_text(const cupti_api& api, CUptiResult r) {
  const char* s = nullptr;
  if (api.result_string != nullptr && api.result_string(r, &s) == CUPTI_SUCCESS && s != nullptr) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

// ---- per-thread state ----------------------------------------------------------------------------

// What the listener threw at ENTER (Note [Listener failure at a launch]).
class listener_failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Set while our callback runs: driver calls it makes (layout queries) must not recurse.
thread_local bool t_inside = false;
thread_local std::vector<std::byte> t_packed;
// The launch's attributes, decoded at ENTER and again at EXIT (the vector keeps its capacity).
thread_local std::vector<device::launch_attribute> t_attributes;
// The correlation id whose parameters t_packed holds (packed at ENTER, reused at EXIT).
thread_local std::uint32_t t_packed_correlation = 0;
thread_local bool t_packed_valid = false;

// Note [Write observation on CUDA]
// Rationale: recipes are exact only if the trace says which blocks each kernel wrote.
//   Without it every touched block may have been written: a recipe's inputs become its
//   temporaries, weights look modified by every kernel that reads them, and plans fail
//   validation or are refused (every regenerated convolution of the cuDNN ResNet fails
//   validation without it). The host collector
//   observes writes by hashing the touched blocks around each kernel (Note [Write
//   observation] in host_collector.hpp); this does the same on the device.
// Approach: while the recorder records (the traced iterations only), at a kernel's ENTER
//   (after the engine's own work for it) the context is synchronized and each block its
//   parameters point into is hashed, reusing the hash kept from the last observed kernel
//   that touched it (Note [Hash reuse]); at EXIT the context is synchronized again and the
//   blocks hashed again; the ones that changed are the launch's writes. Hashing copies
//   the block to host memory in 64 MiB pieces. Copies and sets drop the kept hashes of
//   their destination; a graph launch, whose nodes are not seen, drops them all.
// Limitations: the traced iterations run serialized and pay the copies: about the
//   touched bytes of each kernel once (the before-hash is usually reused), at the
//   device-to-host bandwidth. A kernel that writes a block and restores its bytes reads as
//   not writing it, which is what a recipe needs. Pointers the scan cannot see (inside
//   device-side structures) are neither hashed nor, as before, treated as touched.
struct observation {
  std::uint32_t correlation = 0;
  std::vector<block_extent> blocks;
  std::vector<std::uint64_t> before;
  std::vector<std::uint8_t> fresh;  // still filled as allocated (Note [Filled fresh blocks])
  bool open = false;
};
thread_local observation t_observation;
thread_local std::vector<std::byte> t_staging;

struct layout_entry {
  std::string name;
  std::vector<param_slot> params;
};

kernel_info describe_cuda_kernel(const void* context);

std::atomic<cupti_collector::impl*> g_active{nullptr};

void CUPTIAPI on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata);
void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size, size_t valid);

std::uint64_t as_u64(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// In a _ptsz call a null stream is the calling thread's default stream.
device::stream_handle stream_of(CUstream s, bool per_thread) {
  return s == nullptr && per_thread ? static_cast<device::stream_handle>(CU_STREAM_PER_THREAD)
                                    : static_cast<device::stream_handle>(s);
}

// The CUDA attribute ids and value size are the ones device/launch_attributes.hpp names.
static_assert(sizeof(CUlaunchAttributeValue) == device::launch_attribute_value_bytes);
static_assert(CU_LAUNCH_ATTRIBUTE_COOPERATIVE == device::launch_attribute_id::cooperative);
static_assert(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == device::launch_attribute_id::cluster_dimension);
static_assert(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION ==
              device::launch_attribute_id::programmatic_stream_serialization);
static_assert(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT == device::launch_attribute_id::programmatic_event);
static_assert(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT == device::launch_attribute_id::launch_completion_event);
static_assert(CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT ==
              device::launch_attribute_id::preferred_shared_memory_carveout);
static_assert(CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING ==
              device::launch_attribute_id::nvlink_util_centric_scheduling);

// A launch's attribute list as device::launch_attribute values, into t_attributes.
void decode_attributes(const CUlaunchAttribute* attrs, unsigned n, bool cooperative) {
  t_attributes.clear();
  for (unsigned i = 0; attrs != nullptr && i < n; ++i) {
    if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_IGNORE) continue;
    device::launch_attribute a;
    a.id = static_cast<std::uint32_t>(attrs[i].id);
    std::memcpy(a.value.data(), &attrs[i].value, device::launch_attribute_value_bytes);
    t_attributes.push_back(a);
  }
  if (cooperative) t_attributes.push_back(device::make_launch_attribute(device::launch_attribute_id::cooperative, 1));
}

// A driver call decoded from its callback parameters.
struct decoded_call {
  enum class what : std::uint8_t {
    other, kernel, graph, memcpy, memset, event_record, event_wait, capture_begin, capture_end, stream_ordered
  };
  what call = what::other;
  launch_description op;  // kernel, graph, memcpy, memset (params filled in by the collector)
  CUfunction function = nullptr;
  void** kernel_params = nullptr;
  void** extra = nullptr;
  const CUlaunchAttribute* attrs = nullptr;
  unsigned num_attrs = 0;
  bool cooperative = false;
  copy_kind copy = copy_kind::unknown;
  std::uint64_t event = 0;
  std::size_t bytes = 0;  // stream-ordered allocations
};

decoded_call decode(CUpti_CallbackId cbid, const void* p) {
  decoded_call d;
  using k = launch_description::kind;
  auto kernel = [&](CUfunction f, dims grid, dims block, unsigned shared, CUstream s, bool pt, void** params,
                    void** extra) {
    d.call = decoded_call::what::kernel;
    d.function = f;
    d.kernel_params = params;
    d.extra = extra;
    d.op.what = k::kernel;
    d.op.kernel_handle = as_u64(f);
    d.op.grid = grid;
    d.op.block = block;
    d.op.shared_mem = shared;
    d.op.stream = stream_of(s, pt);
  };
  auto copy = [&](CUdeviceptr dst, const void* host_dst, CUdeviceptr src, const void* host_src, std::size_t n,
                  CUstream s, bool pt, copy_kind ck) {
    d.call = decoded_call::what::memcpy;
    d.op.what = k::memcpy;
    d.op.dst = host_dst != nullptr ? const_cast<void*>(host_dst) : reinterpret_cast<void*>(dst);
    d.op.src = host_src != nullptr ? host_src : reinterpret_cast<const void*>(src);
    d.op.bytes = n;
    d.op.stream = stream_of(s, pt);
    d.copy = ck;
  };
  auto set = [&](CUdeviceptr dst, int value, std::size_t n, CUstream s, bool pt) {
    d.call = decoded_call::what::memset;
    d.op.what = k::memset;
    d.op.dst = reinterpret_cast<void*>(dst);
    d.op.value = value;
    d.op.bytes = n;
    d.op.stream = stream_of(s, pt);
  };
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
      const auto* a = static_cast<const cuLaunchKernel_params*>(p);
      kernel(a->f, {a->gridDimX, a->gridDimY, a->gridDimZ}, {a->blockDimX, a->blockDimY, a->blockDimZ},
             a->sharedMemBytes, a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, a->kernelParams,
             a->extra);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      const auto* a = static_cast<const cuLaunchKernelEx_params*>(p);
      const CUlaunchConfig* c = a->config;
      kernel(a->f, {c->gridDimX, c->gridDimY, c->gridDimZ}, {c->blockDimX, c->blockDimY, c->blockDimZ},
             c->sharedMemBytes, c->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, a->kernelParams,
             a->extra);
      d.attrs = c->attrs;
      d.num_attrs = c->numAttrs;
      decode_attributes(c->attrs, c->numAttrs, false);
      d.op.attributes = t_attributes;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      const auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(p);
      kernel(a->f, {a->gridDimX, a->gridDimY, a->gridDimZ}, {a->blockDimX, a->blockDimY, a->blockDimZ},
             a->sharedMemBytes, a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
             a->kernelParams, nullptr);
      d.cooperative = true;
      decode_attributes(nullptr, 0, true);
      d.op.attributes = t_attributes;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      d.call = decoded_call::what::graph;
      d.op.what = k::kernel;
      d.op.kernel_handle = 0;  // never a valid CUfunction value
      d.op.stream = stream_of(static_cast<const cuGraphLaunch_params*>(p)->hStream,
                              cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz: {
      const auto* a = static_cast<const cuMemcpyAsync_params*>(p);
      copy(a->dst, nullptr, a->src, nullptr, a->ByteCount, a->hStream,
           cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz, copy_kind::unknown);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz: {
      const auto* a = static_cast<const cuMemcpyHtoDAsync_v2_params*>(p);
      copy(a->dstDevice, nullptr, 0, a->srcHost, a->ByteCount, a->hStream,
           cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz, copy_kind::host_to_device);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz: {
      const auto* a = static_cast<const cuMemcpyDtoHAsync_v2_params*>(p);
      copy(0, a->dstHost, a->srcDevice, nullptr, a->ByteCount, a->hStream,
           cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz, copy_kind::device_to_host);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz: {
      const auto* a = static_cast<const cuMemcpyDtoDAsync_v2_params*>(p);
      copy(a->dstDevice, nullptr, a->srcDevice, nullptr, a->ByteCount, a->hStream,
           cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz, copy_kind::device_to_device);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz: {
      const auto* a = static_cast<const cuMemsetD8Async_params*>(p);
      set(a->dstDevice, a->uc, a->N, a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz: {
      // Described as the bytes it covers with the value's low byte (Note [Launch listener]).
      const auto* a = static_cast<const cuMemsetD32Async_params*>(p);
      set(a->dstDevice, static_cast<int>(a->ui & 0xFFU), a->N * 4, a->hStream,
          cbid == CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuEventRecord:
    case CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz: {
      const auto* a = static_cast<const cuEventRecord_params*>(p);
      d.call = decoded_call::what::event_record;
      d.event = as_u64(a->hEvent);
      d.op.stream = stream_of(a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz: {
      const auto* a = static_cast<const cuStreamWaitEvent_params*>(p);
      d.call = decoded_call::what::event_wait;
      d.event = as_u64(a->hEvent);
      d.op.stream = stream_of(a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz);
      break;
    }
    default:
      switch (classify_driver_callback(cbid)) {
        case callback_class::capture_begin:
        case callback_class::capture_end: {
          // Every form's parameter struct begins with the stream.
          const auto* a = static_cast<const cuStreamBeginCapture_params*>(p);
          const bool pt = driver_callback_name(cbid).ends_with("_ptsz");
          d.call = classify_driver_callback(cbid) == callback_class::capture_begin ? decoded_call::what::capture_begin
                                                                                   : decoded_call::what::capture_end;
          d.op.stream = stream_of(a->hStream, pt);
          break;
        }
        case callback_class::stream_ordered_alloc:
          d.call = decoded_call::what::stream_ordered;
          d.bytes = (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync || cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz)
                        ? static_cast<const cuMemAllocAsync_params*>(p)->bytesize
                        : static_cast<const cuMemAllocFromPoolAsync_params*>(p)->bytesize;
          break;
        case callback_class::stream_ordered_free:
        case callback_class::pool: d.call = decoded_call::what::stream_ordered; break;
        default: break;
      }
      break;
  }
  return d;
}

}  // namespace

// ---- the collector ---------------------------------------------------------------------------------

struct cupti_collector::impl {
  impl(recorder& r, cupti_options o) : rec(r), opts(o) {}

  recorder& rec;
  cupti_options opts;
  const cupti_api* api = nullptr;
  const driver_extras* drv = nullptr;
  CUpti_SubscriberHandle subscriber = nullptr;

  std::shared_mutex layouts_mutex;
  std::unordered_map<std::uint64_t, layout_entry> layouts;  // by CUfunction/CUkernel value

  std::mutex correlation_mutex;
  std::unordered_map<std::uint32_t, std::uint64_t> seq_by_correlation;

  std::atomic<bool> warned{false};
  capture_set captures;  // streams being captured: their launches do not run
  std::atomic<collector_phase> phase{collector_phase::tracing};
  std::mutex phase_mutex;
  std::atomic<bool> durations_on{false};  // activity kinds enabled now (Note [Durations only while tracing])
  std::mutex durations_mutex;

  kept_hashes kept;                       // Note [Hash reuse], on device blocks
  std::atomic<std::uint64_t> epoch{0};
  std::atomic<std::uint64_t> observed{0};  // launches whose writes were observed

  bool observing() const {
    return opts.observe_writes && drv != nullptr && drv->ctx_synchronize != nullptr && drv->memcpy_dtoh != nullptr &&
           rec.recording();
  }

  // The hash of a device block's bytes, copied to host memory in pieces; `fill`, when
  // given, says whether every byte is fresh_fill_byte.
  std::uint64_t device_hash(const block_extent& b, bool* fill = nullptr) {
    if (fill != nullptr) *fill = true;
    constexpr std::uint64_t piece = std::uint64_t{64} << 20;
    std::uint64_t h = 0x243F6A8885A308D3ULL ^ b.size;
    for (std::uint64_t off = 0; off < b.size; off += piece) {
      const std::size_t n = static_cast<std::size_t>(std::min(piece, b.size - off));
      t_staging.resize(n);
      const CUresult r = drv->memcpy_dtoh(t_staging.data(), static_cast<CUdeviceptr>(b.base + off), n);
      if (r != CUDA_SUCCESS) throw std::runtime_error("cuMemcpyDtoH failed while observing writes (CUresult " +
                                                      std::to_string(static_cast<int>(r)) + ")");
      h = (h ^ hash_bytes(t_staging.data(), n)) * 0x9E3779B97F4A7C15ULL;
      if (fill != nullptr && *fill) *fill = all_bytes_are(t_staging.data(), n, fresh_fill_byte);
    }
    return h;
  }

  void synchronize_for_observation() {
    const CUresult r = drv->ctx_synchronize();
    if (r != CUDA_SUCCESS) throw std::runtime_error("cuCtxSynchronize failed while observing writes (CUresult " +
                                                    std::to_string(static_cast<int>(r)) + ")");
  }

  // At ENTER, after the listener: the blocks the kernel may touch, hashed before it runs.
  void open_observation(std::uint32_t correlation) {
    t_observation.open = false;
    if (!observing()) return;
    observation& o = t_observation;
    o.correlation = correlation;
    o.blocks = rec.touched_blocks(t_packed);
    o.before.clear();
    o.fresh.assign(o.blocks.size(), 0);
    if (!o.blocks.empty()) {
      synchronize_for_observation();
      const std::uint64_t hashing = now_ns();
      const std::uint64_t e = epoch.load(std::memory_order_relaxed);
      for (std::size_t i = 0; i < o.blocks.size(); ++i) {
        std::uint64_t h = 0;
        if (!kept.find(o.blocks[i], e, h)) {
          bool fill = false;
          h = device_hash(o.blocks[i], &fill);
          o.fresh[i] = fill ? 1 : 0;
        }
        o.before.push_back(h);
      }
      rec.add_observation_ns(now_ns() - hashing);
    }
    o.open = true;
  }

  // At EXIT, once the launch is recorded as `seq`: which of those blocks it changed.
  void close_observation(std::uint32_t correlation, std::uint64_t seq) {
    observation& o = t_observation;
    if (!o.open || o.correlation != correlation) {
      epoch.fetch_add(1, std::memory_order_relaxed);  // an unobserved kernel: kept hashes go stale
      return;
    }
    o.open = false;
    if (seq == no_seq) return;
    std::vector<std::uint64_t> written, untouched;
    if (!o.blocks.empty()) {
      synchronize_for_observation();
      const std::uint64_t hashing = now_ns();
      const std::uint64_t e = epoch.load(std::memory_order_relaxed);
      for (std::size_t i = 0; i < o.blocks.size(); ++i) {
        const std::uint64_t after = device_hash(o.blocks[i]);
        if (after != o.before[i]) {
          written.push_back(o.blocks[i].base);
        } else if (o.fresh[i] != 0) {
          untouched.push_back(o.blocks[i].base);
        }
        kept.keep(o.blocks[i], e, after);
      }
      rec.add_observation_ns(now_ns() - hashing);
    }
    rec.set_writes(seq, written, untouched);
    observed.fetch_add(1, std::memory_order_relaxed);
  }

  // The collector's own recording time (recorder::recording_ns), left out of the traced
  // host cost per launch (Note [Predicted iteration time]); the clock is read only while
  // recording, since untraced iterations take these callbacks on every launch.
  std::uint64_t recording_clock() const { return rec.recording() ? now_ns() : 0; }
  void add_recording_since(std::uint64_t entered) {
    if (entered != 0) rec.add_recording_ns(now_ns() - entered);
  }

  // The layout and name of a kernel handle, queried once.
  const layout_entry& layout_for(CUfunction f, const char* symbol) {
    const std::uint64_t key = as_u64(f);
    {
      std::shared_lock lock(layouts_mutex);
      if (auto it = layouts.find(key); it != layouts.end()) return it->second;
    }
    layout_entry e;
    // A CUkernel may arrive cast to CUfunction (cuda.h: cuLaunchKernel); try the function
    // query first, the kernel query when the first parameter cannot be read that way.
    size_t off = 0, size = 0;
    bool as_kernel = false;
    if (drv->func_param_info(f, 0, &off, &size) != CUDA_SUCCESS &&
        drv->kernel_param_info(reinterpret_cast<CUkernel>(f), 0, &off, &size) == CUDA_SUCCESS) {
      as_kernel = true;
    }
    for (size_t i = 0;; ++i) {
      const CUresult r = as_kernel ? drv->kernel_param_info(reinterpret_cast<CUkernel>(f), i, &off, &size)
                                   : drv->func_param_info(f, i, &off, &size);
      if (r != CUDA_SUCCESS) break;  // CUDA_ERROR_INVALID_VALUE past the last parameter
      e.params.push_back({static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(size)});
    }
    const char* name = symbol;
    if (name == nullptr) {
      if (drv->func_name(&name, f) != CUDA_SUCCESS) name = nullptr;
      if (name == nullptr && drv->kernel_name(&name, reinterpret_cast<CUkernel>(f)) != CUDA_SUCCESS) name = nullptr;
    }
    e.name = name != nullptr ? name : "[kernel " + std::to_string(key) + "]";
    std::unique_lock lock(layouts_mutex);
    return layouts.try_emplace(key, std::move(e)).first->second;
  }

  void remember(std::uint32_t correlation, std::uint64_t seq) {
    if (!durations_on.load(std::memory_order_relaxed) || seq == no_seq) return;
    std::lock_guard lock(correlation_mutex);
    seq_by_correlation[correlation] = seq;
  }

  void duration(std::uint32_t correlation, std::uint64_t start, std::uint64_t end) {
    std::uint64_t seq = no_seq;
    {
      std::lock_guard lock(correlation_mutex);
      auto it = seq_by_correlation.find(correlation);
      if (it == seq_by_correlation.end()) return;
      seq = it->second;
      seq_by_correlation.erase(it);
    }
    rec.set_duration(seq, end > start ? end - start : 0);
  }

  struct kernel_description {
    const layout_entry* layout;
    bool flag_tensor_maps;
  };

  std::atomic<launch_listener*> listener{nullptr};

  // Packs a kernel's parameters into t_packed (once per call: ENTER packs, EXIT reuses).
  void pack(const decoded_call& d, const CUpti_CallbackData& cb, const layout_entry& layout) {
    if (t_packed_valid && t_packed_correlation == cb.correlationId) return;
    if (d.extra != nullptr) {
      pack_extra(d.extra, t_packed);
    } else {
      pack_kernel_params(layout.params, d.kernel_params, t_packed);
    }
    t_packed_correlation = cb.correlationId;
    t_packed_valid = true;
  }

  // The listener's ENTER, its exceptions marked as its own (Note [Listener failure at a launch]).
  static void enter(launch_listener& l, const launch_description& op) {
    try {
      l.on_enter(op);
    } catch (const std::exception& e) {
      throw listener_failure(e.what());
    }
  }

  // A launch, copy or set queued into a stream capture is not run now (Note [Graph
  // launches] in tracer/analysis.cpp: the graph launch stands for it).
  bool captured(const decoded_call& d) const { return captures.any() && captures.capturing(d.op.stream); }

  void on_enter(CUpti_CallbackId cbid, const CUpti_CallbackData& cb, launch_listener& l) {
    decoded_call d = decode(cbid, cb.functionParams);
    if (captured(d)) return;
    switch (d.call) {
      case decoded_call::what::kernel: {
        const std::uint64_t entered = recording_clock();
        pack(d, cb, layout_for(d.function, cb.symbolName));
        d.op.params = t_packed;
        add_recording_since(entered);
        enter(l, d.op);
        // After the engine's own work for this launch (a block restored while tracing).
        open_observation(cb.correlationId);
        break;
      }
      case decoded_call::what::graph:
      case decoded_call::what::memcpy:
      case decoded_call::what::memset: enter(l, d.op); break;
      default: break;
    }
  }

  void on_exit(CUpti_CallbackId cbid, const CUpti_CallbackData& cb) {
    decoded_call d = decode(cbid, cb.functionParams);
    if (d.call == decoded_call::what::capture_begin) {
      captures.begin(d.op.stream);
      return;
    }
    if (d.call == decoded_call::what::stream_ordered) {
      if (launch_listener* l = listener.load(std::memory_order_acquire))
        l->on_stream_ordered(driver_callback_name(cbid), d.bytes);
      return;
    }
    if (captured(d)) return;
    std::uint64_t entered = recording_clock();
    switch (d.call) {
      case decoded_call::what::kernel: {
        const layout_entry& layout = layout_for(d.function, cb.symbolName);
        pack(d, cb, layout);
        t_packed_valid = false;
        d.op.params = t_packed;
        launch_args a;
        a.kernel_handle = d.op.kernel_handle;
        a.grid = d.op.grid;
        a.block = d.op.block;
        a.shared_mem = d.op.shared_mem;
        a.stream = d.op.stream;
        a.params = t_packed;
        a.correlation = cb.correlationId;
        a.attributes = d.op.attributes;
        const kernel_description desc{&layout, opts.flag_tensor_maps};
        const std::uint64_t seq = rec.record_launch(a, &describe_cuda_kernel, &desc);
        remember(cb.correlationId, seq);
        add_recording_since(entered);  // the observation below is timed as such
        entered = 0;
        close_observation(cb.correlationId, seq);
        break;
      }
      case decoded_call::what::graph: {
        static const layout_entry graph{"[cuGraphLaunch]", {}};
        launch_args a;
        a.kernel_handle = 0;
        a.stream = d.op.stream;
        a.correlation = cb.correlationId;
        const kernel_description desc{&graph, false};
        remember(cb.correlationId, rec.record_launch(a, [](const void* c) {
          kernel_info k = describe_cuda_kernel(c);
          k.never_replay = true;  // its nodes' pointers are not scanned
          return k;
        }, &desc));
        epoch.fetch_add(1, std::memory_order_relaxed);  // its nodes may write anything
        break;
      }
      case decoded_call::what::memcpy:
        remember(cb.correlationId, rec.record_memcpy(d.op.dst, d.op.src, d.op.bytes, d.op.stream, d.copy));
        kept.drop(reinterpret_cast<std::uintptr_t>(d.op.dst), d.op.bytes);
        break;
      case decoded_call::what::memset:
        remember(cb.correlationId, rec.record_memset(d.op.dst, d.op.value, d.op.bytes, d.op.stream));
        kept.drop(reinterpret_cast<std::uintptr_t>(d.op.dst), d.op.bytes);
        break;
      case decoded_call::what::event_record: rec.record_event_record(d.event, d.op.stream); break;
      case decoded_call::what::event_wait: rec.record_event_wait(d.event, d.op.stream); break;
      case decoded_call::what::capture_begin:
      case decoded_call::what::capture_end:
      case decoded_call::what::stream_ordered:
      case decoded_call::what::other: break;
    }
    add_recording_since(entered);
    if (d.call == decoded_call::what::kernel || d.call == decoded_call::what::graph ||
        d.call == decoded_call::what::memcpy || d.call == decoded_call::what::memset) {
      if (launch_listener* l = listener.load(std::memory_order_acquire)) l->on_exit(d.op);
    }
  }

  void warn_once(const CUpti_CallbackData& cb, const char* what) {
    if (warned.exchange(true)) return;
    std::fprintf(stderr, "sublinear: CUPTI collector failed at %s: %s\n",
                 cb.functionName != nullptr ? cb.functionName : "a call", what);
  }
};

namespace {

kernel_info describe_cuda_kernel(const void* context) {
  const auto* d = static_cast<const cupti_collector::impl::kernel_description*>(context);
  kernel_info k;
  k.name = d->layout->name;
  k.params = d->layout->params;
  k.param_bytes = static_cast<std::uint32_t>(packed_size(k.params));
  k.never_replay = d->flag_tensor_maps && has_tensor_map_param(k.params);
  return k;
}

void CUPTIAPI on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
  if (t_inside || domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(cbdata);
  auto* self = static_cast<cupti_collector::impl*>(userdata);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    launch_listener* l = self->listener.load(std::memory_order_acquire);
    if (l == nullptr) return;
    t_inside = true;
    try {
      self->on_enter(cbid, *cb, *l);
    } catch (const listener_failure& e) {
      fail_at_launch_enter(cb->functionName != nullptr ? cb->functionName : "a launch", e.what());
    } catch (const std::exception& e) {
      self->warn_once(*cb, e.what());  // the collector's own: the listener was not reached
    }
    t_inside = false;
    return;
  }
  if (cb->callbackSite != CUPTI_API_EXIT) return;
  // A capture ends with its cuStreamEndCapture, whether the capture succeeded or not.
  if (classify_driver_callback(cbid) == callback_class::capture_end) {
    const decoded_call d = decode(cbid, cb->functionParams);
    self->captures.end(d.op.stream);
    return;
  }
  // Record only what the driver accepted.
  if (cb->functionReturnValue == nullptr || *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS) {
    t_packed_valid = false;
    return;
  }
  t_inside = true;
  try {
    self->on_exit(cbid, *cb);
  } catch (const std::exception& e) {
    // An exception must not cross the driver; the trace is incomplete from here on, which
    // the runtime sees as divergence (safe).
    self->warn_once(*cb, e.what());
  }
  t_inside = false;
}

constexpr size_t activity_buffer_bytes = size_t{8} << 20;

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, activity_buffer_bytes));
  *size = *buffer != nullptr ? activity_buffer_bytes : 0;
  *max_records = 0;
}

void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  cupti_collector::impl* self = g_active.load(std::memory_order_acquire);
  if (self != nullptr && buffer != nullptr) {
    CUpti_Activity* r = nullptr;
    while (self->api->activity_next(buffer, valid, &r) == CUPTI_SUCCESS) {
      switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
          self->duration(k->correlationId, k->start, k->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
          self->duration(m->correlationId, m->start, m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
          self->duration(m->correlationId, m->start, m->end);
          break;
        }
        default: break;
      }
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind activity_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                 CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

std::string cupti_collector::unavailable_reason() {
  if (const loaded_cupti& c = cupti_library(); !c.why.empty()) return c.why;
  if (const loaded_driver& d = driver_library(); !d.why.empty()) return d.why;
  if (g_active.load(std::memory_order_acquire) != nullptr) return "a sublinear CUPTI collector is already active";
  return "";
}

cupti_collector::cupti_collector(recorder& rec, cupti_options options)
    : impl_(std::make_unique<impl>(rec, options)) {
  const loaded_cupti& c = cupti_library();
  if (!c.why.empty()) throw cupti_unavailable("CUPTI collector: " + c.why);
  const loaded_driver& d = driver_library(options.inside_injection);
  if (!d.why.empty()) throw cupti_unavailable("CUPTI collector: " + d.why);
  impl_->listener.store(options.listener, std::memory_order_release);
  impl_->api = &c.api;
  impl_->drv = &d.api;
  impl* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, impl_.get(), std::memory_order_acq_rel)) {
    throw cupti_unavailable("CUPTI collector: one is already active in this process (CUPTI allows one subscriber)");
  }
  const cupti_api& api = c.api;
  const CUptiResult r = api.subscribe(&impl_->subscriber, &on_callback, impl_.get());
  if (r != CUPTI_SUCCESS) {
    g_active.store(nullptr, std::memory_order_release);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      throw cupti_unavailable(
          "CUPTI collector: another CUPTI subscriber is active (a profiler such as Nsight Systems or Compute, "
          "cuda-gdb, compute-sanitizer, or torch.profiler/Kineto); sublinear cannot trace this process and runs "
          "without recomputation");
    }
    throw cupti_unavailable("CUPTI collector: cuptiSubscribe failed: " + result_text(api, r));
  }
  for (CUpti_CallbackId cbid : subscription_for(collector_phase::tracing).callbacks) {
    const CUptiResult e = api.enable_callback(1, impl_->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    if (e != CUPTI_SUCCESS) {
      api.unsubscribe(impl_->subscriber);
      g_active.store(nullptr, std::memory_order_release);
      throw cupti_unavailable("CUPTI collector: enabling driver callback " + std::to_string(cbid) +
                              " failed: " + result_text(api, e));
    }
  }
  if (options.durations) {
    CUptiResult e = api.activity_register(&on_buffer_requested, &on_buffer_completed);
    for (CUpti_ActivityKind k : activity_kinds) {
      if (e == CUPTI_SUCCESS) e = api.activity_enable(k);
    }
    if (e != CUPTI_SUCCESS) {
      // Durations are an improvement, not a requirement: costs fall back to estimates.
      std::fprintf(stderr, "sublinear: CUPTI activity records unavailable (%s); kernel costs will be estimated\n",
                   result_text(api, e).c_str());
      impl_->opts.durations = false;
    } else {
      impl_->durations_on.store(true, std::memory_order_release);
    }
  }
}

cupti_collector::~cupti_collector() {
  const cupti_api& api = *impl_->api;
  set_durations(false);
  api.unsubscribe(impl_->subscriber);
  g_active.store(nullptr, std::memory_order_release);
}

void cupti_collector::flush() {
  if (impl_->durations_on.load(std::memory_order_acquire)) impl_->api->activity_flush_all(1);
}

void cupti_collector::set_durations(bool on) {
  if (!impl_->opts.durations) return;
  std::lock_guard lock(impl_->durations_mutex);
  if (impl_->durations_on.load(std::memory_order_acquire) == on) return;
  const cupti_api& api = *impl_->api;
  if (!on) {
    api.activity_flush_all(1);  // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: what is pending reaches the recorder
    for (CUpti_ActivityKind k : activity_kinds) api.activity_disable(k);
    impl_->durations_on.store(false, std::memory_order_release);
    return;
  }
  CUptiResult e = CUPTI_SUCCESS;
  for (CUpti_ActivityKind k : activity_kinds)
    if (e == CUPTI_SUCCESS) e = api.activity_enable(k);
  if (e != CUPTI_SUCCESS) {
    for (CUpti_ActivityKind k : activity_kinds) api.activity_disable(k);
    std::fprintf(stderr, "sublinear: CUPTI activity records could not be enabled again (%s); kernel costs will be "
                 "estimated\n", result_text(api, e).c_str());
    impl_->opts.durations = false;
    return;
  }
  impl_->durations_on.store(true, std::memory_order_release);
}

bool cupti_collector::durations_on() const noexcept { return impl_->durations_on.load(std::memory_order_acquire); }

bool cupti_collector::set_phase(collector_phase phase) {
  std::lock_guard lock(impl_->phase_mutex);
  const collector_phase was = impl_->phase.load(std::memory_order_acquire);
  if (was == phase) return true;
  const std::vector<std::uint32_t> before = subscription_for(was).callbacks;
  const subscription after = subscription_for(phase);
  const cupti_api& api = *impl_->api;
  // Enable what the new phase adds first, then disable what it drops.
  for (std::uint32_t cbid : after.callbacks) {
    if (std::binary_search(before.begin(), before.end(), cbid)) continue;
    const CUptiResult e = api.enable_callback(1, impl_->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    if (e != CUPTI_SUCCESS) {
      std::fprintf(stderr, "sublinear: CUPTI refused to enable callback %u for the %s phase (%s); staying in the %s "
                   "phase\n", cbid, to_string(phase), result_text(api, e).c_str(), to_string(was));
      for (std::uint32_t undo : after.callbacks)
        if (!std::binary_search(before.begin(), before.end(), undo) && undo != cbid)
          api.enable_callback(0, impl_->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, undo);
      return false;
    }
  }
  for (std::uint32_t cbid : before)
    if (!std::binary_search(after.callbacks.begin(), after.callbacks.end(), cbid))
      api.enable_callback(0, impl_->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
  impl_->phase.store(phase, std::memory_order_release);
  set_durations(after.activity);
  return true;
}

collector_phase cupti_collector::phase() const noexcept { return impl_->phase.load(std::memory_order_acquire); }

void cupti_collector::set_listener(launch_listener* listener) noexcept {
  impl_->listener.store(listener, std::memory_order_release);
}

untraced_scope::untraced_scope() noexcept : previous_(t_inside) { t_inside = true; }

untraced_scope::~untraced_scope() { t_inside = previous_; }

}  // namespace sublinear::tracer
