// The types the replay engine (runtime/engine.hpp) shares with its callers: what a
// collector hands it at a launch (launch_view), what a device does for it
// (replay_device), how it is configured (engine_options) and what it reports
// (iteration_report, eviction_record, timeline_event).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "device/stream_events.hpp"
#include "policy/iteration.hpp"
#include "policy/plan.hpp"
#include "runtime/settings.hpp"
#include "tracer/events.hpp"

namespace sublinear::runtime {

// One operation as the engine sees it at ENTER/EXIT: a kernel, a copy or a set.
struct launch_view {
  enum class kind : std::uint8_t { kernel, memcpy, memset };
  kind what = kind::kernel;
  std::uint64_t kernel_handle = 0;  // the device's handle (host: kernel id)
  tracer::dims grid, block;
  std::uint32_t shared_mem = 0;
  device::stream_handle stream = nullptr;
  std::span<const std::byte> params;  // kernels: the packed parameter block
  // Kernels: cuLaunchKernelEx's attributes, replayed with the launch (Note [Launch
  // attributes] in device/launch_attributes.hpp).
  std::span<const device::launch_attribute> attributes;
  void* dst = nullptr;                // copies and sets
  const void* src = nullptr;
  std::size_t bytes = 0;
  int value = 0;
};

// A content hash on its way (replay_device::hash): ready() once the stream has passed the
// point it was taken at, without waiting; get() waits for it. Copies share one hash. A
// device gives its own state (a host function's future, a GPU event); empty: !valid().
class hash_result {
 public:
  struct state {
    virtual ~state() = default;
    virtual bool ready() = 0;
    virtual std::uint64_t get() = 0;  // waits until ready
  };
  hash_result() = default;
  explicit hash_result(std::shared_ptr<state> s) : state_(std::move(s)) {}
  // A hash already taken.
  static hash_result of(std::uint64_t value);
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  [[nodiscard]] bool ready() const { return state_->ready(); }
  [[nodiscard]] std::uint64_t get() const { return state_->get(); }

 private:
  std::shared_ptr<state> state_;
};

// What the engine needs from a device to regenerate buffers. Work queued through it is
// not intercepted by the engine or the tracer.
class replay_device {
 public:
  virtual ~replay_device() = default;
  // Queues `op` (as recorded, with its possibly rewritten parameters) on `stream`.
  virtual void replay(const launch_view& op, device::stream_handle stream) = 0;
  // Copies device bytes into host memory, waiting for `stream`'s work first (validation).
  virtual void download(void* host_dst, const void* device_src, std::size_t bytes,
                        device::stream_handle stream) = 0;
  // Copies host bytes into device memory and waits for it (validation repairs).
  virtual void upload(void* device_dst, const void* host_src, std::size_t bytes,
                      device::stream_handle stream) = 0;
  // Queues a device-to-device copy on `stream` (scratch copies of side outputs).
  virtual void copy(void* dst, const void* src, std::size_t bytes, device::stream_handle stream) = 0;
  // Sets `bytes` at `dst` to `value` on `stream` and waits for it, so that work on any
  // stream afterwards sees the bytes (Note [Filled fresh blocks] in tracer/block_hashes.hpp).
  virtual void fill(void* dst, std::uint8_t value, std::size_t bytes, device::stream_handle stream) = 0;
  // Waits until the work queued on `stream` is done.
  virtual void synchronize(device::stream_handle stream) = 0;
  // Monotonic seconds, for recompute-time accounting.
  virtual double now_s() = 0;
  // A content hash of `bytes` at `device_src` (tracer::hash_bytes, or the device's own:
  // the engine compares only hashes one device took), taken when `stream`
  // gets here: after the work queued on it so far, before what is queued later. The host
  // does not wait; the result is ready once the stream has passed this point (Note [Unseen
  // writes] in runtime/engine_writes.cpp). The default copies to the host and hashes there,
  // waiting for the stream; a device may hash where the bytes are.
  virtual hash_result hash(const void* device_src, std::size_t bytes, device::stream_handle stream);
  // Where hash() does the work, for the report ("copied to the host and hashed there").
  virtual std::string hash_site();
  // Host memory for the recipe inputs the engine copies at a release (Note [Unseen
  // writes]), pinned where the device pins, so that download_on_stream need not wait;
  // given back with free_host_copy. The defaults are operator new and delete.
  virtual std::byte* allocate_host_copy(std::size_t bytes);
  virtual void free_host_copy(std::byte* p) noexcept;
  // Copies device bytes into `host_dst` (from allocate_host_copy) when `stream` gets
  // here: after the work queued on it so far, before what is queued later; the bytes may
  // be read once synchronize(stream) has returned. Returns false where it copied at once
  // instead, waiting for the stream: the default, and a CUDA device without pinned memory.
  virtual bool download_on_stream(void* host_dst, const void* device_src, std::size_t bytes,
                                  device::stream_handle stream);
  // Whether download_on_stream queues its copies (the plan's count of waits asks).
  virtual bool downloads_on_stream() { return false; }

