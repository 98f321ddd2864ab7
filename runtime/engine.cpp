// The replay engine's lifecycle and its public shell (engine.hpp). Its state is
// engine::impl (runtime/detail/engine_impl.hpp, which maps its methods to files): this
// file drives the iterations (Note [Iteration lifecycle]), matches them against the trace
// and forwards the allocator's and the collector's calls.
//
// Note [Iteration lifecycle]
// Rationale: eviction is only safe if we know, at each launch, which buffers the rest of
//   the iteration will touch and how to regenerate each one. A training iteration repeats,
//   so one traced iteration tells us all of it; correctness must still never depend on the
//   trace being right.
// Approach: TRACE (the recorder records; nothing is evicted) -> PLAN (analyse the trace,
//   run the planner, set the allocator's budget; engine_plan.cpp) -> VALIDATE (the first
//   iterations with evictions keep a host-side copy of every evicted buffer and compare it
//   with what the replay regenerates; a mismatch restores the copy, so the iteration stays
//   correct, and marks the buffer never-evict for the next plan) -> STEADY. Every
//   iteration is compared with the trace as it runs (each allocation's size, each launch's
//   kernel); at the first difference every evicted buffer is regenerated, eviction stops
//   for the iteration and the next one is traced again.
// Limitations: with a budget that is a multiple of the traced peak ("0.5x") the traced
//   iterations run without a budget: the peak that defines it is not known before them.
//   An absolute budget (bytes, or a share of device memory) holds from the first traced
//   iteration on (Note [Offloading the traced iteration] in engine_offload.cpp).
#include "common/text.hpp"
#include "runtime/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "policy/budget.hpp"
#include "runtime/detail/engine_impl.hpp"
#include "tracer/analysis.hpp"
#include "tracer/block_hashes.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::runtime {

const char* to_string(engine_state s) noexcept {
  switch (s) {
    case engine_state::trace: return "trace";
    case engine_state::validate: return "validate";
    case engine_state::steady: return "steady";
    case engine_state::disabled: return "disabled";
  }
  return "?";
}

namespace {

using policy::buffer_id;
using policy::launch_id;
using policy::none;

// Set while the engine itself allocates or launches, so its own work is not mistaken for
// the program's.
thread_local int inside_engine = 0;
struct engine_scope {
  engine_scope() { ++inside_engine; }
  ~engine_scope() { --inside_engine; }
};

std::uint64_t vmm_calls(const allocator::stats& s) {
  return s.create_calls + s.map_calls + s.set_access_calls + s.unmap_calls + s.release_calls;
}

}  // namespace

// ---- iteration boundaries -------------------------------------------------------------

void engine::impl::begin_iteration() {
  pos = 0;
  alloc_count = 0;
  diverged = false;
  restore_all_pending = false;
  memory_op_pending = false;
  evicted_ranges.clear();
  backups.clear();
  input_copies.clear();
  never_evict_at_begin = never_evict_allocs.size();
  buffer_at.clear();
  current = {};
  current.index = iteration_index;
  current.state = st;
  current.budget = budget_bytes;
  current.host_held_bytes = host_held();
  first_call_s = -1.0;
  if (have_plan && (st == engine_state::validate || st == engine_state::steady))
    current.predicted_s = plan_time.next.predicted_s;
  if (have_plan && (st == engine_state::validate || st == engine_state::steady)) {
    const auto& g = graph();
    addr.assign(g.buffers.size(), nullptr);
    evicted.assign(g.buffers.size(), 0);
    freed.assign(g.buffers.size(), 0);
    kept_resident.assign(g.buffers.size(), 0);
    held.assign(g.buffers.size(), 0);
    held_count = 0;
    active_entry.assign(g.buffers.size(), -1);
    version.assign(g.buffers.size(), 0);
    last_write.assign(g.buffers.size(), none);
    pins.assign(g.buffers.size(), 0);
    prefetch_scan = 0;
    saved.assign(g.launches.size(), {});
    reset_write_checks();
    begin_offloads();
    for (buffer_id b = 0; b < g.buffers.size(); ++b) {
      if (g.buffers[b].alloc_index == none) {
        addr[b] = reinterpret_cast<char*>(an.buffer_addresses[b]);
        buffer_at[addr[b]] = b;
      }
    }
  }
  if (st == engine_state::trace && trace_budget_bytes > 0) {
    try {
      alloc.set_budget(trace_budget_bytes);
      current.budget = trace_budget_bytes;
    } catch (const out_of_memory& e) {
      log_warn("cannot bring mapped memory under the budget for the traced iteration: " + std::string(e.what()) +
               "; tracing it unbudgeted");
      alloc.set_budget(0);
    }
  }
  unoffloaded_peak = 0;
  alloc.reset_peaks();
  const allocator::stats at_begin = alloc.get_stats();
  waits_at_begin = at_begin.budget_waits + at_begin.release_waits;
  observation_ns_at_begin = rec.observation_ns();
  recording_ns_at_begin = rec.recording_ns();
  handoffs_at_begin = at_begin.handoffs;
  pack_members_at_begin = at_begin.pack_members;
  vmm_calls_at_begin = vmm_calls(at_begin);
  iteration_started_s = dev.now_s();
}

