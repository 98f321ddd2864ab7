// The host device: kernel registry, streams as worker threads, events, launch hooks.
//
// Note [Stream positions]
// Rationale: an event must complete exactly when the work queued before its record has,
//   and a wait enqueued on another stream must refer to the record that was current when
//   the wait was enqueued, even if the event is recorded again before the wait runs (CUDA
//   captures the event's state at cudaStreamWaitEvent time).
// Approach: every stream counts operations enqueued and operations completed (the worker
//   bumps `completed` after each one, in order). Recording an event stores the pair
//   (stream, enqueued count): it has completed once completed >= that count. No queue item
//   is needed for a record, and a wait item carries its own copy of the pair, so a later
//   record of the same event cannot confuse it. Waiters sleep on the stream's `progress`
//   condition variable; nothing spins. Because a wait captures a position that already
//   exists, cross-stream waits form a DAG in enqueue order and cannot deadlock.
// Limitations: a stream's state is shared-owned (events and wait items may outlive
//   destroy_stream); its worker is joined at destroy_stream or ~device.
//
// Note [Synchronous mode]
// With device_options::synchronous every operation runs on the caller's thread before the
// call returns, under a per-stream mutex so two threads using one stream still run its
// operations one at a time and the counters stay in order. Events and waits use the same
// positions, so code that is correct asynchronously behaves the same, only serialized.
// Limitations: as in CUDA, a host function must not call back into the device on its own
// stream (here it would self-deadlock in both modes).
//
// Note [Faults in device work]
// A kernel touching an unmapped page gets SIGSEGV on a worker thread and the process dies,
// which is what an illegal address does to a CUDA context. An exception escaping a kernel
// or host function is treated the same way (message on stderr, then abort): CUDA errors
// in device work are sticky, and the caller that queued the work has long returned.
#include "device/host/device.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <pthread.h>

#include "sublinear/error.hpp"

namespace sublinear::device::host {

// ---- kernel registry ------------------------------------------------------------------

struct kernel_registry::impl {
  mutable std::shared_mutex mutex;
  std::deque<kernel> kernels;  // index == id; a deque keeps references valid as it grows
  std::map<std::string, const kernel*, std::less<>> by_name;
};

kernel_registry::kernel_registry() : impl_(std::make_unique<impl>()) {}
kernel_registry::~kernel_registry() = default;

namespace {

void validate_layout(const std::string& name, const std::vector<param_info>& layout,
                     std::size_t param_bytes) {
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const param_info& p = layout[i];
    const std::string where = "kernel '" + name + "': parameter " + std::to_string(i) +
                              " (offset " + std::to_string(p.offset) + ", size " +
                              std::to_string(p.size) + ")";
    if (p.size == 0) {
      throw config_error(where + " has size 0");
    }
    if (p.offset < end) {
      throw config_error(where + " starts before the end of the previous parameter (" +
                         std::to_string(end) + "): offsets must increase without overlap");
    }
    end = std::uint64_t{p.offset} + p.size;
    if (end > param_bytes) {
      throw config_error(where + " ends past the parameter block (" +
                         std::to_string(param_bytes) + " bytes)");
    }
  }
}

}  // namespace

const kernel& kernel_registry::add(std::string name, std::vector<param_info> layout,
                                   std::size_t param_bytes, kernel_body body) {
  if (name.empty()) {
    throw config_error("kernel_registry::add: a kernel needs a name");
  }
  if (body == nullptr) {
    throw config_error("kernel_registry::add: kernel '" + name + "' has no body");
  }
  validate_layout(name, layout, param_bytes);
  std::unique_lock lock(impl_->mutex);
  if (impl_->by_name.find(name) != impl_->by_name.end()) {
    throw config_error("kernel_registry::add: a kernel named '" + name +
                       "' is already registered");
  }
  kernel& k = impl_->kernels.emplace_back();
  k.name = std::move(name);
  k.params = std::move(layout);
  k.param_bytes = param_bytes;
  k.body = body;
  k.id = static_cast<std::uint32_t>(impl_->kernels.size() - 1);
  impl_->by_name.emplace(k.name, &k);
  return k;
}

