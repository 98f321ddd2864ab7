// Callback ids, classes and the subscription per phase (Note [Phase-aware subscription]
// in callback_plan.hpp).
#include "tracer/cupti/callback_plan.hpp"

#include <cupti.h>

#include <algorithm>

#include "common/text.hpp"

namespace sublinear::tracer {

namespace {

struct known_callback {
  CUpti_CallbackId cbid;
  const char* name;
  callback_class what;
};

#define SUBLINEAR_CB(fn, cls) {CUPTI_DRIVER_TRACE_CBID_##fn, #fn, callback_class::cls}

constexpr known_callback known[] = {
    SUBLINEAR_CB(cuLaunchKernel, kernel_launch),
    SUBLINEAR_CB(cuLaunchKernel_ptsz, kernel_launch),
    SUBLINEAR_CB(cuLaunchKernelEx, kernel_launch),
    SUBLINEAR_CB(cuLaunchKernelEx_ptsz, kernel_launch),
    SUBLINEAR_CB(cuLaunchCooperativeKernel, kernel_launch),
    SUBLINEAR_CB(cuLaunchCooperativeKernel_ptsz, kernel_launch),
    SUBLINEAR_CB(cuGraphLaunch, graph_launch),
    SUBLINEAR_CB(cuGraphLaunch_ptsz, graph_launch),
    SUBLINEAR_CB(cuStreamBeginCapture, capture_begin),
    SUBLINEAR_CB(cuStreamBeginCapture_ptsz, capture_begin),
    SUBLINEAR_CB(cuStreamBeginCapture_v2, capture_begin),
    SUBLINEAR_CB(cuStreamBeginCapture_v2_ptsz, capture_begin),
    SUBLINEAR_CB(cuStreamBeginCaptureToGraph, capture_begin),
    SUBLINEAR_CB(cuStreamBeginCaptureToGraph_ptsz, capture_begin),
    SUBLINEAR_CB(cuStreamEndCapture, capture_end),
    SUBLINEAR_CB(cuStreamEndCapture_ptsz, capture_end),
    SUBLINEAR_CB(cuMemcpyAsync, memcpy),
    SUBLINEAR_CB(cuMemcpyAsync_ptsz, memcpy),
    SUBLINEAR_CB(cuMemcpyHtoDAsync_v2, memcpy),
    SUBLINEAR_CB(cuMemcpyHtoDAsync_v2_ptsz, memcpy),
    SUBLINEAR_CB(cuMemcpyDtoHAsync_v2, memcpy),
    SUBLINEAR_CB(cuMemcpyDtoHAsync_v2_ptsz, memcpy),
    SUBLINEAR_CB(cuMemcpyDtoDAsync_v2, memcpy),
    SUBLINEAR_CB(cuMemcpyDtoDAsync_v2_ptsz, memcpy),
    SUBLINEAR_CB(cuMemsetD8Async, memset),
    SUBLINEAR_CB(cuMemsetD8Async_ptsz, memset),
    SUBLINEAR_CB(cuMemsetD32Async, memset),
    SUBLINEAR_CB(cuMemsetD32Async_ptsz, memset),
    SUBLINEAR_CB(cuEventRecord, event_record),
    SUBLINEAR_CB(cuEventRecord_ptsz, event_record),
    SUBLINEAR_CB(cuStreamWaitEvent, event_wait),
    SUBLINEAR_CB(cuStreamWaitEvent_ptsz, event_wait),
    SUBLINEAR_CB(cuMemAllocAsync, stream_ordered_alloc),
    SUBLINEAR_CB(cuMemAllocAsync_ptsz, stream_ordered_alloc),
    SUBLINEAR_CB(cuMemAllocFromPoolAsync, stream_ordered_alloc),
    SUBLINEAR_CB(cuMemAllocFromPoolAsync_ptsz, stream_ordered_alloc),
    SUBLINEAR_CB(cuMemFreeAsync, stream_ordered_free),
    SUBLINEAR_CB(cuMemFreeAsync_ptsz, stream_ordered_free),
    SUBLINEAR_CB(cuMemPoolCreate, pool),
    SUBLINEAR_CB(cuMemPoolTrimTo, pool),
    SUBLINEAR_CB(cuMemPoolSetAttribute, pool),
    SUBLINEAR_CB(cuMemPoolSetAccess, pool),
    SUBLINEAR_CB(cuMemPoolImportPointer, pool),
};

#undef SUBLINEAR_CB

const known_callback* find(std::uint32_t cbid) noexcept {
  for (const known_callback& k : known)
    if (k.cbid == cbid) return &k;
  return nullptr;
}

// Whether a class is taken in a phase (Note [Phase-aware subscription]).
bool wanted(callback_class c, collector_phase p) noexcept {
  switch (p) {
    case collector_phase::off: return false;
    case collector_phase::tracing: return c != callback_class::other;
    case collector_phase::steady:
      return c != callback_class::other && c != callback_class::event_record && c != callback_class::event_wait;
  }
  return false;
}

}  // namespace

const char* to_string(callback_class c) noexcept {
  switch (c) {
    case callback_class::other: return "other";
    case callback_class::kernel_launch: return "kernel launch";
    case callback_class::graph_launch: return "graph launch";
    case callback_class::capture_begin: return "capture begin";
    case callback_class::capture_end: return "capture end";
    case callback_class::memcpy: return "copy";
    case callback_class::memset: return "set";
    case callback_class::event_record: return "event record";
    case callback_class::event_wait: return "event wait";
    case callback_class::stream_ordered_alloc: return "stream-ordered allocation";
    case callback_class::stream_ordered_free: return "stream-ordered free";
    case callback_class::pool: return "memory pool";
  }
  return "other";
}

const char* to_string(collector_phase p) noexcept {
  switch (p) {
    case collector_phase::off: return "off";
    case collector_phase::tracing: return "tracing";
    case collector_phase::steady: return "steady";
  }
  return "off";
}

callback_class classify_driver_callback(std::uint32_t cbid) noexcept {
  const known_callback* k = find(cbid);
  return k != nullptr ? k->what : callback_class::other;
}

std::uint32_t driver_callback_id(std::string_view name) noexcept {
  for (const known_callback& k : known)
    if (name == k.name) return k.cbid;
  return 0;
}

std::string_view driver_callback_name(std::uint32_t cbid) noexcept {
  const known_callback* k = find(cbid);
  return k != nullptr ? std::string_view(k->name) : std::string_view();
}

subscription subscription_for(collector_phase phase) {
  subscription s;
  for (const known_callback& k : known)
    if (wanted(k.what, phase)) s.callbacks.push_back(k.cbid);
  std::sort(s.callbacks.begin(), s.callbacks.end());
  s.activity = phase == collector_phase::tracing;
  return s;
}

std::string stream_ordered_message(std::string_view call, std::size_t bytes, bool tracing) {
  std::string m = std::string(call);
  if (bytes > 0) m += " of " + format_bytes(bytes);
  m += " went to the driver's stream-ordered allocator, outside sublinear's allocator: its memory is not under the "
       "budget";
  m += tracing ? "; tracing stopped and sublinear runs as a plain caching allocator (nothing is evicted)."
               : "; the plan stays correct (sublinear never evicts it) but the budget does not count it.";
  m += " Fix: with PyTorch, remove backend:cudaMallocAsync from PYTORCH_CUDA_ALLOC_CONF (sublinear is the "
       "allocator); a program's own cudaMallocAsync or cuMemAllocAsync is served by sublinear under `sublinear run` "
       "(its preload); memory pools (cudaMallocFromPoolAsync, cuMemAllocFromPoolAsync, cudaMemPoolCreate) are not "
       "supported: allocate with cudaMalloc or cudaMallocAsync on the default pool, or set SUBLINEAR_DISABLE=1.";
  return m;
}

void capture_set::begin(device::stream_handle s) noexcept {
  for (std::size_t i = 0; i < capacity; ++i) {
    bool expected = false;
    if (used_[i].compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      streams_[i].store(s, std::memory_order_release);
      count_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
  }
  overflow_.fetch_add(1, std::memory_order_acq_rel);
}

void capture_set::end(device::stream_handle s) noexcept {
  for (std::size_t i = 0; i < capacity; ++i) {
    if (used_[i].load(std::memory_order_acquire) && streams_[i].load(std::memory_order_acquire) == s) {
      streams_[i].store(nullptr, std::memory_order_release);
      used_[i].store(false, std::memory_order_release);
      count_.fetch_sub(1, std::memory_order_acq_rel);
      return;
    }
  }
  // Not found: one of the overflowed captures ended.
  std::size_t o = overflow_.load(std::memory_order_acquire);
  while (o > 0 && !overflow_.compare_exchange_weak(o, o - 1, std::memory_order_acq_rel)) {
  }
}

bool capture_set::capturing(device::stream_handle s) const noexcept {
  if (overflow_.load(std::memory_order_acquire) != 0) return true;
  if (count_.load(std::memory_order_acquire) == 0) return false;
  for (std::size_t i = 0; i < capacity; ++i)
    if (used_[i].load(std::memory_order_acquire) && streams_[i].load(std::memory_order_acquire) == s) return true;
  return false;
}

}  // namespace sublinear::tracer
