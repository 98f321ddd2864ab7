// See Note [CUDA copy link] in cuda_copy_link.hpp.
#include "runtime/cuda/cuda_copy_link.hpp"


#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda/driver_table.hpp"
#include "sublinear/error.hpp"
#include "tracer/cupti/cupti_collector.hpp"

namespace sublinear::runtime {

namespace {
CUdeviceptr ptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

struct measured_link {
  double to_host = 0.0, to_device = 0.0, to_host_latency = 0.0, to_device_latency = 0.0;
};
std::mutex cache_mutex;
std::map<int, measured_link>& cache() {
  static std::map<int, measured_link> per_device;
  return per_device;
}
}  // namespace

struct cuda_copy_link::impl {
  const device::driver_api& api;
  CUcontext context;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamDestroy_v2) stream_destroy = nullptr;
  decltype(&::cuStreamWaitEvent) stream_wait_event = nullptr;
  decltype(&::cuMemHostAlloc) host_alloc = nullptr;
  decltype(&::cuMemFreeHost) free_host = nullptr;
  decltype(&::cuEventElapsedTime) elapsed = nullptr;
  decltype(&::cuMemAlloc_v2) mem_alloc = nullptr;
  decltype(&::cuMemFree_v2) mem_free = nullptr;
  CUstream out = nullptr, in = nullptr;
  void* pool = nullptr;
  std::size_t pool_bytes = 0;
  std::vector<CUevent> plain, timing;  // pooled events
  struct span {
    CUevent begin, end;
    bool stall;
  };
  std::vector<span> pending;  // timed spans not yet collected
  double busy_s = 0.0, stall_s = 0.0;
  std::size_t to_host_bytes = 0, to_device_bytes = 0;
  bool measured = false;
  measured_link link;
  std::mutex mutex;

  impl(const device::driver_api& a, CUcontext c) : api(a), context(c) {}