void engine::impl::end_iteration() {
  flush_memory_op();
  release_held(none);
  if (have_plan && (st == engine_state::validate || st == engine_state::steady)) {
    settle_releases(unsettled.size());
    settle_write_checks(true);
    finish_offloads();
  }
  if (st == engine_state::validate || st == engine_state::steady) {
    // Anything still evicted is never used again this iteration; nothing to do but
    // forget it (its block is freed or will be, and the allocator keeps it consistent).
    evicted_ranges.clear();
  }
  auto s = alloc.get_stats();
  current.peak_mapped = s.mapped_peak;
  current.allocator_waits = static_cast<std::size_t>(s.budget_waits + s.release_waits - waits_at_begin);
  current.handoffs = static_cast<std::size_t>(s.handoffs - handoffs_at_begin);
  current.packed = static_cast<std::size_t>(s.pack_members - pack_members_at_begin);
  current.vmm_calls = static_cast<std::size_t>(vmm_calls(s) - vmm_calls_at_begin);
  const double ended_s = dev.now_s();
  current.wall_s = ended_s - iteration_started_s;
  current.active_s = first_call_s < 0.0 ? 0.0 : ended_s - first_call_s;
  current.observation_s += static_cast<double>(rec.observation_ns() - observation_ns_at_begin) * 1e-9;
  current.recording_s = static_cast<double>(rec.recording_ns() - recording_ns_at_begin) * 1e-9;
  current.diverged = diverged;
  reports.push_back(current);
  if (have_plan && st == engine_state::steady && !diverged && !current.budget_lifted) measure_host_cost();
  note(timeline_event::kind::iteration, iteration_started_s, current.peak_mapped, to_string(current.state));
  {
    char line[512];
    std::snprintf(line, sizeof line,
                  "iteration %zu [%s]: peak mapped %s%s%s, %zu evictions (%s), %zu recomputed launches, "
                  "recompute %.1f ms, stall %.1f ms%s%s%s",
                  current.index, to_string(current.state), format_bytes(current.peak_mapped).c_str(),
                  current.budget ? " of a " : "", current.budget ? (format_bytes(current.budget) + " budget").c_str() : "",
                  current.evictions, format_bytes(current.evicted_bytes).c_str(), current.recomputed_launches,
                  current.recompute_s * 1e3, current.stall_s * 1e3, diverged ? ", diverged" : "",
                  current.offloads == 0 ? ""
                                        : (", " + std::to_string(current.offloads) + " offloads (" +
                                           format_bytes(current.offloaded_bytes) + "), " +
                                           std::to_string(current.offload_restores) + " restored")
                                              .c_str(),
                  current.hashed_bytes == 0 ? ""
                                            : (", " + format_bytes(current.hashed_bytes) + " hashed, " +
                                               format_bytes(current.copied_bytes) + " copied, " +
                                               std::to_string(current.unseen_writes) + " unseen writes")
                                                  .c_str());
    log_info(line);
  }
  ++iteration_index;

  switch (st) {
    case engine_state::disabled: break;
    case engine_state::trace:
      if (++traced_iterations >= static_cast<std::size_t>(opts.config.trace_iterations)) {
        traced_iterations = 0;
        const auto planning_started = std::chrono::steady_clock::now();
        try {
          build_plan_from_trace();
        } catch (const std::exception& e) {
          plan_error = e.what();
          have_plan = false;
          log_warn(std::string("planning failed: ") + e.what() + "; continuing without eviction");
        }
        plan_cost.planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - planning_started).count();
        if (have_plan) {
          st = opts.config.validate == validate_mode::off ? engine_state::steady : engine_state::validate;
        } else {
          st = engine_state::steady;  // plain caching: nothing scheduled
          // The traced iterations' cache was shaped by their evictable placements and
          // offloading (dedicated segments of exact sizes); plain caching places the same
          // requests in shared segments and would map those beside it. Start it afresh.
          alloc.empty_cache();
        }
      } else {
        // The last traced iteration is planned from; the earlier ones only contribute
        // the parameter slots their kernels were seen writing through.
        try {
          tracer::trace earlier = rec.take();
          rec.mark_iteration();  // the next trace opens with its marker too
          tracer::analysis_options ao;
          ao.granularity = alloc.granularity();
          ao.known_writing_slots = earlier_writing_slots;
          earlier_writing_slots =
              tracer::analyse(earlier, tracer::event_range{0, earlier.events.size()}, ao).writing_slots;
        } catch (const std::exception& e) {
          log_warn(std::string("analysis of an earlier traced iteration failed: ") + e.what());
        }
      }
      break;
    case engine_state::validate:
    case engine_state::steady:
      if (diverged) {
        st = engine_state::trace;
        have_plan = false;
        alloc.set_budget(0);
        alloc.empty_cache();  // the traced peak must not count the old shape's cache
        earlier_writing_slots.clear();
        rec.start();
        rec.mark_iteration();
      } else if (current.validation_mismatches > 0 || never_evict_allocs.size() != never_evict_at_begin ||
                 current.budget_lifted) {
        // A lifted budget re-plans with the whole traced cache (scaled_refused); without a
        // plan the engine runs plain caching from here on.
        const auto planning_started = std::chrono::steady_clock::now();
        make_plan(reports.empty() ? 0 : std::max(max_traced_peak(), planning_peak));
        plan_cost.planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - planning_started).count();
        if (!have_plan) {
          st = engine_state::steady;
          alloc.empty_cache();
        } else {
          st = engine_state::validate;
        }
      } else if (st == engine_state::validate && opts.config.validate == validate_mode::first) {
        st = engine_state::steady;
      }
      break;
  }
  begin_iteration();
}