const kernel* kernel_registry::find(std::string_view name) const {
  std::shared_lock lock(impl_->mutex);
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : it->second;
}

const kernel* kernel_registry::by_id(std::uint32_t id) const {
  std::shared_lock lock(impl_->mutex);
  return id < impl_->kernels.size() ? &impl_->kernels[id] : nullptr;
}

std::size_t kernel_registry::size() const {
  std::shared_lock lock(impl_->mutex);
  return impl_->kernels.size();
}

kernel_registry& kernels() {
  static kernel_registry registry;
  return registry;
}

// ---- streams and events ----------------------------------------------------------------

namespace {

enum class work_kind : std::uint8_t { kernel, copy, set, host_fn, wait };

}  // namespace

namespace detail {

// One queued operation. A kernel owns a copy of its parameter bytes so the caller may
// reuse its buffer as soon as launch returns.
struct work_item {
  work_kind kind = work_kind::kernel;
  kernel_body body = nullptr;
  launch_config config;
  std::vector<std::byte> params;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  int value = 0;
  std::function<void()> fn;
  std::shared_ptr<stream> wait_on;  // kind == wait: block until wait_on reaches wait_pos
  std::uint64_t wait_pos = 0;
};

}  // namespace detail

using detail::work_item;

class stream {
 public:
  explicit stream(std::uint32_t id) : id_(id) {}

  const std::uint32_t id_;
  std::mutex mutex_;
  std::condition_variable work_ready_;  // the worker sleeps here
  std::condition_variable progress_;    // event waiters sleep here
  std::deque<work_item> queue_;
  std::uint64_t enqueued_ = 0;               // under mutex_
  std::atomic<std::uint64_t> completed_{0};  // written under mutex_, read anywhere
  bool stopping_ = false;
  // Wakes are system calls; they are made only when someone sleeps (both under mutex_),
  // and waiters are woken only once the lowest position one of them waits for is reached.
  // (Waking every waiter at every completion cost a futex wake per kernel while the host
  // waited for the end of a long queue: 7% of a `sublinear demo` profile in
  // try_to_wake_up, 5% in task switches.)
  bool worker_sleeping_ = false;
  std::vector<std::uint64_t> waiting_for_;  // targets of the sleeping waiters (rarely more than one)
  std::thread worker_;
  std::mutex inline_mutex_;  // Note [Synchronous mode]

  [[nodiscard]] bool reached(std::uint64_t pos) const noexcept {
    return completed_.load(std::memory_order_acquire) >= pos;
  }
  [[nodiscard]] std::uint64_t position() {
    std::lock_guard lock(mutex_);
    return enqueued_;
  }
  void wait_for(std::uint64_t pos) {
    if (reached(pos)) {
      return;
    }
    std::unique_lock lock(mutex_);
    waiting_for_.push_back(pos);
    progress_.wait(lock, [&] { return reached(pos); });
    waiting_for_.erase(std::find(waiting_for_.begin(), waiting_for_.end(), pos));
  }
  // Precondition: mutex_ is held.
  void mark_completed_locked() {
    const std::uint64_t done = completed_.load(std::memory_order_relaxed) + 1;
    completed_.store(done, std::memory_order_release);
    // A satisfied waiter stays listed until it has woken and left, so a completion in
    // between wakes again rather than leaving a waiter behind.
    if (!waiting_for_.empty() && done >= *std::min_element(waiting_for_.begin(), waiting_for_.end())) {
      progress_.notify_all();
    }
  }
  void mark_completed() {
    std::lock_guard lock(mutex_);
    mark_completed_locked();
  }
};

class event {
 public:
  explicit event(bool pooled) : pooled_(pooled) {}

