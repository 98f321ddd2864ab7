// See Note [Process runtime] in process_runtime.hpp. Type map:
//
//   tracing_side     : the process's recorder and CUPTI collector (started at injection)
//   untraced_events  : cuda_events whose event records the collector does not see
//   runtime_listener : the collector's listener: pending markers, then the engine
//   marker_inbox     : (marker_inbox.hpp) sublinear_mark_iteration's recorder; the allocator's observer
//   process_runtime::impl : everything one runtime owns
#include "common/text.hpp"
#include "runtime/cuda/process_runtime.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>

#include "device/cuda/cuda_events.hpp"
#include "device/cuda/cuda_vmm.hpp"
#include "device/cuda/driver_table.hpp"
#include "allocator/default_allocator.hpp"
#include "runtime/cuda/collector_adapter.hpp"
#include "runtime/cuda/cuda_replay_device.hpp"
#include "runtime/cuda/marker_inbox.hpp"
#include "runtime/hidden_allocations.hpp"
#include "runtime/report/report.hpp"
#include "policy/budget.hpp"
#include "sublinear/error.hpp"
#include "tracer/cupti/cupti_collector.hpp"
#include "tracer/online_iterations.hpp"
#include "tracer/recorder.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::runtime {

std::string no_driver_message(const std::string& why) {
  return "sublinear: no usable CUDA driver was found (" + why +
         "). sublinear's process runtime needs an NVIDIA GPU and its driver: run on such a machine, or run the "
         "program without sublinear (without `sublinear run`, LD_PRELOAD=libsublinear_preload.so or "
         "CUDA_INJECTION64_PATH); `sublinear demo` shows sublinear on the host device without a GPU";
}

namespace {

// Events traced iterations grow to before tracing stops for want of an iteration marker.
constexpr std::size_t max_traced_events = std::size_t{1} << 22;

// ---- the tracing side ------------------------------------------------------------------------

struct tracing_side {
  std::mutex mutex;
  bool started = false;
  tracer::recorder* recorder = nullptr;          // leaked with the collector: callbacks until exit
  tracer::cupti_collector* collector = nullptr;
  std::string unavailable;                       // why there is no collector
  std::string trace_path;                        // SUBLINEAR_TRACE, for a run that never planned
};

tracing_side& tracing() {
  static tracing_side* side = new tracing_side;  // never destroyed (see above)
  return *side;
}

std::atomic<process_runtime*> g_instance{nullptr};

void write_unplanned_trace_at_exit() {
  tracing_side& t = tracing();
  if (g_instance.load(std::memory_order_acquire) != nullptr) return;  // the runtime writes it
  if (t.recorder == nullptr || t.collector == nullptr || t.trace_path.empty()) return;
  try {
    t.collector->flush();
    tracer::write_trace_file(t.recorder->take(), t.trace_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: SUBLINEAR_TRACE: cannot write %s: %s\n", t.trace_path.c_str(), e.what());
  }
}

// ---- pieces --------------------------------------------------------------------------------------

class untraced_events final : public device::stream_events {
 public:
  explicit untraced_events(device::cuda_events& inner) : inner_(inner) {}
  device::event_handle record(device::stream_handle stream) override {
    const tracer::untraced_scope untraced;
    return inner_.record(stream);
  }
  bool query(device::event_handle event) override {
    const tracer::untraced_scope untraced;
    return inner_.query(event);
  }
  void synchronize(device::event_handle event) override {
    const tracer::untraced_scope untraced;
    inner_.synchronize(event);
  }
  void release(device::event_handle event) noexcept override { inner_.release(event); }

 private:
  device::cuda_events& inner_;
};

// The collector's listener: pending markers first, then the engine (collector_adapter.hpp)
// with the engine scope held.
class runtime_listener final : public tracer::launch_listener {
 public:
  runtime_listener(engine& e, std::function<void(const tracer::launch_description&)> before_enter,
                   std::function<void(std::string_view, std::size_t)> stream_ordered)
      : inner_(e), before_enter_(std::move(before_enter)), stream_ordered_(std::move(stream_ordered)) {}
  void on_enter(const tracer::launch_description& op) override {
    before_enter_(op);
    const marker_inbox::engine_scope scope;
    inner_.on_enter(op);
  }
  void on_exit(const tracer::launch_description& op) override {
    const marker_inbox::engine_scope scope;
    inner_.on_exit(op);
  }
  void on_stream_ordered(std::string_view call, std::size_t bytes) override { stream_ordered_(call, bytes); }

 private:
  engine_listener inner_;
  std::function<void(const tracer::launch_description&)> before_enter_;
  std::function<void(std::string_view, std::size_t)> stream_ordered_;
};

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : raw)
    if (c == '\0') c = ' ';
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  if (raw.size() > 200) raw = raw.substr(0, 197) + "...";
  return raw;
}

}  // namespace

