// The host device: a CPU backend with the CUDA semantics the layers above depend on.
//
// Note [Host device]
// Rationale: development and CI machines have no GPU, yet eviction and replay must be
//   proven on real asynchronous execution: work queued on streams that runs later, events
//   that complete later, kernels that receive a packed parameter block whose layout can
//   be queried, and launch interception where CUPTI's callbacks fire.
// Approach: every stream is a worker thread that executes its queue in order; an event
//   completes when the worker reaches it; a kernel is a registered C++ function with a
//   parameter layout (what cuFuncGetParamInfo reports on a GPU) that runs the whole grid
//   on the worker thread. `launch` calls every registered hook's on_enter before the work
//   is queued (a hook may enqueue other work first, as a replay does) and on_exit after.
//   Device memory comes from the host VMM backend: an access to an unmapped page faults
//   and kills the process, as an illegal address does on a GPU.
// Limitations: no concurrency inside a kernel; the default stream is an ordinary stream
//   (no legacy implicit synchronization with other streams). docs/host-device.md lists
//   what else differs from CUDA.
//
// Note [Hook re-entrancy]
// Launches (and copies, sets, event operations) a hook makes from inside its callbacks (a
// replay re-launching recorded kernels, a flush) are queued, and launches get correlation
// ids, but they are NOT shown to this device's hooks again: a thread_local scope marks
// the thread as inside this device's hooks, as a CUPTI subscriber suppresses callbacks
// for its own work. Work queued from on_enter precedes the intercepted kernel, so it runs
// first. add_hook/remove_hook from inside a hook throw config_error; once remove_hook
// returns, no thread is inside that hook.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "device/launch_attributes.hpp"
#include "device/stream_events.hpp"

namespace sublinear::device::host {

struct dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
};

// Offset and size of one kernel parameter inside the packed parameter block.
struct param_info {
  std::uint32_t offset = 0;
  std::uint32_t size = 0;
};

struct launch_config {
  dim3 grid;
  dim3 block;
  std::uint32_t shared_mem = 0;
  // cuLaunchKernelEx's attributes (Note [Launch attributes] in device/launch_attributes.hpp).
  // A kernel sees them here: cluster_of() and cooperative_of() give the two the host
  // device honours; a cluster shape must divide the grid, as on a GPU.
  std::vector<launch_attribute> attributes{};
};

// A kernel body runs the whole grid on the stream's worker thread. `params` points at
// the packed parameter block (kernel::param_bytes bytes, laid out by kernel::params).
using kernel_body = void (*)(const launch_config& cfg, const std::byte* params);

struct kernel {
  std::string name;
  std::vector<param_info> params;  // in declaration order
  std::size_t param_bytes = 0;     // size of the packed block (end of the last parameter, aligned)
  kernel_body body = nullptr;
  std::uint32_t id = 0;            // dense, stable for the process
};

// Registered kernels, process-wide (a GPU module's functions are too). Thread-safe.
class kernel_registry {
 public:
  // Registers a kernel; throws sublinear::config_error if the name is empty or taken, the
  // body is null, or the layout is not increasing, non-overlapping, of non-zero sizes and
  // within param_bytes. The reference stays valid for the registry's lifetime (the
  // process, for kernels()).
  const kernel& add(std::string name, std::vector<param_info> layout, std::size_t param_bytes,
                    kernel_body body);
  [[nodiscard]] const kernel* find(std::string_view name) const;
  [[nodiscard]] const kernel* by_id(std::uint32_t id) const;
  [[nodiscard]] std::size_t size() const;  // ids are 0 .. size()-1

  kernel_registry();
  ~kernel_registry();
  kernel_registry(const kernel_registry&) = delete;
  kernel_registry& operator=(const kernel_registry&) = delete;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

kernel_registry& kernels();

// Describes one parameter of a params struct: SUBLINEAR_PARAM(gemm_params, a).
#define SUBLINEAR_PARAM(type, member)                                             \
  ::sublinear::device::host::param_info {                                                 \
    static_cast<std::uint32_t>(offsetof(type, member)),                           \
        static_cast<std::uint32_t>(sizeof(static_cast<type*>(nullptr)->member))   \
  }

// Registers `Fn` taking a trivially copyable `Params` struct, with the given layout.
template <class Params, void (*Fn)(const launch_config&, const Params&)>
const kernel& register_kernel(std::string name, std::initializer_list<param_info> layout) {
  static_assert(std::is_trivially_copyable_v<Params>);
  return kernels().add(std::move(name), std::vector<param_info>(layout), sizeof(Params),
                       [](const launch_config& cfg, const std::byte* p) {
                         Params params;
                         std::memcpy(&params, p, sizeof(Params));
                         Fn(cfg, params);
                       });
}

class stream;
class event;

// What an interception hook sees at ENTER and EXIT of a launch.
struct launch_record {
  const kernel* fn = nullptr;
  launch_config config;
  stream* on = nullptr;
  const std::byte* params = nullptr;  // packed block, param_bytes long; valid during the call
  std::size_t param_bytes = 0;
  std::uint64_t correlation_id = 0;   // increases by one per launch, per device
};

// A copy or set as a hook sees it (CUPTI's cuMemcpyAsync / cuMemsetD8Async callbacks).
struct memory_op_record {
  enum class kind : std::uint8_t { copy, set };
  kind op = kind::copy;
  void* dst = nullptr;
  const void* src = nullptr;  // copies only
  std::size_t bytes = 0;
  int value = 0;              // sets only
  stream* on = nullptr;       // never nullptr: the default stream is named
};

// An application event operation (cudaEventRecord / cudaStreamWaitEvent). The pooled
// events behind stream_events are the allocator's own and are not reported.
struct event_op_record {
  enum class kind : std::uint8_t { record, wait };
  kind op = kind::record;
  event* e = nullptr;
  stream* on = nullptr;  // the recording or the waiting stream
};

class launch_hook {
 public:
  virtual ~launch_hook() = default;
  // Before the kernel is queued. May queue other work on `rec.on` (it runs first).
  virtual void on_enter(const launch_record& rec) = 0;
  // After the kernel is queued (not completed).
  virtual void on_exit(const launch_record& rec) = 0;
  // Optional, at ENTER of the other stream operations (before they are queued); the
  // defaults ignore them. Same re-entrancy rule as launches.
  virtual void on_memory_op(const memory_op_record& rec) { (void)rec; }
  virtual void on_event_op(const event_op_record& rec) { (void)rec; }
};

struct device_options {
  bool synchronous = false;  // run each operation on the caller's thread at once (debugging)
};

class device final : public stream_events {
 public:
  explicit device(device_options options = {});
  ~device() override;  // drains every stream, then joins the workers
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  stream* default_stream();
  stream* create_stream();
  void destroy_stream(stream* s);  // waits for its queued work first