std::size_t engine::impl::max_traced_peak() const {
  std::size_t peak = 0;
  for (const auto& r : reports)
    if (r.state == engine_state::trace) peak = std::max(peak, r.peak_mapped);
  return peak;
}

// ---- retention (Note [Retention] in policy/retention.hpp) ------------------------------

// Whether the program's free of `ptr` is deferred: a retained buffer freed before its
// release point.
bool engine::impl::hold(const void* ptr) {
  if (!active() || held.empty()) return false;
  auto it = buffer_at.find(ptr);
  if (it == buffer_at.end()) return false;
  const buffer_id b = it->second;
  if (retain_until[b] == none || pos >= retain_until[b] || evicted[b]) return false;
  held[b] = 1;
  ++held_count;
  ++current.retained;
  return true;
}

// Frees the held buffers due before launch `at` (none: every one).
void engine::impl::release_held(launch_id at) {
  if (held_count == 0) return;
  const auto release = [&](buffer_id b) {
    if (!held[b]) return;
    held[b] = 0;
    --held_count;
    char* p = addr[b];
    {
      engine_scope scope;  // this free is the engine's: on_free and defer_free leave it alone
      alloc.deallocate(p);
    }
    forget_freed(p);
    if (opts.record_timeline) note_block(timeline_event::kind::release, dev.now_s(), p, graph().buffers[b].size, {});
  };
  if (at != none) {
    if (at < release_at.size())
      for (buffer_id b : release_at[at]) release(b);
    return;
  }
  for (buffer_id b = 0; b < held.size() && held_count > 0; ++b) release(b);
}