  struct snapshot {
    std::shared_ptr<stream> on;  // null: never recorded
    std::uint64_t pos = 0;
    [[nodiscard]] bool done() const noexcept { return !on || on->reached(pos); }
  };

  [[nodiscard]] snapshot read() {
    std::lock_guard lock(mutex_);
    return {on_, pos_};
  }
  void write(std::shared_ptr<stream> on, std::uint64_t pos) {
    std::lock_guard lock(mutex_);
    on_ = std::move(on);
    pos_ = pos;
  }

  const bool pooled_;     // owned by the stream_events pool, not by create_event
  bool in_pool_ = false;  // released and not yet handed out again; under events_mutex

 private:
  std::mutex mutex_;
  std::shared_ptr<stream> on_;
  std::uint64_t pos_ = 0;
};

namespace {

[[noreturn]] void die_in_device_work(const char* what, std::uint32_t stream_id) {
  std::fprintf(stderr,
               "sublinear host device: uncaught exception in device work on stream %u: %s\n"
               "(errors in device work are fatal, as a sticky CUDA error is)\n",
               static_cast<unsigned>(stream_id), what);
  std::fflush(stderr);
  std::abort();
}

void execute(work_item& w, std::uint32_t stream_id) noexcept {
  try {
    switch (w.kind) {
      case work_kind::kernel:
        w.body(w.config, w.params.data());
        break;
      case work_kind::copy:
        // cudaMemcpy leaves overlap undefined; memmove makes it harmless here. Zero bytes
        // may come with null pointers, which memmove must not see.
        if (w.bytes != 0) {
          std::memmove(w.dst, w.src, w.bytes);
        }
        break;
      case work_kind::set:
        if (w.bytes != 0) {
          std::memset(w.dst, w.value, w.bytes);
        }
        break;
      case work_kind::host_fn:
        w.fn();
        break;
      case work_kind::wait:
        w.wait_on->wait_for(w.wait_pos);
        break;
    }
  } catch (const std::exception& e) {
    die_in_device_work(e.what(), stream_id);
  } catch (...) {
    die_in_device_work("(not a std::exception)", stream_id);
  }
}

void worker_loop(stream& s) {
  // Named so that profilers (perf report --sort comm) tell the stream's kernels from the
  // host thread's work.
  pthread_setname_np(pthread_self(), "sl-stream");
  std::unique_lock lock(s.mutex_);
  for (;;) {
    if (s.queue_.empty() && !s.stopping_) {
      s.worker_sleeping_ = true;
      s.work_ready_.wait(lock, [&] { return s.stopping_ || !s.queue_.empty(); });
      s.worker_sleeping_ = false;
    }
    if (s.queue_.empty()) {
      return;  // stopping, and everything queued has run
    }
    {
      work_item w = std::move(s.queue_.front());
      s.queue_.pop_front();
      lock.unlock();
      execute(w, s.id_);
      // `w` (a host function's captures, a wait's stream reference) is destroyed here,
      // outside the lock, in case a destructor calls back into the device.
    }
    lock.lock();
    s.mark_completed_locked();
  }
}

// Marks the calling thread as being inside one device's hooks (Note [Hook re-entrancy]).
// A linked list on the stack so that hooks of several devices may nest.
struct hook_scope {
  explicit hook_scope(const void* device) : device_(device), outer_(top) { top = this; }
  ~hook_scope() { top = outer_; }
  hook_scope(const hook_scope&) = delete;
  hook_scope& operator=(const hook_scope&) = delete;

  static bool active(const void* device) noexcept {
    for (const hook_scope* s = top; s != nullptr; s = s->outer_) {
      if (s->device_ == device) {
        return true;
      }
    }
    return false;
  }