// ---- the runtime ---------------------------------------------------------------------------------

struct process_runtime::impl {
  settings config;
  std::string disabled_reason;  // why the engine is disabled ("" when it is not)
  const device::driver_api* api = nullptr;
  int device = 0;
  std::string device_label;
  CUcontext context = nullptr;  // retained primary context, for the replay device

  std::unique_ptr<device::cuda_vmm> vmm;
  std::unique_ptr<device::cuda_events> events;
  std::unique_ptr<untraced_events> untraced;
  std::unique_ptr<allocator::caching_allocator> alloc;
  std::unique_ptr<tracer::recorder> own_recorder;  // when there is no tracing side
  tracer::recorder* recorder = nullptr;
  tracer::cupti_collector* collector = nullptr;
  std::unique_ptr<cuda_replay_device> replay;
  std::unique_ptr<engine> eng;
  std::unique_ptr<marker_inbox> markers;  // the allocator's observer and the default recorder
  std::unique_ptr<runtime_listener> listener;

  std::atomic<bool> tracing_stopped{false};
  std::atomic<bool> stream_ordered_warned{false};  // Note [Stream-ordered allocation]: warned once
  std::atomic<std::uint32_t> enters{0};
  // Counts at the last iteration boundary, for Note [Hidden allocations].
  std::uint64_t allocations_at_boundary = 0;
  std::uint32_t enters_at_boundary = 0;

  // SUBLINEAR_ITERATION=auto (Note [Online iteration boundaries]): until the program marks
  // an iteration itself, which switches this off for good.
  std::mutex auto_mutex;
  std::unique_ptr<tracer::online_iterations> auto_boundaries;
  std::atomic<bool> explicit_markers{false};
  std::atomic<std::size_t> auto_period{0};  // the detector's period, for status_line() on any thread

  ~impl() {
    if (context != nullptr && api != nullptr) SUBLINEAR_CU_UNCHECKED(api->primary_ctx_release(device));
  }

  void enter() const {
    CUcontext current = nullptr;
    SUBLINEAR_CU_CHECK(*api, api->ctx_get_current(&current));
    if (current == nullptr) SUBLINEAR_CU_CHECK(*api, api->ctx_set_current(context));
  }

  void synchronize() const {
    const tracer::untraced_scope quiet;
    enter();
    SUBLINEAR_CU_CHECK(*api, api->ctx_synchronize());
  }

  // An iteration boundary (runs inside a marker_inbox::engine_scope): durations first when
  // the iteration is about to be analysed.
  void deliver_marker() {
    if (tracing_stopped.load(std::memory_order_acquire)) return;
    if (eng->state() == engine_state::trace && collector != nullptr) {
      synchronize();
      collector->flush();
    }
    const bool was_tracing = eng->state() == engine_state::trace;
    eng->mark_iteration();
    warn_if_allocations_hidden(was_tracing);
    // Note [Durations only while tracing] (cupti_collector.hpp) and [Phase-aware
    // subscription] (callback_plan.hpp).
    if (collector != nullptr) collector->set_phase(phase_for(eng->state()));
  }

