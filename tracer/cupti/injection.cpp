// CUDA_INJECTION64_PATH entry point: the driver calls InitializeInjection() in a library
// named by that variable from inside cuInit, before the application's first CUDA call,
// which is the moment a CUPTI subscriber must exist to see every launch
// (research/cuda_mechanisms.md §1).
//
// When the process runtime is linked in (libsublinear.so, libsublinear_preload.so), it has
// registered an injection handler, and InitializeInjection runs it: the runtime's tracing
// side (its recorder and this collector, feeding the replay engine) starts here. Otherwise
// InitializeInjection only traces: it creates a recorder (installed as the default, so
// sublinear_mark_iteration reaches it) and the collector, and with SUBLINEAR_TRACE=path
// writes the trace there at exit. If CUPTI cannot be used (no libcupti, another subscriber
// such as a profiler) the reason is printed and the process runs untraced: without
// recomputation, never with a crash.
//
// The object is only linked where something references it (a static archive member), so
// the integration library that is loaded through CUDA_INJECTION64_PATH pulls it in with a
// whole-archive link or a reference to sublinear_cupti_injection_active().
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "sublinear/export.h"
#include "tracer/cupti/cupti_collector.hpp"
#include "tracer/recorder.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::tracer {
namespace {
constinit std::atomic<injection_handler> g_handler{nullptr};
}  // namespace

injection_handler set_injection_handler(injection_handler handler) noexcept {
  return g_handler.exchange(handler, std::memory_order_acq_rel);
}

}  // namespace sublinear::tracer

namespace {

// Both live until the process exits: CUDA may call back until then.
sublinear::tracer::recorder* g_recorder = nullptr;
sublinear::tracer::cupti_collector* g_collector = nullptr;
const char* g_trace_path = nullptr;
std::atomic<bool> g_initialized{false};

void write_trace_at_exit() {
  if (g_collector == nullptr || g_recorder == nullptr || g_trace_path == nullptr) return;
  try {
    g_collector->flush();
    sublinear::tracer::write_trace_file(g_recorder->take(), g_trace_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: could not write the trace to %s: %s\n", g_trace_path, e.what());
  }
}

void trace_only() {
  try {
    sublinear::tracer::recorder_options o;
    o.device = "cuda";
    g_recorder = new sublinear::tracer::recorder(o);
    sublinear::tracer::cupti_options co;
    co.inside_injection = true;
    g_collector = new sublinear::tracer::cupti_collector(*g_recorder, co);
    sublinear::tracer::set_default_recorder(g_recorder);
    g_trace_path = std::getenv("SUBLINEAR_TRACE");
    if (g_trace_path != nullptr && *g_trace_path != '\0') std::atexit(&write_trace_at_exit);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: tracing disabled, running without recomputation: %s\n", e.what());
  }
}

}  // namespace

// 1 once InitializeInjection has run in this process (whether or not CUPTI could be used:
// sublinear_status() says that).
extern "C" SUBLINEAR_API int sublinear_cupti_injection_active(void) {
  return g_initialized.load(std::memory_order_acquire) ? 1 : 0;
}

extern "C" SUBLINEAR_API int InitializeInjection(void) {
  if (g_initialized.exchange(true)) return 1;  // called once per process; tolerate a second call
  if (sublinear::tracer::injection_handler h = sublinear::tracer::g_handler.load(std::memory_order_acquire)) {
    h();
  } else {
    trace_only();
  }
  // Non-zero: the injection library initialized (the process continues either way).
  return 1;
}