  // ---- offload copies (Note [Offload execution] in runtime/engine_swap.cpp) ----------
  // A copy in flight: completes once its bytes have arrived (nullptr: already done).
  using copy_handle = void*;
  // Host memory for offloaded bytes, `bytes` long (pinned where the device pins), made
  // once and kept: a later call with more bytes may move it (only between iterations).
  // Throws out_of_memory when the host cannot give it. The default is pageable memory.
  virtual std::byte* host_pool(std::size_t bytes);
  // Queues a device->host (host->device) copy after the work queued on `after` so far.
  // The defaults copy synchronously through download / upload and return nullptr.
  virtual copy_handle copy_to_host(void* host_dst, const void* device_src, std::size_t bytes,
                                   device::stream_handle after);
  virtual copy_handle copy_to_device(void* device_dst, const void* host_src, std::size_t bytes,
                                     device::stream_handle after);
  virtual bool copy_done(copy_handle c) { return c == nullptr; }
  virtual void wait_copy(copy_handle c) { (void)c; }  // the host blocks until it is done
  // Later work on `stream` waits for `c` (the host does not).
  virtual void stream_wait_copy(device::stream_handle stream, copy_handle c) { (void)stream, (void)c; }
  virtual void release_copy(copy_handle c) noexcept { (void)c; }
  // The link as the device runs it, for the planner and the reports.
  struct link_figures {
    double to_host_bytes_per_s = 0.0, to_device_bytes_per_s = 0.0;  // 0: no asynchronous link
    double to_host_latency_s = 0.0, to_device_latency_s = 0.0;
    std::string source;  // "configured", "measured", "SUBLINEAR_LINK_BANDWIDTH", "synchronous"
    std::size_t to_host_bytes = 0, to_device_bytes = 0;  // copied so far
    double busy_s = 0.0;   // both directions' copy time so far
    double stall_s = 0.0;  // time streams waited for copies so far
  };
  virtual link_figures link();

