#include "runtime/host/host_runtime.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>

#include "runtime/report/report.hpp"
#include "sublinear/error.hpp"
#include "tracer/block_hashes.hpp"

namespace sublinear::runtime {

namespace {
device::host::stream* on(device::stream_handle s) { return device::host::device::from_handle(s); }
}  // namespace

void host_replay_device::replay(const launch_view& op, device::stream_handle stream) {
  switch (op.what) {
    case launch_view::kind::kernel: {
      const device::host::kernel* k = device::host::kernels().by_id(static_cast<std::uint32_t>(op.kernel_handle));
      if (k == nullptr) throw error("sublinear: replay of an unknown host kernel id " + std::to_string(op.kernel_handle));
      if (refused_.count(k->name) != 0) {
        ++refusals_;
        throw device_error("host device: launch of " + k->name + " refused (invalid value)");
      }
      device::host::launch_config cfg{{op.grid.x, op.grid.y, op.grid.z}, {op.block.x, op.block.y, op.block.z}, op.shared_mem};
      cfg.attributes.assign(op.attributes.begin(), op.attributes.end());
      // Note [Dynamic shared memory limit] (device/host/device.hpp): the program may have
      // lowered the kernel's limit since the recorded launch; raise it for this launch.
      const std::uint32_t limit = dev_.max_dynamic_shared(*k);
      if (op.shared_mem <= limit) {
        dev_.launch(*k, cfg, on(stream), op.params.data());
        break;
      }
      dev_.set_max_dynamic_shared(*k, op.shared_mem);
      try {
        dev_.launch(*k, cfg, on(stream), op.params.data());
      } catch (...) {
        dev_.set_max_dynamic_shared(*k, limit);
        throw;
      }
      dev_.set_max_dynamic_shared(*k, limit);
      ++raised_shared_limits_;
      break;
    }
    case launch_view::kind::memcpy: dev_.memcpy_async(op.dst, op.src, op.bytes, on(stream)); break;
    case launch_view::kind::memset: dev_.memset_async(op.dst, op.value, op.bytes, on(stream)); break;
  }
}

void host_replay_device::download(void* host_dst, const void* device_src, std::size_t bytes,
                                  device::stream_handle stream) {
  dev_.synchronize(on(stream));
  std::memcpy(host_dst, device_src, bytes);
}

void host_replay_device::upload(void* device_dst, const void* host_src, std::size_t bytes,
                                device::stream_handle stream) {
  dev_.synchronize(on(stream));
  std::memcpy(device_dst, host_src, bytes);
}

device::host::copy_engine& host_replay_device::copies() {
  if (!copies_) copies_ = std::make_unique<device::host::copy_engine>(dev_, to_host_, to_device_);
  return *copies_;
}

void host_replay_device::set_link(device::host::link_rate to_host, device::host::link_rate to_device,
                                  std::string source) {
  if (copies_) throw config_error("host replay device: set_link after the first copy");
  to_host_ = to_host;
  to_device_ = to_device;
  link_source_ = std::move(source);
}

std::byte* host_replay_device::host_pool(std::size_t bytes) {
  if (pool_.size() < bytes) {
    try {
      pool_.resize(bytes);
    } catch (const std::bad_alloc&) {
      throw error("host device: no " + std::to_string(bytes) + " bytes of host memory for the offload pool");
    }
  }
  return pool_.data();
}

replay_device::copy_handle host_replay_device::copy_to_host(void* host_dst, const void* device_src, std::size_t bytes,
                                                            device::stream_handle after) {
  if (fail_to_host_ > 0) {
    --fail_to_host_;
    throw device_error("host copy engine: device->host copy of " + std::to_string(bytes) + " bytes refused (injected)");
  }
  return copies().to_host(host_dst, device_src, bytes, after);
}

replay_device::copy_handle host_replay_device::copy_to_device(void* device_dst, const void* host_src,
                                                              std::size_t bytes, device::stream_handle after) {
  if (fail_to_device_ > 0) {
    --fail_to_device_;
    throw device_error("host copy engine: host->device copy of " + std::to_string(bytes) + " bytes refused (injected)");
  }
  return copies().to_device(device_dst, host_src, bytes, after);
}

bool host_replay_device::copy_done(copy_handle c) { return c == nullptr || dev_.query(c); }

void host_replay_device::wait_copy(copy_handle c) {
  if (c != nullptr) dev_.synchronize(static_cast<device::event_handle>(c));
}

void host_replay_device::stream_wait_copy(device::stream_handle stream, copy_handle c) {
  if (c != nullptr) copies().stream_wait_copy(stream, c);
}

void host_replay_device::release_copy(copy_handle c) noexcept {
  if (c != nullptr) dev_.release(c);
}

replay_device::link_figures host_replay_device::link() {
  link_figures f;
  f.to_host_bytes_per_s = to_host_.bytes_per_s;
  f.to_device_bytes_per_s = to_device_.bytes_per_s;
  f.to_host_latency_s = to_host_.latency_s;
  f.to_device_latency_s = to_device_.latency_s;
  f.source = link_source_;
  if (copies_) {
    const device::host::copy_figures c = copies_->figures();
    f.to_host_bytes = c.to_host_bytes;
    f.to_device_bytes = c.to_device_bytes;
    f.busy_s = c.to_host_busy_s + c.to_device_busy_s;
    f.stall_s = c.stall_s;
  }
  return f;
}

void host_replay_device::copy(void* dst, const void* src, std::size_t bytes, device::stream_handle stream) {
  dev_.memcpy_async(dst, src, bytes, on(stream));
}

hash_result host_replay_device::hash(const void* device_src, std::size_t bytes, device::stream_handle stream) {
  // Set by a host function on the stream; ready once the stream has run it.
  struct on_stream final : hash_result::state {
    std::promise<std::uint64_t> done;
    std::shared_future<std::uint64_t> value = done.get_future().share();
    std::atomic<std::size_t> lag{0};  // set_hash_lag
    bool ready() override {
      for (std::size_t left = lag.load(); left > 0;)
        if (lag.compare_exchange_weak(left, left - 1)) return false;
      return value.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
    std::uint64_t get() override { return value.get(); }
  };
  auto s = std::make_shared<on_stream>();
  s->lag = hash_lag_;
  dev_.host_func(on(stream), [s, device_src, bytes] { s->done.set_value(tracer::hash_bytes(device_src, bytes)); });
  return hash_result(s);
}

bool host_replay_device::download_on_stream(void* host_dst, const void* device_src, std::size_t bytes,
                                            device::stream_handle stream) {
  if (copies_at_once_) return replay_device::download_on_stream(host_dst, device_src, bytes, stream);
  dev_.host_func(on(stream), [host_dst, device_src, bytes] { std::memcpy(host_dst, device_src, bytes); });
  return true;
}

void host_replay_device::fill(void* dst, std::uint8_t value, std::size_t bytes, device::stream_handle stream) {
  dev_.memset_async_unobserved(dst, value, bytes, on(stream));
  dev_.synchronize(on(stream));
}

void host_replay_device::synchronize(device::stream_handle stream) { dev_.synchronize(on(stream)); }

double host_replay_device::now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Forwards the host device's interception points to the engine.
class host_runtime::hook final : public device::host::launch_hook {
 public:
  hook(device::host::device& dev, engine& e) : dev_(dev), engine_(e) {}
  void on_enter(const device::host::launch_record& rec) override { engine_.before_launch(view(rec)); }
  void on_exit(const device::host::launch_record& rec) override { engine_.after_launch(view(rec)); }
  void on_memory_op(const device::host::memory_op_record& rec) override {
    launch_view v;
    v.what = rec.op == device::host::memory_op_record::kind::copy ? launch_view::kind::memcpy : launch_view::kind::memset;
    v.stream = handle(rec.on);
    v.dst = rec.dst;
    v.src = rec.src;
    v.bytes = rec.bytes;
    v.value = rec.value;
    engine_.before_launch(v);
  }

 private:
  device::stream_handle handle(device::host::stream* s) const { return s == dev_.default_stream() ? nullptr : s; }
  launch_view view(const device::host::launch_record& rec) const {
    launch_view v;
    v.what = launch_view::kind::kernel;
    v.kernel_handle = rec.fn->id;
    v.grid = {rec.config.grid.x, rec.config.grid.y, rec.config.grid.z};
    v.block = {rec.config.block.x, rec.config.block.y, rec.config.block.z};
    v.shared_mem = rec.config.shared_mem;
    v.stream = handle(rec.on);
    v.params = {rec.params, rec.param_bytes};
    v.attributes = rec.config.attributes;
    return v;
  }
  device::host::device& dev_;
  engine& engine_;
};

host_runtime::host_runtime(device::host::device& dev, allocator::caching_allocator& alloc, engine_options options,
                           host_runtime_options runtime)
    : dev_(dev), config_(options.config), granularity_(alloc.granularity()) {
  if (!options.config.report.empty()) options.record_timeline = true;  // the report's timeline and plot
  tracer::recorder_options ro;
  ro.device = "host";
  ro.granularity = alloc.granularity();
  ro.start_recording = false;
  recorder_ = std::make_unique<tracer::recorder>(ro);
  replay_ = std::make_unique<host_replay_device>(dev);
  if (options.config.link_to_host > 0.0) {
    const double latency = device::host::host_link_default().latency_s;
    replay_->set_link({options.config.link_to_host, latency}, {options.config.link_to_device, latency},
                      "SUBLINEAR_LINK_BANDWIDTH");
  }
  engine_ = std::make_unique<engine>(alloc, *replay_, *recorder_, std::move(options));
  // The engine's hook runs first: a block offloaded while tracing is restored before the
  // collector hashes what the launch touches (Note [Offloading the traced iteration]).
  hook_ = std::make_unique<hook>(dev, *engine_);
  dev.add_hook(hook_.get());
  tracer::host_collector_options co;
  co.time_launches = runtime.time_launches;
  co.observe_writes = runtime.observe_writes;
  collector_ = std::make_unique<tracer::host_collector>(dev, *recorder_, co);
}

void host_runtime::write_report() {
  dev_.synchronize();
  if (config_.report.empty()) return;
  report_written_ = true;
  report_metadata meta;
  meta.model = model_;
  meta.device = "host";
  meta.granularity = granularity_;
  try {
    write_text_file(config_.report, to_json(make_report(*engine_, config_, meta)));
  } catch (const std::exception& e) {
    throw error(std::string("SUBLINEAR_REPORT: ") + e.what());
  }
}

host_runtime::~host_runtime() {
  dev_.synchronize();
  if (!config_.report.empty() && !report_written_) {
    try {
      write_report();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sublinear: %s\n", e.what());
    }
  }
  dev_.remove_hook(hook_.get());
  collector_.reset();
  engine_.reset();
}

void host_runtime::mark_iteration() {
  dev_.synchronize();  // durations and observed writes of the iteration arrive before it is analysed
  engine_->mark_iteration();
}

}  // namespace sublinear::runtime