  event* create_event();
  void destroy_event(event* e);
  void record_event(event* e, stream* s);
  [[nodiscard]] bool query_event(event* e);  // true if completed or never recorded
  void synchronize_event(event* e);
  void stream_wait_event(stream* s, event* e);  // later work on s waits for e's completion

  // Note [Dynamic shared memory limit]
  // Rationale: on a GPU a launch's dynamic shared memory may not exceed its function's
  //   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, which the program sets
  //   (cuFuncSetAttribute) and which stays as last set; the driver refuses a launch above
  //   it with CUDA_ERROR_INVALID_VALUE. cuDNN sets it on its BatchNorm kernels to exactly
  //   what each launch needs (2 KiB may be set when the replay of a launch that used 8 KiB
  //   comes), so a recorded launch may be refused later.
  // Approach: the same rule, per device and kernel: default_dynamic_shared until set, at
  //   most max_dynamic_shared_optin; launch() and launch_unpacked() throw device_error for
  //   a launch above the kernel's limit, before any hook sees it.
  static constexpr std::uint32_t default_dynamic_shared = 48 * 1024;
  static constexpr std::uint32_t max_dynamic_shared_optin = 227 * 1024;
  // Throws config_error above max_dynamic_shared_optin.
  void set_max_dynamic_shared(const kernel& k, std::uint32_t bytes);
  [[nodiscard]] std::uint32_t max_dynamic_shared(const kernel& k) const;

  // Packed form: `params` points at kernel::param_bytes bytes.
  void launch(const kernel& k, const launch_config& cfg, stream* s, const void* params);
  // cuLaunchKernel's kernelParams form: one pointer per parameter, normalized to packed.
  void launch_unpacked(const kernel& k, const launch_config& cfg, stream* s, void** kernel_params);

  void memcpy_async(void* dst, const void* src, std::size_t bytes, stream* s);
  void memset_async(void* dst, int value, std::size_t bytes, stream* s);
  // memset_async that no hook sees, as a CUPTI subscriber's own work under its callback
  // suppression (the engine's fill of fresh blocks while tracing).
  void memset_async_unobserved(void* dst, int value, std::size_t bytes, stream* s);
  void host_func(stream* s, std::function<void()> fn);  // cuLaunchHostFunc

  void synchronize(stream* s);
  void synchronize(std::nullptr_t);  // the default stream (a bare nullptr is ambiguous otherwise)
  void synchronize();  // every stream
  // A nullptr stream* argument anywhere above means the default stream.

  // Hooks are called in registration order. Adding a hook twice or removing an unknown
  // one throws config_error; see Note [Hook re-entrancy].
  void add_hook(launch_hook* hook);
  void remove_hook(launch_hook* hook);

  // A small dense number per stream for traces and logs: 0 is the default stream, later
  // streams count up in creation order and numbers are never reused.
  [[nodiscard]] std::uint32_t stream_id(stream* s);
  [[nodiscard]] bool synchronous() const noexcept;
  // Launches so far (the last correlation id handed out).
  [[nodiscard]] std::uint64_t launch_count() const noexcept;

  // stream_events, with pooled events; stream_handle is a stream* (nullptr:
  // the default stream). An event_handle is valid from record() until release().
  event_handle record(stream_handle s) override;
  bool query(event_handle e) override;
  void synchronize(event_handle e) override;
  void release(event_handle e) noexcept override;
  // Later work on `waiter` waits for the pooled event `e` (from record()); no hook sees it,
  // as the allocator's own events are not reported (the copy engine's stream order).
  void stream_wait(stream_handle waiter, event_handle e);

  static stream* from_handle(stream_handle h) { return static_cast<stream*>(h); }

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sublinear::device::host
