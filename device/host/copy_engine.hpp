// The host device's copy engine: device<->host copies on streams of their own, at a
// configured bandwidth and latency, ordered against the compute streams by events.
//
// Note [Host copy engine]
// Rationale: a GPU moves bytes between device and pinned host memory on copy engines
//   while its SMs compute; offloading activations is worth something only because of that
//   overlap. On the host device a plain memcpy on the compute stream would cost compute
//   time, and one on another thread would run at memory speed, far faster relative to the
//   host device's compute than any PCIe link is relative to a GPU's.
// Approach: one stream (a worker thread) per direction, as a GPU has a copy engine per
//   direction. A copy is queued there after a wait for the work queued on the stream it
//   follows; the worker copies the bytes, then sleeps until latency + bytes / bandwidth
//   after the copy began, so the link holds its configured rate whatever the memory
//   speed. The copy's completion is a pooled event (device::record) that any stream can
//   wait on without blocking the host (device::stream_wait). Each direction counts its
//   bytes and busy time; waits that found their copy still running count the stream's
//   stall. The default rate keeps the link/compute ratio of PCIe Gen5 to an H100
//   (host_link_default, docs/runtime.md "The host copy engine").
// Limitations: the pacing sleeps, so the rate holds to the scheduler's precision (tens
//   of microseconds a copy); the copies take memory bandwidth from the compute stream, as
//   offload traffic takes HBM bandwidth on a GPU.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "device/host/device.hpp"

namespace sublinear::device::host {

struct link_rate {
  double bytes_per_s = 0.0;
  double latency_s = 0.0;
};

// The host device's default link: see Note [Host copy engine] and docs/runtime.md.
link_rate host_link_default() noexcept;

struct copy_figures {
  std::size_t to_host_bytes = 0, to_device_bytes = 0;
  std::size_t to_host_copies = 0, to_device_copies = 0;
  double to_host_busy_s = 0.0, to_device_busy_s = 0.0;  // time the worker spent per direction
  double stall_s = 0.0;  // time streams waited (stream_wait_copy) for a copy not yet done
};

class copy_engine {
 public:
  copy_engine(device& dev, link_rate to_host, link_rate to_device);
  ~copy_engine();  // waits for the queued copies
  copy_engine(const copy_engine&) = delete;
  copy_engine& operator=(const copy_engine&) = delete;

  // Queues a copy of `bytes` from `src` to `dst` on the direction's stream, after the work
  // queued on `after` so far. Returns a pooled event that completes once the bytes have
  // arrived; give it back with device::release.
  event_handle to_host(void* dst, const void* src, std::size_t bytes, stream_handle after);
  event_handle to_device(void* dst, const void* src, std::size_t bytes, stream_handle after);
  // Later work on `s` waits for `copy`, counting the time `s` spends waiting.
  void stream_wait_copy(stream_handle s, event_handle copy);

  [[nodiscard]] link_rate rate_to_host() const noexcept { return to_host_; }
  [[nodiscard]] link_rate rate_to_device() const noexcept { return to_device_; }
  [[nodiscard]] copy_figures figures() const;
  void synchronize();

 private:
  event_handle queue(stream* on, void* dst, const void* src, std::size_t bytes, stream_handle after, bool to_host);
  device& dev_;
  link_rate to_host_, to_device_;
  stream* out_ = nullptr;  // device -> host
  stream* in_ = nullptr;   // host -> device
  mutable std::mutex mutex_;
  copy_figures figures_;
};

}  // namespace sublinear::device::host