  // Once, when the traced iterations end (Note [Hidden allocations]).
  void warn_if_allocations_hidden(bool was_tracing) {
    const auto stats = alloc->get_stats();
    const std::uint64_t allocations = stats.allocs + stats.frees;
    const std::uint32_t launches = enters.load(std::memory_order_relaxed);
    if (was_tracing && eng->state() != engine_state::trace && config.log >= log_level::warn) {
      const std::string warning = hidden_allocations_warning(
          allocations - allocations_at_boundary, launches - enters_at_boundary,  // uint32 wraps as the counter does
          std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING"));
      if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
    }
    allocations_at_boundary = allocations;
    enters_at_boundary = launches;
  }

  void poll_markers() {
    if (markers != nullptr) markers->poll();
  }

  // A boundary found by the online detector: the marker goes before this launch.
  void auto_boundary(const tracer::launch_description& op) {
    if (auto_boundaries == nullptr || explicit_markers.load(std::memory_order_relaxed)) return;
    bool boundary = false;
    {
      const std::lock_guard lock(auto_mutex);
      tracer::online_iterations& d = *auto_boundaries;
      const tracer::event_kind kind = op.what == tracer::launch_description::kind::kernel ? tracer::event_kind::launch
                                      : op.what == tracer::launch_description::kind::memcpy ? tracer::event_kind::memcpy
                                                                                             : tracer::event_kind::memset;
      const std::uint64_t signature =
          tracer::launch_signature(kind, op.kernel_handle, op.grid, op.block, op.shared_mem,
                                   kind == tracer::event_kind::launch ? 0 : op.bytes);
      // Live bytes matter only while searching; once locked the signature alone is checked.
      const std::size_t live = d.period() == 0 ? alloc->get_stats().allocated : 0;
      boundary = d.on_launch(signature, live);
      if (d.period() != auto_period.load(std::memory_order_relaxed)) {
        eng->log(log_level::info, d.period() != 0 ? "iteration boundaries found: " + std::to_string(d.period()) +
                                                        " launches per iteration"
                                                  : "iteration boundaries lost (a launch differed from the period); "
                                                    "searching again");
      }
      auto_period.store(d.period(), std::memory_order_relaxed);
    }
    if (boundary) {
      const marker_inbox::engine_scope scope;
      deliver_marker();
    }
  }

  // The collector's phase for an engine state (Note [Phase-aware subscription]).
  static tracer::collector_phase phase_for(engine_state s) noexcept {
    switch (s) {
      case engine_state::trace: return tracer::collector_phase::tracing;
      case engine_state::validate:
      case engine_state::steady: return tracer::collector_phase::steady;
      case engine_state::disabled: return tracer::collector_phase::off;
    }
    return tracer::collector_phase::off;
  }

  // Sublinear runs as a plain caching allocator from here on: nothing is traced or planned.
  void stop_tracing() {
    tracing_stopped.store(true);
    if (collector != nullptr) {
      collector->set_listener(nullptr);
      collector->set_phase(tracer::collector_phase::off);
    }
    recorder->stop();
  }

  // Note [Stream-ordered allocation] (tracer/cupti/callback_plan.hpp).
  void stream_ordered(std::string_view call, std::size_t bytes) {
    const bool tracing = !tracing_stopped.load() && eng->state() == engine_state::trace;
    if (tracing) {
      stop_tracing();
      eng->log(log_level::error, tracer::stream_ordered_message(call, bytes, true));
    } else if (!stream_ordered_warned.exchange(true)) {
      eng->log(log_level::warn, tracer::stream_ordered_message(call, bytes, false));
    }
  }

  // Called at every launch ENTER.
  void before_launch(const tracer::launch_description& op) {
    poll_markers();
    auto_boundary(op);
    // Checking the trace's size every 4096 launches keeps a lock off the launch path.
    if ((enters.fetch_add(1, std::memory_order_relaxed) & 4095U) != 0 || tracing_stopped.load()) return;
    if (eng->state() != engine_state::trace || recorder->event_count() < max_traced_events) return;
    stop_tracing();
    eng->log(log_level::warn,
             std::to_string(max_traced_events) + " events recorded without an iteration marker" +
                 (auto_boundaries != nullptr
                      ? " and no repeating iteration found in the launches (SUBLINEAR_ITERATION=auto)"
                      : "") +
                 "; tracing stopped and sublinear runs as a plain caching allocator. Mark iterations with "
                 "sublinear_mark_iteration() (the PyTorch integration does it from the optimizer step).");
  }
};

process_runtime::process_runtime(std::unique_ptr<impl> i) : impl_(std::move(i)) {}

std::unique_ptr<process_runtime> process_runtime::create(const settings& config) {
  auto m = std::make_unique<impl>();
  m->config = config;

  std::string why;
  m->api = device::load_driver(&why);
  if (m->api == nullptr) throw device_error(no_driver_message(why));
  const device::driver_api& api = *m->api;

  // The device the program is using now; cudart's default device otherwise.
  CUcontext current = nullptr;
  if (api.ctx_get_current(&current) == CUDA_SUCCESS && current != nullptr) {
    CUdevice d = 0;
    if (api.ctx_get_device(&d) == CUDA_SUCCESS) m->device = d;
  }
  CUdevice dev = 0;
  if (!device::retain_device(api, m->device, &dev, &m->context, &why)) {
    throw device_error("sublinear: CUDA device " + std::to_string(m->device) + " cannot be used: " + why);
  }
  char name[256] = {};
  if (api.device_get_name(name, sizeof name - 1, dev) != CUDA_SUCCESS) name[0] = '\0';
  m->device_label = "cuda:" + std::to_string(m->device) + (name[0] != '\0' ? std::string(" (") + name + ")" : "");

  m->vmm = device::make_cuda_vmm(m->device, &why);
  if (m->vmm == nullptr) throw device_error("sublinear: the CUDA VMM of " + m->device_label + " is unavailable: " + why);
  m->events = std::make_unique<device::cuda_events>(m->device);
  m->untraced = std::make_unique<untraced_events>(*m->events);
  m->alloc = std::make_unique<allocator::caching_allocator>(*m->vmm, *m->untraced);

  settings engine_config = config;
  if (config.disable) {
    m->disabled_reason = "SUBLINEAR_DISABLE: plain caching, no tracing or eviction";
  } else {
    start_tracing(false);
    tracing_side& t = tracing();
    const std::lock_guard lock(t.mutex);
    if (t.collector == nullptr) {
      m->disabled_reason = "tracing unavailable: " + t.unavailable;
      engine_config.disable = true;
    } else {
      m->recorder = t.recorder;
      m->collector = t.collector;
      // Made before the allocator: without it, traces written for `sublinear plan` said
      // pages of 1 byte, and its previews of GPU traces ignored page rounding.
      m->recorder->set_granularity(m->alloc->granularity());
    }
  }
  if (m->recorder == nullptr) {
    tracer::recorder_options ro;
    ro.device = "cuda";
    ro.granularity = m->alloc->granularity();
    ro.start_recording = false;
    m->own_recorder = std::make_unique<tracer::recorder>(ro);
    m->recorder = m->own_recorder.get();
  }
  m->replay = std::make_unique<cuda_replay_device>(api, m->context);
  engine_options eo;
  eo.config = engine_config;
  eo.device_capacity = m->vmm->physical_capacity();
  eo.record_timeline = !config.report.empty();
  m->eng = std::make_unique<engine>(*m->alloc, *m->replay, *m->recorder, std::move(eo));

  impl* raw = m.get();
  m->markers = std::make_unique<marker_inbox>([raw] {
    raw->explicit_markers.store(true, std::memory_order_relaxed);
    raw->deliver_marker();
  });
  if (config.iteration == iteration_mode::automatic && !engine_config.disable) {
    m->auto_boundaries = std::make_unique<tracer::online_iterations>();
  }
  m->markers->set_next(m->alloc->set_observer(m->markers.get()));
  if (m->collector != nullptr) {
    m->collector->set_phase(impl::phase_for(m->eng->state()));  // disabled: never traces
    m->listener = std::make_unique<runtime_listener>(
        *m->eng, [raw](const tracer::launch_description& op) { raw->before_launch(op); },
        [raw](std::string_view call, std::size_t bytes) { raw->stream_ordered(call, bytes); });
    m->collector->set_listener(m->listener.get());
  }
  m->eng->log(log_level::info, "active on " + m->device_label + ", budget " +
                                   (config.budget ? config.budget->text : std::string("none")) + ", policy " +
                                   config.policy +
                                   (m->disabled_reason.empty() ? "" : "; engine disabled: " + m->disabled_reason));
  if (!m->disabled_reason.empty() && !config.disable && config.log >= log_level::warn) {
    m->eng->log(log_level::error, m->disabled_reason + "; running without recomputation");
  }
  return std::unique_ptr<process_runtime>(new process_runtime(std::move(m)));
}

process_runtime::~process_runtime() {
  impl& m = *impl_;
  if (m.collector != nullptr) m.collector->set_listener(nullptr);
  m.alloc->set_observer(m.markers->next());
  m.listener.reset();
  m.eng.reset();
  m.markers.reset();
}

process_runtime* process_runtime::existing() noexcept { return g_instance.load(std::memory_order_acquire); }

process_runtime* process_runtime::instance(std::string* why) noexcept {
  if (process_runtime* rt = existing()) return rt;
  struct creation {
    std::mutex mutex;
    bool tried = false;
    std::string failure;
  };
  static creation* once = new creation;  // never destroyed: used until the process exits
  try {
    const std::lock_guard lock(once->mutex);
    if (!once->tried) {
      once->tried = true;
      try {
        std::unique_ptr<process_runtime> rt = create(read_settings_from_environment());
        g_instance.store(rt.release(), std::memory_order_release);
        std::atexit([] {
          if (process_runtime* r = existing()) r->write_outputs_at_exit();
        });
        // Note [Listener failure at a launch]: the report of the iterations so far.
        tracer::set_launch_failure_hook([]() noexcept {
          if (process_runtime* r = existing()) r->write_report_at_failure();
        });
      } catch (const std::exception& e) {
        once->failure = e.what();
      }
    }
    if (process_runtime* rt = existing()) return rt;
    if (why != nullptr) *why = once->failure;
  } catch (...) {
    // Out of memory while reporting a failure: nothing more to say.
  }
  return nullptr;
}

std::string process_runtime::status() noexcept {
  try {
    std::string why;
    if (process_runtime* rt = instance(&why)) return rt->status_line();
    if (why.rfind("sublinear: ", 0) == 0) why.erase(0, 11);  // the line names sublinear already
    return "inactive: " + why;
  } catch (...) {
    return "inactive: the status could not be read (out of memory)";
  }
}

void process_runtime::start_tracing(bool inside_injection) noexcept {
  tracing_side& t = tracing();
  try {
    const std::lock_guard lock(t.mutex);
    if (t.started) return;
    t.started = true;
    settings s;
    try {
      s = read_settings_from_environment();
    } catch (const std::exception& e) {
      t.unavailable = e.what();
      std::fprintf(stderr, "%s; sublinear does not trace this process\n", e.what());
      return;
    }
    if (s.disable) {
      t.unavailable = "SUBLINEAR_DISABLE is set";
      return;
    }
    tracer::recorder_options ro;
    ro.device = "cuda";
    // A run that only traces (no allocation through sublinear) still writes SUBLINEAR_TRACE.
    ro.start_recording = !s.trace.empty();
    auto rec = std::make_unique<tracer::recorder>(ro);
    tracer::cupti_options co;
    co.inside_injection = inside_injection;
    try {
      t.collector = new tracer::cupti_collector(*rec, co);
    } catch (const std::exception& e) {
      t.unavailable = e.what();
      return;
    }
    t.recorder = rec.release();
    if (!s.trace.empty()) {
      t.trace_path = s.trace;
      std::atexit(&write_unplanned_trace_at_exit);
    }
  } catch (...) {
    t.unavailable = "out of memory while starting the tracer";
  }
}

allocator::caching_allocator& process_runtime::allocator() noexcept { return *impl_->alloc; }
engine& process_runtime::get() noexcept { return *impl_->eng; }
const settings& process_runtime::config() const noexcept { return impl_->config; }
int process_runtime::device() const noexcept { return impl_->device; }
std::string process_runtime::device_name() const { return impl_->device_label; }

std::string process_runtime::status_line() const {
  const impl& m = *impl_;
  std::string budget = m.config.budget ? m.config.budget->text : "none";
  if (const std::size_t planned = m.eng->budget(); planned != 0 && budget != format_bytes(planned)) {
    budget += " (" + format_bytes(planned) + ")";
  }
  std::string state = to_string(m.eng->state());
  if (!m.disabled_reason.empty()) state += " (" + m.disabled_reason + ")";
  if (m.tracing_stopped.load()) state += " (tracing stopped: no iteration markers)";
  if (m.auto_boundaries != nullptr && !m.explicit_markers.load()) {
    const std::size_t period = m.auto_period.load(std::memory_order_relaxed);
    state += period != 0 ? ", iterations detected every " + std::to_string(period) + " launches"
                         : ", detecting iterations";
  }
  return "active on " + m.device_label + ", budget " + budget + ", state " + state;
}

void process_runtime::mark_iteration() {
  impl_->explicit_markers.store(true, std::memory_order_relaxed);
  impl_->poll_markers();
  const marker_inbox::engine_scope scope;
  impl_->deliver_marker();
}

void process_runtime::write_report(const std::string& path) {
  report_metadata meta;
  meta.model = command_line();
  meta.device = impl_->device_label;
  meta.granularity = impl_->alloc->granularity();
  write_text_file(path, to_json(make_report(*impl_->eng, impl_->config, meta)));
}

void process_runtime::write_report_at_failure() noexcept {
  const std::string& path = impl_->config.report;
  if (path.empty()) return;
  try {
    write_report(path);
    std::fprintf(stderr, "sublinear: the report of the iterations up to the failure is in %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: SUBLINEAR_REPORT: cannot write %s: %s\n", path.c_str(), e.what());
  }
}

void process_runtime::write_outputs_at_exit() noexcept {
  impl& m = *impl_;
  try {
    m.poll_markers();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: the last iteration marker failed at exit: %s\n", e.what());
  }
  if (!m.config.report.empty()) {
    try {
      write_report(m.config.report);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sublinear: SUBLINEAR_REPORT: cannot write %s: %s\n", m.config.report.c_str(), e.what());
    }
  }
  if (m.config.trace.empty() || m.collector == nullptr) return;
  try {
    // The engine writes the trace when it plans; a run that never planned writes what it saw.
    for (const auto& it : m.eng->iterations())
      if (it.state == engine_state::validate || it.state == engine_state::steady) return;
    m.collector->flush();
    tracer::write_trace_file(m.recorder->take(), m.config.trace);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: SUBLINEAR_TRACE: cannot write %s: %s\n", m.config.trace.c_str(), e.what());
  }
}

bool process_runtime::owns(const void* p) const { return impl_->alloc->find(p).has_value(); }

bool process_runtime::serves_current_device() const noexcept {
  const impl& m = *impl_;
  CUcontext current = nullptr;
  if (m.api->ctx_get_current(&current) != CUDA_SUCCESS || current == nullptr) return m.device == 0;
  CUdevice d = 0;
  return m.api->ctx_get_device(&d) == CUDA_SUCCESS && d == m.device;
}

void process_runtime::synchronize() { impl_->synchronize(); }

std::size_t process_runtime::reported_total_memory() const noexcept {
  const impl& m = *impl_;
  if (const std::size_t planned = m.eng->budget(); planned != 0) return planned;
  if (!m.config.budget || m.config.budget->form == policy::budget_spec::kind::peak_fraction) return 0;
  try {
    return policy::resolve_budget(*m.config.budget, m.vmm->physical_capacity(), 0);
  } catch (...) {
    return 0;
  }
}

// ---- registration: the C API's factory and InitializeInjection's handler -------------------------

namespace {

allocator::caching_allocator* create_default(std::string* why) {
  process_runtime* rt = process_runtime::instance(why);
  return rt != nullptr ? &rt->allocator() : nullptr;
}

allocator::caching_allocator* existing_default() {
  process_runtime* rt = process_runtime::existing();
  return rt != nullptr ? &rt->allocator() : nullptr;
}

std::string status_of() { return process_runtime::status(); }

bool write_report_of(const char* path, std::string* why) {
  try {
    std::string reason;
    process_runtime* rt = process_runtime::instance(&reason);
    if (rt == nullptr) {
      *why = "sublinear_write_report: " + reason;
      return false;
    }
    const std::string target = path != nullptr && *path != '\0' ? path : rt->config().report;
    if (target.empty()) {
      *why = "sublinear_write_report: no path given and SUBLINEAR_REPORT is not set";
      return false;
    }
    rt->write_report(target);
    return true;
  } catch (const std::exception& e) {
    *why = std::string("sublinear_write_report: ") + e.what();
    return false;
  }
}

void on_injection() { process_runtime::start_tracing(true); }

constexpr allocator::default_allocator_factory factory{&create_default, &existing_default, &status_of,
                                                         &write_report_of};

[[maybe_unused]] const bool registered = [] {
  allocator::set_default_allocator_factory(&factory);
  tracer::set_injection_handler(&on_injection);
  return true;
}();

}  // namespace

}  // namespace sublinear::runtime