  const void* device_;
  hook_scope* outer_;
  static thread_local hook_scope* top;
};

thread_local hook_scope* hook_scope::top = nullptr;

std::string describe(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

// ---- device ------------------------------------------------------------------------------

struct device::impl {
  explicit impl(device_options o) : options(o) {}

  device_options options;

  std::mutex streams_mutex;
  std::unordered_map<stream*, std::shared_ptr<stream>> streams;
  std::uint32_t next_stream_id = 0;
  stream* default_stream = nullptr;

  std::mutex events_mutex;
  std::unordered_map<event*, std::unique_ptr<event>> events;
  std::vector<event*> event_pool;  // released stream_events events, ready for reuse

  // Held shared while hooks run, exclusively to change the list: once remove_hook
  // returns no thread is inside the removed hook.
  std::shared_mutex hooks_mutex;
  std::vector<launch_hook*> hooks;
  std::atomic<bool> have_hooks{false};

  std::atomic<std::uint64_t> correlation{0};

  // Note [Dynamic shared memory limit]: kernels whose limit was set, by id.
  mutable std::mutex shared_limits_mutex;
  std::unordered_map<std::uint32_t, std::uint32_t> shared_limits;
  std::atomic<bool> have_shared_limits{false};

  std::uint32_t shared_limit(const kernel& k) const {
    if (!have_shared_limits.load(std::memory_order_acquire)) return device::default_dynamic_shared;
    std::lock_guard lock(shared_limits_mutex);
    const auto it = shared_limits.find(k.id);
    return it == shared_limits.end() ? device::default_dynamic_shared : it->second;
  }
  void check_shared(const kernel& k, const launch_config& cfg, const char* what) const {
    if (cfg.shared_mem == 0) return;
    const std::uint32_t limit = shared_limit(k);
    if (cfg.shared_mem <= limit) return;
    throw device_error("host device: " + std::string(what) + ": kernel '" + k.name + "' launched with " +
                       std::to_string(cfg.shared_mem) + " bytes of dynamic shared memory, above its limit of " +
                       std::to_string(limit) +
                       " (invalid value; set_max_dynamic_shared raises it, as cuFuncSetAttribute does)");
  }

  // A cluster shape that does not divide the grid is refused, as cuLaunchKernelEx refuses it.
  static void check_attributes(const kernel& k, const launch_config& cfg, const char* what) {
    if (cfg.attributes.empty()) return;
    const cluster_shape c = cluster_of(cfg.attributes);
    if (c.x == 0 || c.y == 0 || c.z == 0 || cfg.grid.x % c.x != 0 || cfg.grid.y % c.y != 0 || cfg.grid.z % c.z != 0) {
      throw device_error("host device: " + std::string(what) + ": kernel '" + k.name + "': cluster shape " +
                         std::to_string(c.x) + "x" + std::to_string(c.y) + "x" + std::to_string(c.z) +
                         " does not divide the grid " + std::to_string(cfg.grid.x) + "x" + std::to_string(cfg.grid.y) +
                         "x" + std::to_string(cfg.grid.z) + " (invalid value)");
    }
  }

  std::shared_ptr<stream> make_stream() {
    std::lock_guard lock(streams_mutex);
    auto s = std::make_shared<stream>(next_stream_id++);
    if (!options.synchronous) {
      s->worker_ = std::thread([raw = s.get()] { worker_loop(*raw); });
    }
    streams.emplace(s.get(), s);
    return s;
  }

  std::shared_ptr<stream> resolve(stream* s, const char* op) {
    std::lock_guard lock(streams_mutex);
    auto it = streams.find(s == nullptr ? default_stream : s);
    if (it == streams.end()) {
      throw config_error(std::string("host device: ") + op + ": unknown stream " + describe(s) +
                         " (destroyed, or created by another device)");
    }
    return it->second;
  }

  event& resolve(event* e, const char* op) {
    std::lock_guard lock(events_mutex);
    if (e == nullptr || events.find(e) == events.end()) {
      throw config_error(std::string("host device: ") + op + ": unknown event " + describe(e));
    }
    return *e;
  }

  void submit(stream& s, work_item&& w) {
    if (options.synchronous) {
      std::lock_guard inline_lock(s.inline_mutex_);
      {
        std::lock_guard lock(s.mutex_);
        ++s.enqueued_;
      }
      execute(w, s.id_);
      s.mark_completed();
      return;
    }
    bool wake = false;
    {
      std::lock_guard lock(s.mutex_);
      s.queue_.push_back(std::move(w));
      ++s.enqueued_;
      wake = s.worker_sleeping_;
    }
    if (wake) {
      s.work_ready_.notify_one();
    }
  }

  static void stop(stream& s) {
    {
      std::lock_guard lock(s.mutex_);
      s.stopping_ = true;
    }
    s.work_ready_.notify_one();
  }

  static void join(stream& s) noexcept {
    if (s.worker_.joinable()) {
      if (s.worker_.get_id() == std::this_thread::get_id()) {
        std::fputs("sublinear host device: a stream was destroyed from its own worker "
                   "(a host function must not destroy its stream)\n", stderr);
        std::abort();
      }
      s.worker_.join();
    }
  }

  static void record(event& e, std::shared_ptr<stream> s) {
    const std::uint64_t pos = s->position();
    e.write(std::move(s), pos);
  }

  void launch_packed(const kernel& k, const launch_config& cfg, stream* s,
                     std::vector<std::byte>&& packed);

  // Calls `call(hook)` for every hook, unless this thread is already inside this device's
  // hooks (Note [Hook re-entrancy]).
  template <class F>
  void notify_hooks(F&& call) {
    if (!have_hooks.load(std::memory_order_acquire) || hook_scope::active(this)) {
      return;
    }
    std::shared_lock lock(hooks_mutex);
    hook_scope scope(this);
    for (launch_hook* h : hooks) {
      call(*h);
    }
  }
};

device::device(device_options options) : impl_(std::make_unique<impl>(options)) {
  impl_->default_stream = impl_->make_stream().get();
}

device::~device() {
  std::vector<std::shared_ptr<stream>> all;
  {
    std::lock_guard lock(impl_->streams_mutex);
    for (auto& [raw, s] : impl_->streams) {
      all.push_back(s);
    }
  }
  // Stop every worker before joining any: a stream may be waiting on another's work, and
  // each worker drains its queue before it exits.
  for (auto& s : all) {
    impl::stop(*s);
  }
  for (auto& s : all) {
    impl::join(*s);
  }
}

stream* device::default_stream() { return impl_->default_stream; }

stream* device::create_stream() { return impl_->make_stream().get(); }

void device::destroy_stream(stream* s) {
  if (s == nullptr || s == impl_->default_stream) {
    throw config_error("host device: destroy_stream: the default stream cannot be destroyed");
  }
  std::shared_ptr<stream> owned;
  {
    std::lock_guard lock(impl_->streams_mutex);
    auto it = impl_->streams.find(s);
    if (it == impl_->streams.end()) {
      throw config_error("host device: destroy_stream: unknown stream " + describe(s));
    }
    owned = std::move(it->second);
    impl_->streams.erase(it);
  }
  impl::stop(*owned);
  impl::join(*owned);
}

std::uint32_t device::stream_id(stream* s) { return impl_->resolve(s, "stream_id")->id_; }

bool device::synchronous() const noexcept { return impl_->options.synchronous; }

std::uint64_t device::launch_count() const noexcept {
  return impl_->correlation.load(std::memory_order_relaxed);
}

event* device::create_event() {
  auto e = std::make_unique<event>(/*pooled=*/false);
  event* raw = e.get();
  std::lock_guard lock(impl_->events_mutex);
  impl_->events.emplace(raw, std::move(e));
  return raw;
}

void device::destroy_event(event* e) {
  std::unique_ptr<event> doomed;
  std::lock_guard lock(impl_->events_mutex);
  auto it = impl_->events.find(e);
  if (it == impl_->events.end()) {
    throw config_error("host device: destroy_event: unknown event " + describe(e));
  }
  if (it->second->pooled_) {
    throw config_error("host device: destroy_event: event " + describe(e) +
                       " belongs to the stream_events pool; give it back with release()");
  }
  // Destroying a pending event is allowed, as in CUDA: waits already enqueued hold their
  // own copy of its position.
  doomed = std::move(it->second);
  impl_->events.erase(it);
}

void device::record_event(event* e, stream* s) {
  event& ev = impl_->resolve(e, "record_event");
  auto st = impl_->resolve(s, "record_event");
  event_op_record rec{event_op_record::kind::record, e, st.get()};
  impl_->notify_hooks([&](launch_hook& h) { h.on_event_op(rec); });
  impl::record(ev, std::move(st));
}

bool device::query_event(event* e) { return impl_->resolve(e, "query_event").read().done(); }

void device::synchronize_event(event* e) {
  event::snapshot snap = impl_->resolve(e, "synchronize_event").read();
  if (snap.on) {
    snap.on->wait_for(snap.pos);
  }
}

void device::stream_wait_event(stream* s, event* e) {
  auto waiter = impl_->resolve(s, "stream_wait_event");
  event& ev = impl_->resolve(e, "stream_wait_event");
  event_op_record rec{event_op_record::kind::wait, e, waiter.get()};
  impl_->notify_hooks([&](launch_hook& h) { h.on_event_op(rec); });
  // Read after the hooks: work they queued (on any stream) precedes this call.
  event::snapshot snap = ev.read();
  // Nothing to wait for: never recorded (CUDA treats it as complete), already complete, or
  // recorded on this very stream (its own order covers it).
  if (snap.done() || snap.on == waiter) {
    return;
  }
  work_item w;
  w.kind = work_kind::wait;
  w.wait_on = std::move(snap.on);
  w.wait_pos = snap.pos;
  impl_->submit(*waiter, std::move(w));
}

// ---- launches ------------------------------------------------------------------------------

void device::impl::launch_packed(const kernel& k, const launch_config& cfg, stream* s,
                                 std::vector<std::byte>&& packed) {
  auto st = resolve(s, "launch");
  const std::uint64_t id = correlation.fetch_add(1, std::memory_order_relaxed) + 1;

  auto queue_kernel = [&](std::vector<std::byte>&& bytes) {
    work_item w;
    w.kind = work_kind::kernel;
    w.body = k.body;
    w.config = cfg;
    w.params = std::move(bytes);
    submit(*st, std::move(w));
  };

  if (!have_hooks.load(std::memory_order_acquire) || hook_scope::active(this)) {
    queue_kernel(std::move(packed));
    return;
  }
  std::shared_lock lock(hooks_mutex);
  if (hooks.empty()) {
    lock.unlock();
    queue_kernel(std::move(packed));
    return;
  }
  hook_scope scope(this);
  launch_record rec;
  rec.fn = &k;
  rec.config = cfg;
  rec.on = st.get();
  rec.params = packed.data();
  rec.param_bytes = packed.size();
  rec.correlation_id = id;
  for (launch_hook* h : hooks) {
    h->on_enter(rec);
  }
  // The record's bytes must stay valid through on_exit, while the queued copy may already
  // have run and been freed by then.
  queue_kernel(std::vector<std::byte>(packed));
  for (launch_hook* h : hooks) {
    h->on_exit(rec);
  }
}

void device::set_max_dynamic_shared(const kernel& k, std::uint32_t bytes) {
  if (bytes > max_dynamic_shared_optin) {
    throw config_error("host device: set_max_dynamic_shared: " + std::to_string(bytes) + " bytes for kernel '" +
                       k.name + "' is above the device's " + std::to_string(max_dynamic_shared_optin));
  }
  std::lock_guard lock(impl_->shared_limits_mutex);
  impl_->shared_limits[k.id] = bytes;
  impl_->have_shared_limits.store(true, std::memory_order_release);
}

std::uint32_t device::max_dynamic_shared(const kernel& k) const { return impl_->shared_limit(k); }

void device::launch(const kernel& k, const launch_config& cfg, stream* s, const void* params) {
  if (k.body == nullptr) {
    throw config_error("host device: launch: kernel '" + k.name + "' has no body");
  }
  impl_->check_shared(k, cfg, "launch");
  impl::check_attributes(k, cfg, "launch");
  if (params == nullptr && k.param_bytes != 0) {
    throw config_error("host device: launch: kernel '" + k.name + "' takes " +
                       std::to_string(k.param_bytes) + " parameter bytes but params is null");
  }
  std::vector<std::byte> packed(k.param_bytes);
  if (k.param_bytes != 0) {
    std::memcpy(packed.data(), params, k.param_bytes);
  }
  impl_->launch_packed(k, cfg, s, std::move(packed));
}

void device::launch_unpacked(const kernel& k, const launch_config& cfg, stream* s,
                             void** kernel_params) {
  if (k.body == nullptr) {
    throw config_error("host device: launch_unpacked: kernel '" + k.name + "' has no body");
  }
  impl_->check_shared(k, cfg, "launch_unpacked");
  impl::check_attributes(k, cfg, "launch_unpacked");
  if (kernel_params == nullptr && !k.params.empty()) {
    throw config_error("host device: launch_unpacked: kernel '" + k.name + "' takes " +
                       std::to_string(k.params.size()) + " parameters but kernelParams is null");
  }
  // Bytes between parameters (padding) are zero, so equal arguments give equal blocks.
  std::vector<std::byte> packed(k.param_bytes);
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    if (kernel_params[i] == nullptr) {
      throw config_error("host device: launch_unpacked: kernel '" + k.name + "': parameter " +
                         std::to_string(i) + " is null");
    }
    std::memcpy(packed.data() + k.params[i].offset, kernel_params[i], k.params[i].size);
  }
  impl_->launch_packed(k, cfg, s, std::move(packed));
}

void device::memcpy_async(void* dst, const void* src, std::size_t bytes, stream* s) {
  if (bytes != 0 && (dst == nullptr || src == nullptr)) {
    throw config_error("host device: memcpy_async: null " +
                       std::string(dst == nullptr ? "destination" : "source") + " for " +
                       std::to_string(bytes) + " bytes");
  }
  auto st = impl_->resolve(s, "memcpy_async");
  memory_op_record rec{memory_op_record::kind::copy, dst, src, bytes, 0, st.get()};
  impl_->notify_hooks([&](launch_hook& h) { h.on_memory_op(rec); });
  work_item w;
  w.kind = work_kind::copy;
  w.dst = dst;
  w.src = src;
  w.bytes = bytes;
  impl_->submit(*st, std::move(w));
}

void device::memset_async(void* dst, int value, std::size_t bytes, stream* s) {
  if (bytes != 0 && dst == nullptr) {
    throw config_error("host device: memset_async: null destination for " +
                       std::to_string(bytes) + " bytes");
  }
  auto st = impl_->resolve(s, "memset_async");
  memory_op_record rec{memory_op_record::kind::set, dst, nullptr, bytes, value, st.get()};
  impl_->notify_hooks([&](launch_hook& h) { h.on_memory_op(rec); });
  work_item w;
  w.kind = work_kind::set;
  w.dst = dst;
  w.value = value;
  w.bytes = bytes;
  impl_->submit(*st, std::move(w));
}

void device::memset_async_unobserved(void* dst, int value, std::size_t bytes, stream* s) {
  const hook_scope quiet(impl_.get());
  memset_async(dst, value, bytes, s);
}

void device::host_func(stream* s, std::function<void()> fn) {
  if (!fn) {
    throw config_error("host device: host_func: empty function");
  }
  auto st = impl_->resolve(s, "host_func");
  work_item w;
  w.kind = work_kind::host_fn;
  w.fn = std::move(fn);
  impl_->submit(*st, std::move(w));
}

void device::synchronize(stream* s) {
  auto st = impl_->resolve(s, "synchronize");
  st->wait_for(st->position());
}

void device::synchronize(std::nullptr_t) { synchronize(static_cast<stream*>(nullptr)); }

void device::synchronize() {
  std::vector<std::shared_ptr<stream>> all;
  {
    std::lock_guard lock(impl_->streams_mutex);
    for (auto& [raw, s] : impl_->streams) {
      all.push_back(s);
    }
  }
  for (auto& s : all) {
    s->wait_for(s->position());
  }
}

// ---- hooks -----------------------------------------------------------------------------------

void device::add_hook(launch_hook* hook) {
  if (hook == nullptr) {
    throw config_error("host device: add_hook: null hook");
  }
  if (hook_scope::active(impl_.get())) {
    throw config_error("host device: add_hook called from inside a launch hook");
  }
  std::unique_lock lock(impl_->hooks_mutex);
  for (launch_hook* h : impl_->hooks) {
    if (h == hook) {
      throw config_error("host device: add_hook: hook " + describe(hook) +
                         " is already registered");
    }
  }
  impl_->hooks.push_back(hook);
  impl_->have_hooks.store(true, std::memory_order_release);
}

void device::remove_hook(launch_hook* hook) {
  if (hook_scope::active(impl_.get())) {
    throw config_error("host device: remove_hook called from inside a launch hook");
  }
  std::unique_lock lock(impl_->hooks_mutex);
  auto& hooks = impl_->hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (*it == hook) {
      hooks.erase(it);
      impl_->have_hooks.store(!hooks.empty(), std::memory_order_release);
      return;
    }
  }
  throw config_error("host device: remove_hook: hook " + describe(hook) + " is not registered");
}

