// The CUPTI collector: records a GPU process's launches, copies, sets and events into a
// recorder, with kernel durations from CUPTI's activity records.
//
// Note [CUPTI collector]
// Rationale: every launch path on a GPU (cudart, cuBLAS's static cudart, Triton, NCCL)
//   ends in the driver, and CUPTI's driver-domain callbacks see them all; an LD_PRELOAD
//   of cuLaunchKernel does not (research/cuda_mechanisms.md §1-3).
// Approach: libcupti is opened with dlopen (libcupti.so, libcupti.so.13, then the toolkit's
//   extras/CUPTI/lib64 under CUDA_HOME, CUDA_PATH or /usr/local/cuda), like the
//   driver (device/cuda/driver_api.hpp), so the library loads on machines without
//   either and says what is missing. One subscriber enables single driver cbids:
//   cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel (each with its _ptsz
//   form), async copies (cuMemcpyAsync, HtoD/DtoH/DtoD) and sets (D8, D32), cuEventRecord,
//   cuStreamWaitEvent and cuGraphLaunch. At EXIT of a successful call the launch is
//   recorded: the parameter layout comes from cuFuncGetParamInfo, or cuKernelGetParamInfo
//   when the handle is a CUkernel cast to CUfunction (cached per handle); kernelParams
//   and extra are normalized into one packed block (param_packing.hpp); a
//   cuLaunchKernelEx whose attributes name an event is flagged. CONCURRENT_KERNEL,
//   MEMCPY and MEMSET activity records are joined to launches by correlation id and give
//   durations (flush()). A thread_local guard keeps our own driver calls (layout
//   queries) from re-entering the callback.
// Limitations: CUPTI allows one subscriber per process: under Nsight, cuda-gdb or
//   torch.profiler the constructor throws cupti_unavailable, and the caller must run
//   without recomputation. A cuGraphLaunch is recorded as one never-replay launch of a
//   pseudo kernel "[cuGraphLaunch]" (its nodes are not enumerated yet), so the blocks it
//   touches are unknown and the runtime must treat the iteration as unsafe to plan. Kernel
//   handles are not invalidated at module unload.
//
// Note [Launch listener]
// Rationale: the replay engine must act at a launch's ENTER (regenerate what it reads,
//   before the driver queues it) and EXIT (evict what it no longer needs), and the tracer
//   must not depend on the runtime that does so.
// Approach: an optional launch_listener sees every kernel launch, cuGraphLaunch (as a
//   kernel with handle 0), async copy and set at ENTER and, when the driver accepted the
//   call, at EXIT, described by a launch_description (the shape of runtime::launch_view;
//   the runtime adapts one to the other in runtime/cuda/). A kernel's packed
//   parameter block is built once at ENTER and reused for the EXIT record. Work the
//   listener queues from its callbacks is not intercepted (the callback's thread_local
//   guard); untraced_scope applies the same guard anywhere else (the runtime's event
//   records and replays outside a callback). In the _ptsz callbacks a null stream is the
//   per-thread default stream and is reported as CU_STREAM_PER_THREAD, so that a replay
//   queues on the stream the program used.
// Limitations: a cuMemsetD32Async is described as a byte set of its value's low byte (exact
//   for the zero fills frameworks issue). Exceptions must not cross the driver: one the
//   listener throws at EXIT is reported once on stderr and dropped; at ENTER it ends the
//   process (Note [Listener failure at a launch]).
//
// Note [Listener failure at a launch]
// Rationale: the listener's ENTER is where the runtime brings back what the launch reads.
//   If that fails (a recipe that cannot run, no memory left to map the block back), the
//   launch is queued anyway, since nothing can stop it from inside the callback, and it
//   computes on bytes that are not there: dropped, the error lets a run train on with a
//   NaN loss (GPT-2 on an H200) while it looks healthy. A wrong result must never look
//   like a result.
// Approach: an exception from the listener's on_enter is fatal: the collector prints what
//   failed, at which driver call, that the launch would read missing bytes, and how to run
//   without the failing part (SUBLINEAR_VALIDATE=always to catch a bad recipe while copies
//   exist, SUBLINEAR_DISABLE=1 to train without sublinear), then aborts.
//   fail_at_launch_enter is that path, callable (and death-tested) without a GPU. Before
//   aborting it runs the hook set with set_launch_failure_hook once: the process runtime
//   writes its report there (SUBLINEAR_REPORT), the iterations up to the failure.
// Limitations: nothing else is flushed (a trace not yet written stays unwritten).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "sublinear/error.hpp"
#include "tracer/cupti/callback_plan.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::tracer {

// CUPTI or the driver cannot be used: missing library, no driver, another subscriber.
class cupti_unavailable : public device_error {
 public:
  using device_error::device_error;
};

// One intercepted operation, valid only during the listener's call (Note [Launch listener]).
struct launch_description {
  enum class kind : std::uint8_t { kernel, memcpy, memset };
  kind what = kind::kernel;
  std::uint64_t kernel_handle = 0;            // the CUfunction (or CUkernel) value; 0: cuGraphLaunch
  dims grid, block;
  std::uint32_t shared_mem = 0;
  device::stream_handle stream = nullptr;  // CUstream; nullptr: the legacy default stream
  std::span<const std::byte> params;          // kernels: the packed parameter block
  // Kernels: cuLaunchKernelEx's attributes (ignored entries dropped); a cooperative
  // launch carries the cooperative attribute (Note [Launch attributes]).
  std::span<const device::launch_attribute> attributes;
  void* dst = nullptr;                        // copies and sets
  const void* src = nullptr;
  std::size_t bytes = 0;
  int value = 0;
};

