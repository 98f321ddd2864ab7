// See Note [Hash on the device] in block_hash_terms.hpp.
#include "runtime/cuda/cuda_block_hash.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda/driver_table.hpp"
#include "sublinear/error.hpp"
#include "tracer/cupti/cupti_collector.hpp"

// The kernel image (block_hash_kernel.cu through nvcc -fatbin, embedded by
// cmake/EmbedBinary.cmake); a build without nvcc has none.
#if SUBLINEAR_BLOCK_HASH_IMAGE
extern const unsigned char sublinear_block_hash_image[];  // cuModuleLoadData reads its own length
#endif

namespace sublinear::runtime {

namespace {
constexpr std::size_t slots_per_chunk = 4096;  // 32 KiB on the device and pinned
constexpr unsigned threads_per_block = 256;
constexpr unsigned max_blocks = 1024;
}  // namespace

// Slots of eight bytes on the device (the kernel's sum) and pinned on the host (where it
// comes back), each with the event recorded after its copy. A slot is taken again only
// once its event has completed, whichever stream used it.
struct cuda_block_hash::pool {
  struct slot {
    CUdeviceptr device = 0;
    std::uint64_t* host = nullptr;
    CUevent done = nullptr;
  };
  const device::driver_api& api;
  decltype(&::cuModuleLoadData) module_load_data = nullptr;
  decltype(&::cuModuleGetFunction) module_get_function = nullptr;
  decltype(&::cuModuleUnload) module_unload = nullptr;
  decltype(&::cuMemAlloc_v2) mem_alloc = nullptr;
  decltype(&::cuMemFree_v2) mem_free = nullptr;
  decltype(&::cuMemHostAlloc) host_alloc = nullptr;
  decltype(&::cuMemFreeHost) free_host = nullptr;
  decltype(&::cuMemcpyDtoHAsync_v2) memcpy_dtoh_async = nullptr;
  std::once_flag load_once;
  std::string why_not;
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  std::mutex mutex;
  std::vector<slot> chunks;  // each chunk's first slot: what to free
  std::size_t handed_out = 0;  // slots made so far (the chunks hold chunks.size() * slots_per_chunk)
  std::vector<CUevent> events;  // every slot's, for the teardown
  std::deque<slot> retired;    // given back, in order

  explicit pool(const device::driver_api& a) : api(a) {}
  ~pool() {
    for (CUevent e : events) SUBLINEAR_CU_UNCHECKED(api.event_destroy(e));
    for (const slot& c : chunks) {
      SUBLINEAR_CU_UNCHECKED(mem_free(c.device));
      SUBLINEAR_CU_UNCHECKED(free_host(c.host));
    }
    if (module != nullptr) SUBLINEAR_CU_UNCHECKED(module_unload(module));
  }

  void load() {
#if SUBLINEAR_BLOCK_HASH_IMAGE
    if (!(module_load_data && module_get_function && module_unload && mem_alloc && mem_free && host_alloc &&
          free_host && memcpy_dtoh_async)) {
      why_not = "the driver lacks an entry point this needs (cuModuleLoadData, cuMemcpyDtoHAsync, ...)";
      return;
    }
    if (const CUresult r = module_load_data(&module, sublinear_block_hash_image); r != CUDA_SUCCESS) {
      module = nullptr;
      why_not = "the driver refused the hash kernel's image (" + device::error_text(&api, r) +
                "; it holds sm_80 and sm_90 code and compute_80 PTX)";
      return;
    }
    if (const CUresult r = module_get_function(&kernel, module, "sublinear_block_hash"); r != CUDA_SUCCESS) {
      why_not = "the hash kernel is missing from its image (" + device::error_text(&api, r) + ")";
    }
#else
    why_not = "this build has no hash kernel (nvcc was not found when it was configured)";
#endif
  }