// The program's view of a freed block, for the plan's bookkeeping.
void engine::impl::forget_freed(const void* ptr) {
  if (!have_plan) return;
  auto it = buffer_at.find(ptr);
  if (it == buffer_at.end()) return;
  const buffer_id b = it->second;
  buffer_at.erase(it);
  if (b < freed.size()) {
    drop_offload(b);
    freed[b] = 1;
    if (evicted[b]) evicted_ranges.erase(addr[b]);
    backups.erase(b);
    input_copies.erase(b);
  }
}

// ---- divergence -----------------------------------------------------------------------

void engine::impl::diverge(const std::string& why) {
  if (diverged) return;
  diverged = true;
  current.divergence = why;
  restore_all_pending = true;
  // Without a plan for what comes next a budget given as a multiple cannot be kept: lift
  // it for the rest of this iteration (the next one is traced unbudgeted and planned
  // again). An absolute budget holds: what does not fit is offloaded as while tracing
  // (Note [Offloading the traced iteration]).
  if (trace_budget_bytes == 0) alloc.set_budget(0);
  log_info("iteration " + std::to_string(iteration_index) + " diverged from the trace (" + why +
           "); regenerating evicted buffers and tracing again");
}

// ---- interception ---------------------------------------------------------------------

void engine::impl::flush_memory_op() {
  if (!memory_op_pending) return;
  memory_op_pending = false;
  after(pending_op);
}

void engine::impl::before(const launch_view& op) {
  flush_memory_op();
  touch_and_restore(op, op.stream);
  if (!have_plan || (st != engine_state::validate && st != engine_state::steady)) return;
  settle_needed_releases(op);  // Note [Unsettled releases]
  settle_write_checks(false);
  if (restore_all_pending) restore_everything(op.stream);
  if (!diverged) {
    if (pos >= expected_handle.size()) {
      diverge("more launches than the traced iteration");
    } else if (expected_handle[pos] != handle_of(op)) {
      diverge("launch " + std::to_string(pos) + " is not the traced kernel");
    }
    if (diverged) restore_everything(op.stream);
  }
  if (diverged) {
    release_held(none);  // after restore_everything, whose recipes may read them
  } else {
    release_held(pos);
    offloads_before(op.stream);  // Note [Offload execution]
    for (std::size_t i : restore_at[pos]) regenerate(i, op.stream);
    fetches_needed(op.stream);  // after the recipes, as Note [Link timeline] orders them
    if (opts.prefetch_launches > 0) prefetch(op.stream);
  }
  static const bool debug_launches = std::getenv("SUBLINEAR_DEBUG_LAUNCHES") != nullptr;
  if (debug_launches && pos < expected_handle.size())
    log_debug("launch " + launch_name(pos));
  fetch_touched(op);
  regenerate_touched(op);
  if (!diverged) observe_before(op);  // Note [Unseen writes]
  if (!diverged && saved_needed[pos]) {
    saved_op& so = saved[pos];
    so.present = true;
    so.view = op;
    so.params.assign(op.params.begin(), op.params.end());
    so.view.params = so.params;
    so.attributes.assign(op.attributes.begin(), op.attributes.end());
    so.view.attributes = so.attributes;
    const auto& touched = graph().launches[pos].touched;
    so.input_versions.resize(touched.size());
    for (std::size_t i = 0; i < touched.size(); ++i) so.input_versions[i] = version[touched[i]];
  }
}

void engine::impl::after(const launch_view& op) {
  if (opts.record_timeline) note(timeline_event::kind::memory, dev.now_s(), 0, {});
  if (!have_plan || (st != engine_state::validate && st != engine_state::steady)) return;
  if (!diverged && pos < graph().launches.size()) {
    for (buffer_id w : graph().launches[pos].written) {
      ++version[w];
      last_write[w] = static_cast<launch_id>(pos);
    }
    observe_after(op);  // Note [Unseen writes]
    for (std::size_t i : evict_at[pos]) evict(i, op.stream);
    for (std::size_t i : copy_out_after[pos]) start_offload(i, op.stream);
  }
  ++pos;
}

// ---- public shell ----------------------------------------------------------------------------