 private:
  std::vector<std::byte> pageable_pool_;
};

enum class engine_state : std::uint8_t { trace, validate, steady, disabled };
const char* to_string(engine_state s) noexcept;

// Figures for one finished iteration.
struct iteration_report {
  std::size_t index = 0;
  engine_state state = engine_state::trace;
  std::size_t peak_mapped = 0;
  std::size_t budget = 0;
  std::size_t evictions = 0;
  std::size_t evicted_bytes = 0;
  std::size_t recomputed_launches = 0;
  double recompute_s = 0.0;         // host time spent queuing replays (device time on GPU)
  double stall_s = 0.0;             // time launches waited for regeneration at ENTER
  double engine_s = 0.0;            // host time inside the engine's hooks (launch interception, allocation,
                                    // free), recipes and stalls included: what the engine itself costs
  std::size_t prefetched = 0;       // regenerations done ahead of their restore point
  std::size_t pressure_evictions = 0;  // unplanned evictions by the pressure valve
  std::size_t kept_resident = 0;    // planned evictions not made: no room for the buffer's own pages, so
                                    // the allocator placed it in a shared segment (Note [Pressure valve])
  std::size_t stray_pointers = 0;   // parameter words pointing into an evicted block where the traced
                                    // launch held no pointer to it: left alone (Note [Stray pointer words])
  std::size_t retained = 0;         // frees the engine deferred so recipes read the block in place
                                    // (Note [Retention] in policy/retention.hpp)
  std::size_t offloads = 0;         // blocks copied to host memory and evicted (traced iterations)
  std::size_t offloaded_bytes = 0;  // their bytes
  std::size_t offload_restores = 0;  // offloaded blocks brought back for a launch
  // Planned offloads (Note [Offload execution] in runtime/engine_swap.cpp), counted in
  // offloads / offloaded_bytes too:
  std::size_t fetches = 0;           // buffers copied back host->device
  std::size_t link_copies = 0;       // copies queued over the link, both ways (an offloaded pack's
                                     // members move in one: Note [Offload packs])
  std::size_t fetched_bytes = 0;     // their bytes
  std::size_t safety_fetches = 0;    // of fetches: a launch touched an offloaded buffer outside the plan
  std::size_t failed_copies = 0;     // copies the device refused: the buffer stayed resident or came back synchronously
  double link_busy_s = 0.0;          // time the link spent copying, both directions
  double copy_stall_s = 0.0;         // time compute streams waited for a fetch
  double release_wait_s = 0.0;       // time the host waited at a release point for a late copy out
  std::size_t allocator_waits = 0;  // times the allocator waited for a stream to make room (budget and
                                    // release waits: each one drains that stream's queue)
  std::size_t handoffs = 0;         // mappings that took a chunk still in use by queued work of their
                                    // stream instead of waiting (Note [Stream-ordered handoff])
  std::size_t packed = 0;           // planned buffers placed in a pack's shared pages (Note [Packs])
  std::size_t unseen_writes = 0;    // writes the trace did not see, found: a buffer kept at its release (never
                                    // evicted again), or a recipe input read from its copy (Note [Unseen writes])
  std::size_t hashed_bytes = 0;     // bytes hashed to find such writes (Note [Unseen writes])
  std::size_t check_waits = 0;      // times a check needed a hash or copy before the host could go on: a
                                    // replay's inputs, a release's copies (Note [Write check work] counts the
                                    // same for a plan)
  std::size_t settle_waits = 0;     // times the host waited for a release's hashes the stream had not
                                    // reached: a queued release needed early, the valve's (Note [Unsettled
                                    // releases]); none where the stream keeps up
  std::size_t copied_bytes = 0;     // recipe inputs copied to host memory at a release because a launch touches
                                    // them before the regeneration (Note [Unseen writes])
  std::size_t uncopied_bytes = 0;   // such inputs not copied: the host budget had no room for them (an unseen
                                    // write to one is then caught, not undone)
  std::size_t host_held_bytes = 0;  // the most host memory held for copies at once: the offloads' pool, the
                                    // input copies, blocks offloaded while tracing (Note [Host budget])
  // The cost of interception when nothing is evicted (Note [Interception cost] in engine.cpp).
  std::size_t launches = 0;         // launches, copies and sets the engine intercepted
  double launch_hooks_s = 0.0;      // host time inside the engine's launch ENTER and EXIT hooks
  std::size_t vmm_calls = 0;        // the allocator's VMM calls (create, map, set access, unmap, release)
  bool budget_lifted = false;       // a plan made with the scaled cache allowance ran out of room and the
                                    // rest of this iteration ran without the budget (Note [Scaled cache allowance])
  bool diverged = false;
  std::string divergence;           // why it diverged: the first event that differed from the trace
  std::size_t validation_mismatches = 0;
  double wall_s = 0.0;              // from the previous iteration's end to this one's
  // Note [Predicted iteration time] in runtime/iteration_time.hpp:
  double active_s = 0.0;            // from its first call into the engine to its end (0: no call)
  double observation_s = 0.0;       // of that, write observation: hashing around launches, filling fresh blocks
                                    // (traced iterations only)
  double recording_s = 0.0;         // of that, the collectors' recording of launches (traced only)
  double predicted_s = 0.0;         // its time as predicted before it began (0: traced, or no plan)
};

// Per evicted buffer, over the whole run.
struct eviction_record {
  std::size_t size = 0;
  std::string producer;             // kernel name of its first writer
  std::size_t times_evicted = 0;
  std::size_t times_recomputed = 0;
  double recompute_cost_s = 0.0;    // planned cost of its recipe, per regeneration
  bool never_evict = false;         // failed validation
};

// One entry of the timeline behind the Chrome trace and the memory plot.
struct timeline_event {
  enum class kind : std::uint8_t {
    memory,      // a sample of mapped, allocated and evicted bytes after a launch
    evict,       // a buffer's eviction was requested (bytes: its size)
    regenerate,  // a recipe ran (begin..end: host time spent queuing it)
    iteration,   // an iteration ended (label: its state)
    allocate,    // the program allocated a block (address, bytes)
    release,     // the program freed a block (address, bytes)
    offload,     // a planned copy to host memory was queued (address, bytes; its pages go once it is done)
    fetch,       // a planned copy back was queued into pages mapped again (address, bytes)
  };
  kind what = kind::memory;
  double begin_s = 0.0;  // seconds since the engine started
  double end_s = 0.0;
  std::size_t bytes = 0;
  std::size_t mapped = 0;
  std::size_t allocated = 0;
  std::size_t evicted = 0;     // of `allocated`: bytes of live blocks whose pages are given back
  std::uintptr_t address = 0;  // allocate, release, evict, regenerate: the block's address
  std::string label;     // producer kernel, state name
};

struct engine_options {
  settings config;                  // budget, policy, validation mode, ...
  std::size_t device_capacity = 0;  // for budgets given as a share of device memory
  bool record_timeline = false;     // keep timeline events (reports, plots)
  std::size_t timeline_limit = 1'000'000;  // events kept at most
  // Launches ahead of a plan's restore point at which regeneration may start when the
  // budget has room (Note [Prefetch]); 0 regenerates at the restore point only.
  std::size_t prefetch_launches = 8;
  // Hold an absolute budget in the traced iterations too, offloading to host memory what
  // does not fit (Note [Offloading the traced iteration]). Off, they run unbudgeted, as
  // a recording for `sublinear plan` does: its preview then matches the runtime's plan.
  bool budget_traced_iterations = true;
  // Fill the blocks handed out while tracing, so that the collectors can tell a block no
  // one wrote from one an unseen writer wrote (Note [Filled fresh blocks] in
  // tracer/block_hashes.hpp). Off only in tests that show what it is for.
  bool fill_fresh_blocks = true;
  // Tests only: multiplies the scaled cache allowance (0 keeps no cache at all back, so a
  // planned iteration runs out of room and the fallback shows).
  double scaled_cache_factor = 1.0;
  // Tests only: the host's cost per launch in the predicted iteration time, instead of
  // the one measured (Note [Predicted iteration time]); negative: measured.
  double host_s_per_launch = -1.0;
  // Tests only: changes each plan made with offload allowed (SUBLINEAR_OFFLOAD not off, no
  // host pool refused), after the planner made it and before the engine indexes it (the
  // offload tests turn evictions into offloads with it).
  std::function<void(const policy::iteration&, policy::plan&)> amend_plan;
};

}  // namespace sublinear::runtime
