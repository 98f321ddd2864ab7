// sublinear on the host device: the recorder, the host collector, the replay engine and
// the hooks that connect them, in one object.
#pragma once

#include <memory>
#include <string>
#include <vector>
#include <unordered_set>

#include "allocator/caching_allocator.hpp"
#include "device/host/copy_engine.hpp"
#include "device/host/device.hpp"
#include "runtime/engine.hpp"
#include "tracer/host/host_collector.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::runtime {

// Replays on the host device. Work queued from inside a launch hook is not intercepted.
class host_replay_device final : public replay_device {
 public:
  explicit host_replay_device(device::host::device& dev) : dev_(dev) {}
  void replay(const launch_view& op, device::stream_handle stream) override;
  void download(void* host_dst, const void* device_src, std::size_t bytes, device::stream_handle stream) override;
  void upload(void* device_dst, const void* host_src, std::size_t bytes, device::stream_handle stream) override;
  void copy(void* dst, const void* src, std::size_t bytes, device::stream_handle stream) override;
  void fill(void* dst, std::uint8_t value, std::size_t bytes, device::stream_handle stream) override;
  void synchronize(device::stream_handle stream) override;
  double now_s() override;
  // On the stream, by a host function: the host does not wait.
  hash_result hash(const void* device_src, std::size_t bytes, device::stream_handle stream) override;
  std::string hash_site() override { return "hashed on its stream"; }
  // On the stream, by a host function: the host does not wait.
  bool download_on_stream(void* host_dst, const void* device_src, std::size_t bytes,
                          device::stream_handle stream) override;
  bool downloads_on_stream() override { return !copies_at_once_; }
  // Input copies made at once, waiting for the stream, as a CUDA device without pinned
  // memory makes them (the tests of that path). Before the plan is made.
  void copy_inputs_at_once(bool at_once) { copies_at_once_ = at_once; }
  // Offload copies run on the host copy engine (Note [Host copy engine]), made at the
  // first copy so that a run without offloads creates no streams of its own.
  std::byte* host_pool(std::size_t bytes) override;
  copy_handle copy_to_host(void* host_dst, const void* device_src, std::size_t bytes,
                           device::stream_handle after) override;
  copy_handle copy_to_device(void* device_dst, const void* host_src, std::size_t bytes,
                             device::stream_handle after) override;
  bool copy_done(copy_handle c) override;
  void wait_copy(copy_handle c) override;
  void stream_wait_copy(device::stream_handle stream, copy_handle c) override;
  void release_copy(copy_handle c) noexcept override;
  link_figures link() override;
  // The link's rates (default: device::host::host_link_default() both ways); `source`
  // names where they came from in the report. Before the first copy only.
  void set_link(device::host::link_rate to_host, device::host::link_rate to_device, std::string source);
  // The next copies to host (to device) memory are refused when queued, as a CUDA copy
  // can fail (the fault tests).
  void fail_next_copies(std::size_t to_host, std::size_t to_device = 0) {
    fail_to_host_ = to_host;
    fail_to_device_ = to_device;
  }

  // Each hash queued from now on answers ready() false its first `queries` times, as a
  // GPU's hash whose stream is far behind the host (Note [Unsettled releases] in
  // runtime/engine_writes.cpp): the tests use it.
  void set_hash_lag(std::size_t queries) { hash_lag_ = queries; }

  // Kernels (by name) this device refuses to replay, as a CUDA driver refuses a launch it
  // cannot run as a plain one (Note [Failed recipe] in engine_regenerate.cpp): the fault tests use it.
  void refuse_replay_of(std::string kernel_name) { refused_.insert(std::move(kernel_name)); }
  // Replays refused so far.
  [[nodiscard]] std::size_t refusals() const noexcept { return refusals_; }
  // Replays that raised their kernel's dynamic shared memory limit for themselves (Note
  // [Dynamic shared memory limit] in device/host/device.hpp).
  [[nodiscard]] std::size_t raised_shared_limits() const noexcept { return raised_shared_limits_; }

 private:
  device::host::device& dev_;
  std::unordered_set<std::string> refused_;
  std::size_t refusals_ = 0;
  std::size_t raised_shared_limits_ = 0;
  device::host::copy_engine& copies();
  device::host::link_rate to_host_ = device::host::host_link_default();
  device::host::link_rate to_device_ = device::host::host_link_default();
  std::string link_source_ = "configured";
  std::unique_ptr<device::host::copy_engine> copies_;
  std::vector<std::byte> pool_;
  bool copies_at_once_ = false;
  std::size_t fail_to_host_ = 0;
  std::size_t fail_to_device_ = 0;
  std::size_t hash_lag_ = 0;
};

struct host_runtime_options {
  // Hash the blocks each kernel touches to learn which it wrote (Note [Write observation]).
  // Off, the trace is what the CUPTI collector gives on a GPU: every touched block may
  // have been written. The tests run both.
  bool observe_writes = true;
  // Time each launch for the planners' costs. Off, a launch costs its touched bytes
  // (tracer/analysis.cpp), so that plans do not move with the machine's timing: for
  // tests that need one plan's shape every run.
  bool time_launches = true;
};

class host_runtime {
 public:
  // Installs itself on `alloc` (observer) and `dev` (launch hooks) and starts tracing.
  host_runtime(device::host::device& dev, allocator::caching_allocator& alloc, engine_options options,
               host_runtime_options runtime = {});
  ~host_runtime();
  host_runtime(const host_runtime&) = delete;
  host_runtime& operator=(const host_runtime&) = delete;

  void mark_iteration();
  // Names the workload in the report written at exit (SUBLINEAR_REPORT).
  void set_model_name(std::string name) { model_ = std::move(name); }
  // Writes the report SUBLINEAR_REPORT names now, and not again at destruction; throws
  // sublinear::error naming the file when it cannot be written. Without it the destructor
  // writes the report and can only print a failure on stderr.
  void write_report();
  [[nodiscard]] engine& get() { return *engine_; }
  [[nodiscard]] tracer::recorder& recorder() { return *recorder_; }
  [[nodiscard]] host_replay_device& replay_device() { return *replay_; }

 private:
  class hook;
  device::host::device& dev_;
  settings config_;
  std::size_t granularity_;
  std::string model_;
  bool report_written_ = false;
  std::unique_ptr<tracer::recorder> recorder_;
  std::unique_ptr<host_replay_device> replay_;
  std::unique_ptr<engine> engine_;
  std::unique_ptr<tracer::host_collector> collector_;
  std::unique_ptr<hook> hook_;
};

}  // namespace sublinear::runtime