engine::engine(allocator::caching_allocator& alloc, replay_device& device, tracer::recorder& recorder,
               engine_options options)
    : impl_(std::make_unique<impl>(alloc, device, recorder, std::move(options))) {
  if (impl_->opts.config.disable) return;
  if (const auto& spec = impl_->opts.config.budget; spec && impl_->opts.budget_traced_iterations) {
    // Note [Offloading the traced iteration]: only a budget known before the trace holds
    // during it. One that cannot be resolved yet ("%" without a known capacity) is
    // reported when the plan is made.
    try {
      if (spec->form != policy::budget_spec::kind::peak_fraction)
        impl_->trace_budget_bytes = policy::resolve_budget(*spec, impl_->opts.device_capacity, 0);
    } catch (const config_error&) {
      impl_->trace_budget_bytes = 0;
    }
  }
  use_engine_allocator_settings(alloc);
  recorder.set_next(this);
  impl_->previous_observer = alloc.set_observer(&recorder);
  // Blocks allocated before the engine existed (parameters, optimizer state) must be known
  // to the pointer scan, or launches would seem not to touch them.
  // They hold data: not filled (Note [Filled fresh blocks]).
  impl_->announcing_live_blocks = true;
  for (const auto& b : alloc.live_blocks()) recorder.on_allocate(b.base, b.requested, b.stream, b.evictable);
  impl_->announcing_live_blocks = false;
  alloc.set_pressure_handler([m = impl_.get()](std::size_t shortfall) {
    std::lock_guard lock(m->mutex);
    engine_scope scope;
    return m->relieve(shortfall);
  });
  alloc.set_overrun_handler([m = impl_.get()](const out_of_memory& error) {
    std::lock_guard lock(m->mutex);
    return m->overrun(error);
  });
  alloc.empty_cache();  // the traced peak counts what the iteration needs, not an old cache
  recorder.start();
  recorder.mark_iteration();  // each trace opens with a marker, so a trace file is self-contained
  impl_->begin_iteration();
}

void engine::log(log_level level, const std::string& line) const {
  switch (level) {
    case log_level::error: impl_->log_out->write("sublinear: " + line); break;
    case log_level::warn: impl_->log_warn(line); break;
    case log_level::info: impl_->log_info(line); break;
    case log_level::debug: impl_->log_debug(line); break;
  }
}

engine::~engine() {
  if (impl_->st == engine_state::disabled) return;
  impl_->alloc.set_pressure_handler({});
  impl_->alloc.set_overrun_handler({});
  try {
    std::lock_guard lock(impl_->mutex);
    impl_->release_held(none);  // the program freed them: free them now
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear: cannot free a retained block at shutdown: %s\n", e.what());
  }
  // Blocks still offloaded (state created while tracing and not touched since) must hold
  // their bytes for the program once the engine is gone.
  for (auto& [base, t] : impl_->blocks) {
    if (!t.offloaded) continue;
    try {
      engine_scope scope;
      impl_->alloc.restore(const_cast<char*>(base));
      impl_->dev.upload(const_cast<char*>(base), t.host.data(), t.size, t.stream);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sublinear: cannot restore an offloaded block at shutdown: %s\n", e.what());
    }
  }
  impl_->alloc.set_observer(impl_->previous_observer);
  impl_->rec.set_next(nullptr);
  use_engine_allocator_settings(impl_->alloc, false);
}

void use_engine_allocator_settings(allocator::caching_allocator& alloc, bool on) {
  alloc.set_exact_large_segments(on);
  alloc.set_exact_small_segments(on);
  alloc.set_segment_trim(on);
}