  slot take() {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!retired.empty() && api.event_query(retired.front().done) == CUDA_SUCCESS) {
      const slot s = retired.front();
      retired.pop_front();
      return s;
    }
    if (handed_out == chunks.size() * slots_per_chunk) {
      slot c;
      void* host = nullptr;
      CUresult r = mem_alloc(&c.device, slots_per_chunk * sizeof(std::uint64_t));
      if (r == CUDA_SUCCESS) {
        r = host_alloc(&host, slots_per_chunk * sizeof(std::uint64_t), 0);
        if (r != CUDA_SUCCESS) SUBLINEAR_CU_UNCHECKED(mem_free(c.device));
      }
      if (r != CUDA_SUCCESS && !retired.empty()) {
        // No memory for more slots (a full device): wait for the oldest given back.
        const slot s = retired.front();
        SUBLINEAR_CU_CHECK(api, api.event_synchronize(s.done));
        retired.pop_front();
        return s;
      }
      SUBLINEAR_CU_CHECK(api, r);
      c.host = static_cast<std::uint64_t*>(host);
      chunks.push_back(c);
    }
    const slot& c = chunks[handed_out / slots_per_chunk];
    const std::size_t k = handed_out % slots_per_chunk;
    slot s{c.device + k * sizeof(std::uint64_t), c.host + k, nullptr};
    SUBLINEAR_CU_CHECK(api, api.event_create(&s.done, CU_EVENT_DISABLE_TIMING));
    events.push_back(s.done);
    ++handed_out;
    return s;
  }
  void give_back(const slot& s) {
    const std::lock_guard<std::mutex> lock(mutex);
    retired.push_back(s);
  }
  // A hash on its way: holds its slot until no copy of its result is left, then gives it
  // back (to be reused once its event has completed).
  struct pending final : hash_result::state {
    std::shared_ptr<pool> owner;
    slot held;
    bool lost = false;  // a call after the slot's first queued op failed: never reused
    pending(std::shared_ptr<pool> o, slot s) : owner(std::move(o)), held(s) {}
    ~pending() override {
      if (!lost) owner->give_back(held);
    }
    pending(const pending&) = delete;
    pending& operator=(const pending&) = delete;
    std::atomic<bool> done{false};  // the event has completed: no query again
    bool ready() override {
      if (done.load(std::memory_order_acquire)) return true;
      const tracer::untraced_scope untraced;
      const CUresult r = owner->api.event_query(held.done);
      if (r != CUDA_ERROR_NOT_READY) SUBLINEAR_CU_CHECK(owner->api, r);
      if (r == CUDA_SUCCESS) done.store(true, std::memory_order_release);
      return r == CUDA_SUCCESS;
    }
    std::uint64_t get() override {
      if (!done.load(std::memory_order_acquire)) {
        const tracer::untraced_scope untraced;
        SUBLINEAR_CU_CHECK(owner->api, owner->api.event_synchronize(held.done));
        done.store(true, std::memory_order_release);
      }
      return *held.host;
    }
  };
};

cuda_block_hash::cuda_block_hash(const device::driver_api& api) : pool_(std::make_shared<pool>(api)) {
  auto& m = *pool_;
  SUBLINEAR_OPTIONAL_ENTRY(m.module_load_data, cuModuleLoadData);
  SUBLINEAR_OPTIONAL_ENTRY(m.module_get_function, cuModuleGetFunction);
  SUBLINEAR_OPTIONAL_ENTRY(m.module_unload, cuModuleUnload);
  SUBLINEAR_OPTIONAL_ENTRY(m.mem_alloc, cuMemAlloc_v2);
  SUBLINEAR_OPTIONAL_ENTRY(m.mem_free, cuMemFree_v2);
  SUBLINEAR_OPTIONAL_ENTRY(m.host_alloc, cuMemHostAlloc);
  SUBLINEAR_OPTIONAL_ENTRY(m.free_host, cuMemFreeHost);
  SUBLINEAR_OPTIONAL_ENTRY(m.memcpy_dtoh_async, cuMemcpyDtoHAsync_v2);
}

cuda_block_hash::~cuda_block_hash() = default;

const std::string& cuda_block_hash::unavailable_reason() {
  pool& m = *pool_;
  std::call_once(m.load_once, [&m] { m.load(); });
  return m.why_not;
}

hash_result cuda_block_hash::hash(const void* device_src, std::size_t bytes, device::stream_handle stream) {
  pool& m = *pool_;
  const auto s = m.take();
  auto held = std::make_shared<pool::pending>(pool_, s);
  CUstream on = static_cast<CUstream>(stream);
  CUdeviceptr data = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(device_src));
  unsigned long long length = bytes;
  CUdeviceptr out = s.device;
  void* params[] = {&data, &length, &out};
  const std::size_t words = bytes / 8;
  const auto blocks = static_cast<unsigned>(
      std::clamp<std::size_t>((words + threads_per_block * 16 - 1) / (threads_per_block * 16), 1, max_blocks));
  SUBLINEAR_CU_CHECK(m.api, m.api.memset_d8_async(out, 0, sizeof(std::uint64_t), on));
  try {
    SUBLINEAR_CU_CHECK(m.api, m.api.launch_kernel(m.kernel, blocks, 1, 1, threads_per_block, 1, 1, 0, on, params,
                                                  nullptr));
    SUBLINEAR_CU_CHECK(m.api, m.memcpy_dtoh_async(s.host, out, sizeof(std::uint64_t), on));
    SUBLINEAR_CU_CHECK(m.api, m.api.event_record(s.done, on));
  } catch (...) {
    held->lost = true;  // what was queued may still write the slot, after its event
    throw;
  }
  return hash_result(held);
}

}  // namespace sublinear::runtime
