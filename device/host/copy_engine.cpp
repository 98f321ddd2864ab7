#include "device/host/copy_engine.hpp"

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "sublinear/error.hpp"

namespace sublinear::device::host {

namespace {
using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
}  // namespace

// docs/runtime.md "The host copy engine" derives these: an H100 training step saves
// activations at about 46 GB/s (Llama-sized layers at ~400 TFLOP/s achieved) and PCIe
// Gen5 moves ~50 GB/s per direction, 1.1x that rate. The host device's Transformer-8
// saves its 10.3 MiB of feature maps in a ~0.2 s iteration, ~54 MB/s: the link gets
// 1.1x it. The latency is a PCIe copy's ~5 us scaled by the same ratio (~900x).
link_rate host_link_default() noexcept { return {60.0e6, 4.5e-3}; }

copy_engine::copy_engine(device& dev, link_rate to_host, link_rate to_device)
    : dev_(dev), to_host_(to_host), to_device_(to_device) {
  if (!(to_host.bytes_per_s > 0.0) || !(to_device.bytes_per_s > 0.0) || to_host.latency_s < 0.0 ||
      to_device.latency_s < 0.0)
    throw config_error("host copy engine: bandwidths must be positive and latencies not negative");
  out_ = dev_.create_stream();
  in_ = dev_.create_stream();
}

copy_engine::~copy_engine() {
  dev_.destroy_stream(out_);  // each waits for its queued copies
  dev_.destroy_stream(in_);
}

event_handle copy_engine::queue(stream* on, void* dst, const void* src, std::size_t bytes, stream_handle after,
                                bool to_host) {
  if (bytes != 0 && (dst == nullptr || src == nullptr))
    throw device_error("host copy engine: a copy of " + std::to_string(bytes) + " bytes with a null pointer");
  event_handle ready = dev_.record(after);
  dev_.stream_wait(on, ready);
  dev_.release(ready);
  const link_rate rate = to_host ? to_host_ : to_device_;
  dev_.host_func(on, [this, dst, src, bytes, rate, to_host] {
    const auto t0 = clock_type::now();
    if (bytes != 0) std::memcpy(dst, src, bytes);
    const double due = rate.latency_s + static_cast<double>(bytes) / rate.bytes_per_s;
    const auto until = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(due));
    if (clock_type::now() < until) std::this_thread::sleep_until(until);
    const double busy = seconds_since(t0);
    std::lock_guard lock(mutex_);
    if (to_host) {
      figures_.to_host_bytes += bytes;
      ++figures_.to_host_copies;
      figures_.to_host_busy_s += busy;
    } else {
      figures_.to_device_bytes += bytes;
      ++figures_.to_device_copies;
      figures_.to_device_busy_s += busy;
    }
  });
  return dev_.record(on);
}

event_handle copy_engine::to_host(void* dst, const void* src, std::size_t bytes, stream_handle after) {
  return queue(out_, dst, src, bytes, after, true);
}

event_handle copy_engine::to_device(void* dst, const void* src, std::size_t bytes, stream_handle after) {
  return queue(in_, dst, src, bytes, after, false);
}

void copy_engine::stream_wait_copy(stream_handle s, event_handle copy) {
  if (dev_.query(copy)) return;
  auto started = std::make_shared<clock_type::time_point>();
  dev_.host_func(device::from_handle(s), [started] { *started = clock_type::now(); });
  dev_.stream_wait(s, copy);
  dev_.host_func(device::from_handle(s), [this, started] {
    const double waited = seconds_since(*started);
    std::lock_guard lock(mutex_);
    figures_.stall_s += waited;
  });
}

copy_figures copy_engine::figures() const {
  std::lock_guard lock(mutex_);
  return figures_;
}

void copy_engine::synchronize() {
  dev_.synchronize(out_);
  dev_.synchronize(in_);
}

}  // namespace sublinear::device::host