namespace {

// Adds the host time from its construction to its destruction to the iteration's
// engine_s. Made after the engine's lock is taken, so it ends before the lock is released
// and the iteration cannot end in between.
//
// Note [Interception cost]
// Rationale: with nothing evicted (a budget of twice the traced peak) every iteration
//   still pays the engine's launch hooks; that cost must be visible per launch, so that
//   a slowdown can be split between the engine, CUPTI and the allocator, together with
//   the VMM calls a planned iteration makes (each costs tens of microseconds on a GPU).
// Approach: a launch hook's clock also adds its time to launch_hooks_s and counts the
//   launch; the report divides (launch_hook_ns); vmm_calls is the difference of the
//   allocator's VMM call counters over the iteration.
// Limitations: two clock reads per hook are part of what is measured; time in CUPTI and
//   the driver before the hook runs is not (the GPU suite measures it against a baseline).
// It also marks the iteration's first call into the engine (Note [Predicted iteration
// time] in iteration_time.hpp).
class hook_clock {
 public:
  hook_clock(replay_device& dev, iteration_report& it, double& first_call_s, bool launch = false)
      : dev_(dev), it_(it), t0_(dev.now_s()), launch_(launch) {
    if (first_call_s < 0.0) first_call_s = t0_;
  }
  ~hook_clock() {
    const double dt = dev_.now_s() - t0_;
    it_.engine_s += dt;
    if (launch_) it_.launch_hooks_s += dt;
  }
  hook_clock(const hook_clock&) = delete;
  hook_clock& operator=(const hook_clock&) = delete;

 private:
  replay_device& dev_;
  iteration_report& it_;
  double t0_;
  bool launch_;
};

}  // namespace

void engine::before_launch(const launch_view& op) {
  if (inside_engine) return;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current, impl_->first_call_s, true);
  ++impl_->current.launches;
  engine_scope scope;
  if (op.what != launch_view::kind::kernel) {
    impl_->before(op);
    impl_->pending_op = op;
    impl_->pending_op.params = {};
    impl_->memory_op_pending = true;  // its EXIT is the next interception (Note [Replay at the launch])
    return;
  }
  impl_->before(op);
}

void engine::after_launch(const launch_view& op) {
  if (inside_engine || op.what != launch_view::kind::kernel) return;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current, impl_->first_call_s, true);
  engine_scope scope;
  impl_->after(op);
}

void engine::mark_iteration() {
  std::lock_guard lock(impl_->mutex);
  engine_scope scope;
  if (impl_->st != engine_state::disabled) impl_->rec.mark_iteration();
  impl_->end_iteration();
}

bool engine::place_evictable(std::size_t size, device::stream_handle) {
  if (inside_engine) return false;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current, impl_->first_call_s);
  auto& m = *impl_;
  // Tracing (or diverged) under an absolute budget: whole pages, so that offloading gives
  // them back.
  if (m.trace_budget_bytes > 0 && (m.st == engine_state::trace || m.diverged)) return size >= m.alloc.granularity();
  if (!m.active()) return false;
  if (m.alloc_count >= m.transient_buffers.size()) {
    m.diverge("more allocations than the traced iteration");
    return false;
  }
  const buffer_id b = m.transient_buffers[m.alloc_count];
  if (m.graph().buffers[b].size != size) {
    m.diverge("allocation " + std::to_string(m.alloc_count) + " has size " + std::to_string(size) + ", traced " +
              std::to_string(m.graph().buffers[b].size));
    return false;
  }
  return m.buffer_evictable[b] != 0;
}

std::optional<allocator::pack_slot> engine::pack_slot_for(std::size_t size, device::stream_handle) {
  if (inside_engine) return std::nullopt;
  std::lock_guard lock(impl_->mutex);
  auto& m = *impl_;
  // Called right after place_evictable said yes for this allocation: the same buffer.
  if (!m.active() || m.alloc_count >= m.transient_buffers.size()) return std::nullopt;
  const buffer_id b = m.transient_buffers[m.alloc_count];
  if (m.graph().buffers[b].size != size || b >= m.pack_of.size() || m.pack_of[b] == none) return std::nullopt;
  // Keys are unique across iterations: a pack's segment goes once its members are freed.
  allocator::pack_slot slot;
  slot.key = (static_cast<std::uint64_t>(m.iteration_index + 1) << 32) | (m.pack_of[b] + 1);
  slot.bytes = m.plan.packs[m.pack_of[b]].bytes;
  slot.offset = m.pack_offset[b];
  return slot;
}