class launch_listener {
 public:
  virtual ~launch_listener() = default;
  // Before the driver queues `op`: work queued here on op.stream runs before it.
  virtual void on_enter(const launch_description& op) = 0;
  // After the driver accepted `op` (not called when the call failed).
  virtual void on_exit(const launch_description& op) = 0;
  // After the driver accepted a stream-ordered allocation, free or pool call `call`
  // (Note [Stream-ordered allocation] in callback_plan.hpp); `bytes`: the allocation's
  // size (0 for the others).
  virtual void on_stream_ordered(std::string_view call, std::size_t bytes) {
    static_cast<void>(call);
    static_cast<void>(bytes);
  }
};

// Note [Listener failure at a launch]: prints why, at which call, and aborts.
[[noreturn]] void fail_at_launch_enter(std::string_view call, std::string_view what) noexcept;
// What fail_at_launch_enter runs, once, before it aborts (nullptr: nothing). Returns the
// previous hook.
using launch_failure_hook = void (*)() noexcept;
launch_failure_hook set_launch_failure_hook(launch_failure_hook hook) noexcept;

// While alive, CUDA calls made on this thread are not seen by the collector: the runtime's
// own replays, copies and event records. Nests.
class untraced_scope {
 public:
  untraced_scope() noexcept;
  ~untraced_scope();
  untraced_scope(const untraced_scope&) = delete;
  untraced_scope& operator=(const untraced_scope&) = delete;

 private:
  bool previous_;
};

struct cupti_options {
  bool durations = true;         // enable the activity API for kernel/copy/set durations
  bool flag_tensor_maps = true;  // a 128-byte, 64-aligned parameter makes a kernel never-replay
  // Hash the blocks each kernel touches before and after it while recording, to learn its
  // writes (Note [Write observation on CUDA] in cupti_collector.cpp).
  bool observe_writes = true;
  launch_listener* listener = nullptr;  // see Note [Launch listener]; also set_listener()
  // Created from InitializeInjection, which the driver calls from inside cuInit: libcuda is
  // loaded but must not be initialized again from here, so its entry points are looked up
  // in the loaded library without calling cuInit.
  bool inside_injection = false;
};

class cupti_collector {
 public:
  // Loads libcupti and the driver and subscribes; throws cupti_unavailable saying why.
  // At most one collector exists per process. `rec` must outlive it.
  explicit cupti_collector(recorder& rec, cupti_options options = {});
  // Flushes activity records, then unsubscribes.
  ~cupti_collector();
  cupti_collector(const cupti_collector&) = delete;
  cupti_collector& operator=(const cupti_collector&) = delete;

  // Delivers pending activity records (durations) to the recorder. Call after the device
  // work of an iteration has completed (a synchronize), before recorder::take().
  void flush();

  // Note [Durations only while tracing]
  // Rationale: CUPTI's activity records time every kernel, copy and set, which costs each
  //   launch on the device and fills CUPTI's buffers; only a traced iteration's durations
  //   are ever used (they are the planners' costs). Left on, they would slow every
  //   iteration, including those that evict nothing, for figures nobody reads.
  // Approach: set_durations(false) flushes what is pending into the recorder and disables
  //   the activity kinds; set_durations(true) enables them again. The process runtime
  //   keeps them on exactly while its engine traces (a divergence traces again). Without
  //   activity records (cupti_options::durations false, or CUPTI refused them) both do
  //   nothing. tests/tracer/cupti_collector_test.cpp checks it on a GPU (skipped without one).
  void set_durations(bool on);
  [[nodiscard]] bool durations_on() const noexcept;

  // Note [Phase-aware subscription] (callback_plan.hpp): enables the callbacks `phase`
  // needs and disables the others; activity records follow (set_durations). The
  // collector starts in the tracing phase. Returns false, and leaves the phase as it was,
  // when CUPTI refused a change (said once on stderr).
  bool set_phase(collector_phase phase);
  [[nodiscard]] collector_phase phase() const noexcept;

  // Installs the listener (nullptr removes it). It must outlive the collector or be removed
  // first; a callback already running on another thread may still use the previous one.
  void set_listener(launch_listener* listener) noexcept;

  // "" when a collector can be created here, otherwise the reason (for tests and `sublinear
  // doctor`). Does not subscribe.
  [[nodiscard]] static std::string unavailable_reason();

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

// ---- CUDA_INJECTION64_PATH (injection.cpp) --------------------------------------------------------

// What InitializeInjection runs. The process runtime registers one (runtime/cuda/)
// that starts its tracing side; without one, InitializeInjection records a trace only
// (SUBLINEAR_TRACE). Called from inside cuInit (see cupti_options::inside_injection); must
// not throw. Returns the previous handler.
using injection_handler = void (*)();
injection_handler set_injection_handler(injection_handler handler) noexcept;

}  // namespace sublinear::tracer