// ---- stream_events ------------------------------------------------------------

event_handle device::record(stream_handle s) {
  auto st = impl_->resolve(from_handle(s), "record");
  event* e = nullptr;
  {
    std::lock_guard lock(impl_->events_mutex);
    if (!impl_->event_pool.empty()) {
      e = impl_->event_pool.back();
      impl_->event_pool.pop_back();
      e->in_pool_ = false;
    } else {
      auto fresh = std::make_unique<event>(/*pooled=*/true);
      e = fresh.get();
      impl_->events.emplace(e, std::move(fresh));
    }
  }
  impl::record(*e, std::move(st));
  return e;
}

bool device::query(event_handle e) {
  return query_event(static_cast<event*>(e));
}

void device::synchronize(event_handle e) {
  synchronize_event(static_cast<event*>(e));
}

void device::stream_wait(stream_handle waiter, event_handle e) {
  const hook_scope quiet(impl_.get());
  stream_wait_event(from_handle(waiter), static_cast<event*>(e));
}

void device::release(event_handle e) noexcept {
  auto* ev = static_cast<event*>(e);
  std::lock_guard lock(impl_->events_mutex);
  auto it = impl_->events.find(ev);
  if (it == impl_->events.end() || !it->second->pooled_ || ev->in_pool_) {
    // noexcept by contract; a foreign or twice-released handle is a caller bug worth a
    // message, not a crash (pooling it twice would hand one event to two owners).
    std::fprintf(stderr, "sublinear host device: release of %s event %p ignored\n",
                 it == impl_->events.end() || !it->second->pooled_ ? "unknown" : "released", e);
    return;
  }
  ev->in_pool_ = true;
  // Drop the stream reference so a destroyed stream's state is not kept alive by the pool.
  ev->write(nullptr, 0);
  impl_->event_pool.push_back(ev);
}

}  // namespace sublinear::device::host