void engine::on_allocate(void* ptr, std::size_t size, device::stream_handle stream, bool evictable) {
  if (inside_engine) return;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current, impl_->first_call_s);
  auto& m = *impl_;
  m.flush_memory_op();
  if (m.opts.fill_fresh_blocks && !m.announcing_live_blocks && ptr != nullptr && size > 0 &&
      m.st == engine_state::trace) {
    // The fill waits for its stream: drained first, the clock counts the fill alone
    // (Note [Predicted iteration time]).
    m.dev.synchronize(stream);
    const double t0 = m.dev.now_s();
    m.dev.fill(ptr, tracer::fresh_fill_byte, size, stream);  // Note [Filled fresh blocks]
    m.current.observation_s += m.dev.now_s() - t0;
  }
  // Under an absolute budget every live block is known, so that a diverged iteration can
  // offload too (Note [Offloading the traced iteration]).
  if (m.trace_budget_bytes > 0 && ptr != nullptr) {
    auto& t = m.blocks[static_cast<const char*>(ptr)];
    t = {};
    t.size = size;
    t.stream = stream;
    t.evictable = evictable;
    t.last_touch = m.launch_clock;
    m.sample_unoffloaded_peak();
  }
  if (m.opts.record_timeline) m.note_block(timeline_event::kind::allocate, m.dev.now_s(), ptr, size, {});
  if (!m.active() || m.alloc_count >= m.transient_buffers.size()) return;
  const buffer_id b = m.transient_buffers[m.alloc_count++];
  if (m.graph().buffers[b].size != size) return;  // place_evictable already diverged
  m.addr[b] = static_cast<char*>(ptr);
  m.buffer_at[ptr] = b;
  if (m.buffer_evictable[b] != 0 && !evictable && ptr != nullptr) {
    // No room for its own pages even after the valve: the allocator placed it in a shared
    // segment, so it stays resident this iteration (Note [Pressure valve]).
    m.kept_resident[b] = 1;
    ++m.current.kept_resident;
    m.log_info("iteration " + std::to_string(m.iteration_index) + ": buffer " + std::to_string(b) + " (" +
               format_bytes(size) + ") found no room for pages of its own; kept resident in a shared segment");
  }
}

void engine::on_free(void* ptr, std::size_t size, device::stream_handle) {
  if (inside_engine) return;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current, impl_->first_call_s);
  auto& m = *impl_;
  m.flush_memory_op();
  if (m.opts.record_timeline) m.note_block(timeline_event::kind::release, m.dev.now_s(), ptr, size, {});
  if (auto t = m.blocks.find(static_cast<const char*>(ptr)); t != m.blocks.end()) {
    if (t->second.offloaded) {  // its host copy goes with it
      --m.offloaded_live;
      m.traced_offload_bytes -= t->second.size;
    }
    m.blocks.erase(t);
  }
  m.forget_freed(ptr);
}

bool engine::defer_free(void* ptr, std::size_t, device::stream_handle) {
  if (inside_engine || !impl_->retaining.load(std::memory_order_relaxed)) return false;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current, impl_->first_call_s);
  impl_->flush_memory_op();
  return impl_->hold(ptr);
}

engine_state engine::state() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->st;
}

std::vector<iteration_report> engine::iterations() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->reports;
}

std::vector<eviction_record> engine::evictions() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<eviction_record> out;
  for (const auto& [idx, r] : impl_->records) out.push_back(r);
  return out;
}

std::vector<timeline_event> engine::timeline() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->timeline;
}

std::string engine::plan_error() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->plan_error;
}

std::size_t engine::budget() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->budget_bytes;
}

std::size_t engine::predicted_peak() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->have_plan ? impl_->plan.predicted_peak : 0;
}

std::size_t engine::planned_recomputed_launches() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->have_plan ? impl_->plan.recomputed_launches : 0;
}

std::size_t engine::planning_mapped_peak() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->plan_mapped_peak;
}

policy::cache_allowance_mode engine::plan_allowance() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->allowance;
}

engine::plan_compute engine::planned_compute() const {
  std::lock_guard lock(impl_->mutex);
  if (impl_->have_plan) return impl_->plan_cost;
  plan_compute none_made;  // the time spent finding there is none is still the program's
  none_made.planning_s = impl_->plan_cost.planning_s;
  return none_made;
}

engine::plan_time engine::predicted_time() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->have_plan ? impl_->plan_time : plan_time{};
}

}  // namespace sublinear::runtime