  CUevent event(bool timed) {
    auto& pool_of = timed ? timing : plain;
    if (!pool_of.empty()) {
      CUevent e = pool_of.back();
      pool_of.pop_back();
      return e;
    }
    CUevent e = nullptr;
    SUBLINEAR_CU_CHECK(api, api.event_create(&e, timed ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING));
    return e;
  }
  void streams() {
    if (out != nullptr) return;
    SUBLINEAR_CU_CHECK(api, stream_create(&out, CU_STREAM_NON_BLOCKING));
    SUBLINEAR_CU_CHECK(api, stream_create(&in, CU_STREAM_NON_BLOCKING));
  }
  // Adds the spans whose events have completed to the figures.
  void collect() {
    for (std::size_t k = 0; k < pending.size();) {
      span& s = pending[k];
      if (api.event_query(s.end) != CUDA_SUCCESS) {
        ++k;
        continue;
      }
      float ms = 0.0f;
      if (elapsed(&ms, s.begin, s.end) == CUDA_SUCCESS) (s.stall ? stall_s : busy_s) += ms / 1e3;
      timing.push_back(s.begin);
      timing.push_back(s.end);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  // Seconds for `copies` copies of `bytes` on `stream`, timed with events.
  double timed_copies(CUstream stream, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, int copies) {
    CUevent b = event(true), e = event(true);
    SUBLINEAR_CU_CHECK(api, api.event_record(b, stream));
    for (int i = 0; i < copies; ++i) SUBLINEAR_CU_CHECK(api, api.memcpy_async(dst, src, bytes, stream));
    SUBLINEAR_CU_CHECK(api, api.event_record(e, stream));
    SUBLINEAR_CU_CHECK(api, api.event_synchronize(e));
    float ms = 0.0f;
    SUBLINEAR_CU_CHECK(api, elapsed(&ms, b, e));
    timing.push_back(b);
    timing.push_back(e);
    return ms / 1e3;
  }
};

cuda_copy_link::cuda_copy_link(const device::driver_api& api, CUctx_st* context)
    : impl_(std::make_unique<impl>(api, context)) {
  auto& m = *impl_;
  SUBLINEAR_OPTIONAL_ENTRY(m.stream_create, cuStreamCreate);
  SUBLINEAR_OPTIONAL_ENTRY(m.stream_destroy, cuStreamDestroy_v2);
  SUBLINEAR_OPTIONAL_ENTRY(m.stream_wait_event, cuStreamWaitEvent);
  SUBLINEAR_OPTIONAL_ENTRY(m.host_alloc, cuMemHostAlloc);
  SUBLINEAR_OPTIONAL_ENTRY(m.free_host, cuMemFreeHost);
  SUBLINEAR_OPTIONAL_ENTRY(m.elapsed, cuEventElapsedTime);
  SUBLINEAR_OPTIONAL_ENTRY(m.mem_alloc, cuMemAlloc_v2);
  SUBLINEAR_OPTIONAL_ENTRY(m.mem_free, cuMemFree_v2);
}

cuda_copy_link::~cuda_copy_link() {
  auto& m = *impl_;
  const tracer::untraced_scope untraced;
  if (m.out != nullptr) {
    SUBLINEAR_CU_UNCHECKED(m.api.stream_synchronize(m.out));
    SUBLINEAR_CU_UNCHECKED(m.api.stream_synchronize(m.in));
    SUBLINEAR_CU_UNCHECKED(m.stream_destroy(m.out));
    SUBLINEAR_CU_UNCHECKED(m.stream_destroy(m.in));
  }
  for (auto& s : m.pending) {
    SUBLINEAR_CU_UNCHECKED(m.api.event_destroy(s.begin));
    SUBLINEAR_CU_UNCHECKED(m.api.event_destroy(s.end));
  }
  for (CUevent e : m.plain) SUBLINEAR_CU_UNCHECKED(m.api.event_destroy(e));
  for (CUevent e : m.timing) SUBLINEAR_CU_UNCHECKED(m.api.event_destroy(e));
  // The pinned pool is the process's until it exits (the driver frees it then).
}

bool cuda_copy_link::available() const noexcept {
  const auto& m = *impl_;
  return m.stream_create && m.stream_destroy && m.stream_wait_event && m.host_alloc && m.free_host && m.elapsed &&
         m.mem_alloc && m.mem_free && m.api.memcpy_async && m.api.event_create && m.api.event_record;
}

std::byte* cuda_copy_link::host_pool(std::size_t bytes) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (m.pool_bytes >= bytes) return static_cast<std::byte*>(m.pool);
  const tracer::untraced_scope untraced;
  if (m.pool != nullptr) {  // between iterations only: nothing is in flight
    m.streams();
    SUBLINEAR_CU_CHECK(m.api, m.api.stream_synchronize(m.out));
    SUBLINEAR_CU_CHECK(m.api, m.api.stream_synchronize(m.in));
    SUBLINEAR_CU_CHECK(m.api, m.free_host(m.pool));
    m.pool = nullptr;
    m.pool_bytes = 0;
  }
  void* p = nullptr;
  const CUresult r = m.host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS)
    throw error("cuMemHostAlloc of " + std::to_string(bytes) + " bytes of pinned host memory failed (" +
                        device::error_text(&m.api, r) + ")");
  m.pool = p;
  m.pool_bytes = bytes;
  return static_cast<std::byte*>(p);
}

bool cuda_copy_link::can_pin() const noexcept { return impl_->host_alloc != nullptr && impl_->free_host != nullptr; }

std::byte* cuda_copy_link::pinned(std::size_t bytes) {
  auto& m = *impl_;
  if (!can_pin()) return nullptr;
  const tracer::untraced_scope untraced;
  void* p = nullptr;
  if (m.host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return nullptr;
  return static_cast<std::byte*>(p);
}

void cuda_copy_link::unpin(std::byte* p) noexcept {
  if (p == nullptr || impl_->free_host == nullptr) return;
  const tracer::untraced_scope untraced;
  (void)impl_->free_host(p);
}

replay_device::copy_handle cuda_copy_link::copy(void* dst, const void* src, std::size_t bytes,
                                                device::stream_handle after, bool to_host) {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  const tracer::untraced_scope untraced;
  m.streams();
  CUstream on = to_host ? m.out : m.in;
  CUevent ready = m.event(false);
  SUBLINEAR_CU_CHECK(m.api, m.api.event_record(ready, static_cast<CUstream>(after)));
  SUBLINEAR_CU_CHECK(m.api, m.stream_wait_event(on, ready, 0));
  m.plain.push_back(ready);  // reusable once recorded again: the wait captured this record
  CUevent begin = m.event(true), end = m.event(true);
  SUBLINEAR_CU_CHECK(m.api, m.api.event_record(begin, on));
  SUBLINEAR_CU_CHECK(m.api, m.api.memcpy_async(ptr(dst), ptr(src), bytes, on));
  SUBLINEAR_CU_CHECK(m.api, m.api.event_record(end, on));
  m.pending.push_back({begin, end, false});
  (to_host ? m.to_host_bytes : m.to_device_bytes) += bytes;
  CUevent done = m.event(false);
  SUBLINEAR_CU_CHECK(m.api, m.api.event_record(done, on));
  return done;
}

bool cuda_copy_link::done(replay_device::copy_handle c) {
  return c == nullptr || impl_->api.event_query(static_cast<CUevent>(c)) == CUDA_SUCCESS;
}

void cuda_copy_link::wait(replay_device::copy_handle c) {
  if (c == nullptr) return;
  const tracer::untraced_scope untraced;
  SUBLINEAR_CU_CHECK(impl_->api, impl_->api.event_synchronize(static_cast<CUevent>(c)));
}

void cuda_copy_link::stream_wait(device::stream_handle stream, replay_device::copy_handle c) {
  if (c == nullptr || done(c)) return;
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  const tracer::untraced_scope untraced;
  const auto s = static_cast<CUstream>(stream);
  CUevent begin = m.event(true), end = m.event(true);
  SUBLINEAR_CU_CHECK(m.api, m.api.event_record(begin, s));
  SUBLINEAR_CU_CHECK(m.api, m.stream_wait_event(s, static_cast<CUevent>(c), 0));
  SUBLINEAR_CU_CHECK(m.api, m.api.event_record(end, s));
  m.pending.push_back({begin, end, true});
}

void cuda_copy_link::release(replay_device::copy_handle c) noexcept {
  if (c == nullptr) return;
  std::lock_guard lock(impl_->mutex);
  impl_->plain.push_back(static_cast<CUevent>(c));  // a pending event may be recorded again later
}

replay_device::link_figures cuda_copy_link::figures() {
  auto& m = *impl_;
  std::lock_guard lock(m.mutex);
  const tracer::untraced_scope untraced;
  replay_device::link_figures f;
  if (!available()) {
    f.source = "synchronous";
    return f;
  }
  if (!m.measured) {
    CUdevice device = 0;
    SUBLINEAR_CU_CHECK(m.api, m.api.ctx_get_device(&device));
    {
      std::lock_guard cached(cache_mutex);
      if (auto it = cache().find(static_cast<int>(device)); it != cache().end()) {
        m.link = it->second;
        m.measured = true;
      }
    }
    if (!m.measured) {
      constexpr std::size_t kBytes = std::size_t{8} << 20;
      m.streams();
      if (m.pool_bytes < kBytes) {
        m.mutex.unlock();
        try {
          host_pool(kBytes);
        } catch (...) {
          m.mutex.lock();
          throw;
        }
        m.mutex.lock();
      }
      CUdeviceptr scratch = 0;
      SUBLINEAR_CU_CHECK(m.api, m.mem_alloc(&scratch, kBytes));
      const auto host = ptr(m.pool);
      (void)m.timed_copies(m.out, host, scratch, kBytes, 1);  // warm up
      m.link.to_host = 3.0 * kBytes / m.timed_copies(m.out, host, scratch, kBytes, 3);
      m.link.to_device = 3.0 * kBytes / m.timed_copies(m.in, scratch, host, kBytes, 3);
      m.link.to_host_latency = m.timed_copies(m.out, host, scratch, 4, 10) / 10.0;
      m.link.to_device_latency = m.timed_copies(m.in, scratch, host, 4, 10) / 10.0;
      SUBLINEAR_CU_UNCHECKED(m.mem_free(scratch));
      m.measured = true;
      std::lock_guard cached(cache_mutex);
      cache()[static_cast<int>(device)] = m.link;
    }
  }
  m.collect();
  f.to_host_bytes_per_s = m.link.to_host;
  f.to_device_bytes_per_s = m.link.to_device;
  f.to_host_latency_s = m.link.to_host_latency;
  f.to_device_latency_s = m.link.to_device_latency;
  f.source = "measured";
  f.to_host_bytes = m.to_host_bytes;
  f.to_device_bytes = m.to_device_bytes;
  f.busy_s = m.busy_s;
  f.stall_s = m.stall_s;
  return f;
}

}  // namespace sublinear::runtime
