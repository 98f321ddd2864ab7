// The replay engine's state machine (Note [Iteration lifecycle], Note [Replay at the
// launch] in engine.hpp). Type map:
//
//   schedule      : the plan turned into per-position lists (evict after, restore before)
//   live          : per buffer, this iteration's address and whether the engine evicted it
//   saved_op      : a launch of this iteration that some recipe replays, with its bytes
//   backup        : validation's host copy of an evicted buffer
//   uses, writers : per buffer, the traced launches touching / writing it (the valve's
//                   look-ahead, Note [Pressure valve])
//   tracked_block : per live block under an absolute budget: its last touch while tracing,
//                   its host copy while offloaded (Note [Offloading the traced iteration])
#include "common/text.hpp"
#include "runtime/engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "policy/budget.hpp"
#include "policy/planner.hpp"
#include "policy/planning_overhead.hpp"
#include "policy/recompute_floor.hpp"
#include "policy/simulator.hpp"
#include "tracer/analysis.hpp"
#include "tracer/block_hashes.hpp"
#include "tracer/recorder.hpp"
#include "tracer/trace_file.hpp"

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

struct saved_op {
  bool present = false;
  launch_view view;
  std::vector<std::byte> params;  // view.params points here
  std::vector<std::uint64_t> input_versions;  // versions of touched buffers at the original launch
};

}  // namespace

struct engine::impl {
  allocator::caching_allocator& alloc;
  replay_device& dev;
  tracer::recorder& rec;
  engine_options opts;
  allocation_observer* previous_observer = nullptr;

  mutable std::recursive_mutex mutex;
  engine_state st = engine_state::trace;
  std::size_t traced_iterations = 0;  // in the current TRACE phase
  std::size_t iteration_index = 0;
  double iteration_started_s = 0.0;

  // ---- the plan -----------------------------------------------------------------------
  bool have_plan = false;
  std::string plan_error;
  // The cache allowance the plan was made with, and whether the scaled one ran out of room
  // in a planned iteration (then only the traced one is tried again; Note [Scaled cache
  // allowance]).
  policy::cache_allowance_mode allowance = policy::cache_allowance_mode::traced;
  bool scaled_refused = false;
  tracer::analysed_iteration an;
  policy::plan plan;
  std::size_t budget_bytes = 0;
  std::vector<std::uint32_t> transient_buffers;          // k-th allocation of an iteration -> buffer
  std::vector<std::uint8_t> buffer_evictable;            // buffer -> placed evictable
  std::vector<std::uint32_t> pack_of;                    // buffer -> plan.packs index, or none (Note [Packs])
  std::vector<std::size_t> pack_offset;                  // buffer -> its offset in that pack
  std::vector<std::vector<std::size_t>> evict_at;        // position -> plan entries
  std::vector<std::vector<std::size_t>> restore_at;      // position -> plan entries
  std::vector<std::int32_t> entry_of;                    // buffer -> plan entry carrying it, or -1
  std::vector<std::uint8_t> saved_needed;                // position -> a recipe replays it
  std::vector<std::uint64_t> expected_handle;            // position -> kernel handle (or ~kind)
  std::unordered_set<std::uint32_t> never_evict_allocs;  // alloc_index values that failed validation
  std::unordered_set<std::string> unreplayable_kernels;  // kernels whose replay the device refused
  std::unordered_set<buffer_id> regenerating;            // targets of the recipes running now
  std::vector<std::pair<std::uint32_t, std::uint32_t>> earlier_writing_slots;  // from earlier traced iterations
  std::vector<std::vector<launch_id>> uses;              // buffer -> launches touching it, ascending
  std::vector<std::vector<launch_id>> writers;           // buffer -> launches writing it, ascending
  // Note [Retention] (policy/retention.hpp): the plan's retentions are applied to
  // an.graph once it is planned; these restore the traced lifetimes before planning again.
  std::vector<std::pair<buffer_id, launch_id>> traced_free_at;
  // Whether the plan retains anything: every free asks defer_free, and without retentions
  // the answer needs no lock.
  std::atomic<bool> retaining{false};
  std::vector<launch_id> retain_until;                   // buffer -> release_before, or none
  std::vector<std::vector<buffer_id>> release_at;        // position -> retained buffers freed there

  // ---- this iteration -------------------------------------------------------------------
  std::size_t pos = 0;
  std::size_t alloc_count = 0;
  bool diverged = false;
  bool restore_all_pending = false;
  bool memory_op_pending = false;
  launch_view pending_op;
  std::vector<char*> addr;                               // buffer -> address this iteration
  std::vector<std::uint8_t> evicted;                     // buffer -> evicted by the engine
  std::vector<std::uint8_t> freed;                       // buffer -> freed this iteration
  std::vector<std::uint8_t> kept_resident;               // buffer -> planned evictable, placed shared this iteration
  std::uint64_t waits_at_begin = 0;                      // the allocator's budget + release waits when it began
  std::uint64_t handoffs_at_begin = 0;                   // and its handoffs
  std::uint64_t pack_members_at_begin = 0;               // and its pack members
  std::vector<std::uint8_t> held;                        // buffer -> freed by the program, kept by the engine
  std::size_t held_count = 0;                            // of `held`: set now
  std::vector<std::int32_t> active_entry;                // buffer -> the entry that evicted it (dtr may
                                                         // evict a buffer more than once)
  std::unordered_map<const void*, buffer_id> buffer_at;  // live address -> buffer
  std::map<const char*, buffer_id> evicted_ranges;       // for the safety-net scan
  std::vector<saved_op> saved;                           // position -> saved launch
  std::vector<std::uint64_t> version;                    // buffer -> writes so far
  std::vector<launch_id> last_write;                     // buffer -> last launch this iteration that wrote it
  std::vector<std::uint32_t> pins;                       // buffer -> regenerations in progress that need it
  bool prefetching = false;                              // inside prefetch(): the valve stays shut
  std::size_t prefetch_scan = 0;                         // next position whose restores prefetch looks at
  std::unordered_map<buffer_id, std::vector<std::byte>> backups;
  iteration_report current;

  // ---- offloading while tracing (Note [Offloading the traced iteration]) ---------------------
  struct tracked_block {
    std::size_t size = 0;  // bytes the program asked for
    device::stream_handle stream = nullptr;
    bool evictable = false;
    bool offloaded = false;
    std::uint64_t last_touch = 0;  // launch_clock of the last launch touching it
    std::vector<std::byte> host;   // its bytes while offloaded
  };
  std::size_t trace_budget_bytes = 0;        // the absolute budget (0: trace unbudgeted)
  std::map<const char*, tracked_block> blocks;  // live blocks, by base (only with trace_budget_bytes)
  std::size_t offloaded_live = 0;            // of `blocks`: offloaded now
  std::uint64_t launch_clock = 0;
  bool announcing_live_blocks = false;  // the engine's constructor tells the recorder of them
  std::vector<const char*> entering;         // blocks the launch entering now touches
  std::size_t unoffloaded_peak = 0;          // this iteration's peak had nothing been offloaded
  std::size_t planning_peak = 0;             // the last traced iteration's, for the overhead
  std::size_t plan_mapped_peak = 0;          // what the last make_plan took the overhead from
  engine::plan_compute plan_cost;            // the current plan's added compute and its floor

  std::vector<iteration_report> reports;
  std::vector<timeline_event> timeline;
  double started_s = 0.0;

  void note(timeline_event::kind what, double begin, std::size_t bytes, std::string label) {
    if (!opts.record_timeline || timeline.size() >= opts.timeline_limit) return;
    auto s = alloc.get_stats();
    timeline_event e;
    e.what = what;
    e.begin_s = begin - started_s;
    e.end_s = dev.now_s() - started_s;
    e.bytes = bytes;
    e.mapped = s.mapped;
    e.allocated = s.allocated;
    e.label = std::move(label);
    timeline.push_back(std::move(e));
  }
  // A block's event (allocate, release, evict, regenerate) with its address: the PyTorch
  // memory snapshot is drawn from these (report_snapshot.cpp).
  void note_block(timeline_event::kind what, double begin, const void* address, std::size_t bytes,
                  std::string label) {
    const std::size_t before = timeline.size();
    note(what, begin, bytes, std::move(label));
    if (timeline.size() > before) timeline.back().address = reinterpret_cast<std::uintptr_t>(address);
  }
  std::map<std::uint32_t, eviction_record> records;      // alloc_index -> record

  impl(allocator::caching_allocator& a, replay_device& d, tracer::recorder& r, engine_options o)
      : alloc(a), dev(d), rec(r), opts(std::move(o)) {
    if (opts.config.disable) st = engine_state::disabled;
    iteration_started_s = started_s = dev.now_s();
    if (opts.config.log >= log_level::debug)
      std::fprintf(stderr, "sublinear: effective configuration:\n%s", describe(opts.config).c_str());
  }

  // ---- helpers --------------------------------------------------------------------------
  static std::uint64_t handle_of(const launch_view& op) {
    switch (op.what) {
      case launch_view::kind::kernel: return op.kernel_handle;
      case launch_view::kind::memcpy: return ~std::uint64_t{1};
      case launch_view::kind::memset: return ~std::uint64_t{2};
    }
    return 0;
  }

  const policy::iteration& graph() const { return an.graph; }

  void log_info(const std::string& line) const {
    if (opts.config.log >= log_level::info) std::fprintf(stderr, "sublinear: %s\n", line.c_str());
  }
  void log_debug(const std::string& line) const {
    if (opts.config.log >= log_level::debug) std::fprintf(stderr, "sublinear: debug: %s\n", line.c_str());
  }
  std::string launch_name(launch_id l) const {
    const auto& ev = recorded_event(l);
    return "#" + std::to_string(l) + ":" +
           (ev.kind == tracer::event_kind::launch ? kept_trace.kernels[ev.kernel].name : tracer::to_string(ev.kind));
  }
  void log_plan() const {
    if (opts.config.log < log_level::debug) return;
    for (const auto& e : plan.evictions) {
      std::string line = "evict buffer " + std::to_string(e.target) + " (" + format_bytes(graph().buffers[e.target].size) +
                         ") after " + launch_name(e.evict_after) + ", back before " + launch_name(e.restore_before) +
                         "; recipe:";
      for (launch_id l : e.recipe) line += " " + launch_name(l);
      line += "; temporaries:";
      for (buffer_id t : e.temporaries) line += " " + std::to_string(t);
      line += "; also:";
      for (buffer_id t : e.also_regenerates) line += " " + std::to_string(t);
      log_debug(line);
    }
  }
  void log_warn(const std::string& line) const {
    if (opts.config.log >= log_level::warn) std::fprintf(stderr, "sublinear: warning: %s\n", line.c_str());
  }

  // ---- planning -------------------------------------------------------------------------
  void build_plan_from_trace() {
    kept_trace = rec.take();
    rec.stop();
    if (kept_trace.events.empty()) throw config_error("sublinear: the traced iteration recorded no events");
    if (!opts.config.trace.empty()) {
      try {
        tracer::write_trace_file(kept_trace, opts.config.trace);
        log_info("trace of the planned iteration written to " + opts.config.trace);
      } catch (const std::exception& e) {
        log_warn(std::string("SUBLINEAR_TRACE: ") + e.what());
      }
    }
    tracer::analysis_options ao;
    ao.granularity = alloc.granularity();
    ao.known_writing_slots = earlier_writing_slots;
    an = tracer::analyse(kept_trace, tracer::event_range{0, kept_trace.events.size()}, ao);
    const std::size_t traced_peak = std::max(alloc.get_stats().mapped_peak, unoffloaded_peak);
    planning_peak = traced_peak;
    log_info("traced iteration: " + std::to_string(an.graph.launches.size()) + " launches (" +
             std::to_string(an.observed_launches) + " with observed writes, " + std::to_string(an.timed_launches) +
             " timed), " + std::to_string(an.graph.buffers.size()) + " buffers, " +
             std::to_string(an.graph.candidates.size()) + " candidate activations, live peak " +
             format_bytes(an.graph.peak_bytes) + " at launch " + std::to_string(an.graph.turning_point) +
             ", mapped peak " + format_bytes(traced_peak));
    if (!an.unproduced.empty()) {
      std::size_t bytes = 0;
      for (buffer_id b : an.unproduced) bytes += an.graph.buffers[b].size;
      log_info(std::to_string(an.unproduced.size()) + " buffers (" + format_bytes(bytes) +
               ") are read before any observed write: their producer is unknown and they are never evicted "
               "(`sublinear plan` on SUBLINEAR_TRACE's file lists them)");
    }
    make_plan(traced_peak);
  }

  void make_plan(std::size_t traced_peak) {
    plan_mapped_peak = traced_peak;
    have_plan = false;
    plan = {};
    plan_cost = {};
    plan_error.clear();
    budget_bytes = 0;
    auto& g = an.graph;
    for (const auto& [b, f] : traced_free_at) g.buffers[b].free_at = f;
    traced_free_at.clear();
    retaining = false;
    for (auto& b : g.buffers)
      if (b.alloc_index != none && never_evict_allocs.count(b.alloc_index) != 0) b.never_evict = true;
    if (!unreplayable_kernels.empty()) {
      for (auto& l : g.launches)
        if (l.kernel < g.kernel_names.size() && unreplayable_kernels.count(g.kernel_names[l.kernel]) != 0)
          l.replayable = false;
    }
    if (!opts.config.budget) {
      plan_error = "no budget set (SUBLINEAR_BUDGET)";
      return;
    }
    budget_bytes = policy::resolve_budget(*opts.config.budget, opts.device_capacity, traced_peak);
    // The planner counts live bytes at page granularity; the allocator's mapped bytes also
    // hold what its caching costs.
    const policy::traced_memory tm = policy::traced_memory_of(g, traced_peak);
    allowance = policy::cache_allowance_mode::traced;
    std::size_t overhead = policy::planning_overhead(budget_bytes, tm);
    const auto make = [&](std::size_t planner_overhead) {
      policy::planner::options po;
      po.retention = opts.config.retention;
      po.multi_pass = opts.config.multi_pass;
      po.packs = opts.config.packs;
      return policy::make_planner(opts.config.policy)
          ->make_plan(g, budget_bytes > planner_overhead ? budget_bytes - planner_overhead : 0, po);
    };
    const auto give_up = [&](const std::string& why) {
      plan_error = why;
      log_warn(plan_error + " Continuing without eviction (plain caching).");
      budget_bytes = 0;
      alloc.set_budget(0);
    };
    const std::string infeasible = "sublinear: budget " + format_bytes(budget_bytes) + " (" + opts.config.budget->text +
                                   ") is infeasible for planner '" + opts.config.policy + "'";
    try {
      plan = make(overhead);
    } catch (const policy::infeasible_budget& traced_error) {
      // The planner speaks of the bytes it was given; the user set the whole budget.
      const std::string traced_smallest = format_bytes(policy::budget_for_planner_bytes(traced_error.smallest_feasible(), tm));
      // Again with the cache scaled to the budget (Note [Scaled cache allowance]), unless that
      // gives the planner no more (no cache traced, or a budget at the traced peak).
      const std::size_t scaled_cache = policy::cache_allowance(tm, budget_bytes, policy::cache_allowance_mode::scaled);
      const std::size_t scaled_overhead = policy::planning_overhead(budget_bytes, tm, policy::cache_allowance_mode::scaled) -
                                          scaled_cache +
                                          static_cast<std::size_t>(opts.scaled_cache_factor * static_cast<double>(scaled_cache));
      if (!opts.config.scaled_cache || scaled_refused || scaled_overhead >= overhead) {
        give_up(infeasible + ": the smallest feasible budget for it is " + traced_smallest + "; no plan can go below " +
                format_bytes(policy::budget_for_planner_bytes(traced_error.lower_bound(), tm)) +
                " (live buffers plus the allocator's overhead, " + format_bytes(overhead) + " here)" +
                (scaled_refused ? std::string(", and a plan with the cache allowance scaled to the budget ran out of "
                                              "room in a planned iteration (Note [Scaled cache allowance])")
                 : !opts.config.scaled_cache
                     ? std::string(" (SUBLINEAR_SCALED_CACHE=0: the allocator's whole traced cache is kept out of "
                                   "the budget)")
                     : std::string()) +
                ".");
        return;
      }
      overhead = scaled_overhead;
      try {
        plan = make(overhead);
      } catch (const policy::infeasible_budget& e) {
        const std::string scaled_smallest =
            format_bytes(policy::budget_for_planner_bytes(e.smallest_feasible(), tm, policy::cache_allowance_mode::scaled));
        give_up(infeasible + ": the smallest feasible budget for it is " + scaled_smallest +
                (scaled_smallest == traced_smallest
                     ? std::string()
                     : " with the allocator's cache scaled to the budget (" + traced_smallest +
                           " with the whole traced cache, which holds a budget strictly)") +
                "; no plan can go below " +
                format_bytes(policy::budget_for_planner_bytes(e.lower_bound(), tm, policy::cache_allowance_mode::scaled)) +
                " (live buffers plus the allocator's overhead, " + format_bytes(overhead) + " here).");
        return;
      }
      allowance = policy::cache_allowance_mode::scaled;
      log_warn("budget " + format_bytes(budget_bytes) + " is below the smallest the traced cache allows for planner '" +
               opts.config.policy + "' (" + traced_smallest + "): planning with the allocator's cache scaled to the "
               "budget. If a planned iteration still runs out of room, the rest of it runs without the budget and "
               "sublinear plans again with the whole cache (Note [Scaled cache allowance]).");
    }
    // How far the plan is from any plan at the same share (reported; planning is done).
    plan_cost.added_s = plan.added_compute_s;
    for (const auto& l : g.launches) plan_cost.traced_s += l.cost_s;
    const policy::recompute_floor floor =
        policy::find_recompute_floor(g, budget_bytes > overhead ? budget_bytes - overhead : 0);
    plan_cost.floor_s = floor.feasible ? floor.added_s : 0.0;  // a plan exists: it is feasible
    // From here on the engine's graph has the retained lifetimes: recipes, the valve's
    // checks and the simulator agree on them.
    for (const policy::retention& r : plan.retentions) {
      traced_free_at.emplace_back(r.buffer, g.buffers[r.buffer].free_at);
      g.buffers[r.buffer].free_at = r.release_before;
    }
    retaining = !plan.retentions.empty();
    index_plan();
    try {
      alloc.set_budget(budget_bytes);
    } catch (const out_of_memory& e) {
      plan_error = e.what();
      log_warn("cannot bring mapped memory under the budget: " + std::string(e.what()));
      budget_bytes = 0;
      have_plan = false;
      alloc.set_budget(0);
      return;
    }
    have_plan = true;
    log_plan();
    log_info("plan '" + plan.planner + "': " + std::to_string(plan.evictions.size()) + " evictions, budget " +
             format_bytes(budget_bytes) + ", predicted peak " + format_bytes(plan.predicted_peak) +
             ", added compute " + std::to_string(plan.added_compute_s) + " s");
  }

  void index_plan() {
    const auto& g = graph();
    const std::size_t n = g.launches.size();
    transient_buffers.clear();
    // Note [Recurring allocations]
    // Later iterations are matched against the traced one allocation by allocation, so the
    // list must hold exactly the allocations every iteration makes. Those freed within the
    // traced iteration recur. One allocated and not freed may be lazily created state
    // (optimizer moments, made once) or the iteration's batch or loss, which the program
    // holds until the next iteration allocates their successors and frees them: PyTorch's
    // loops do that, and taking those for state diverged every validation iteration of
    // ResNet-50 on the first GPU run. A carried-out allocation recurs when the traced
    // iteration also freed a carried-in block of its size (its predecessor); the rest is
    // state.
    std::multiset<std::size_t> carried_in_freed;
    for (const auto& buf : g.buffers) {
      if (buf.alloc_index == none && buf.free_at != none) carried_in_freed.insert(buf.size);
    }
    std::vector<std::pair<std::uint32_t, buffer_id>> by_alloc;
    for (buffer_id b = 0; b < g.buffers.size(); ++b) {
      const auto& buf = g.buffers[b];
      if (buf.alloc_index != none && buf.free_at != none) by_alloc.emplace_back(buf.alloc_index, b);
    }
    std::vector<std::pair<std::uint32_t, buffer_id>> carried_out;
    for (buffer_id b = 0; b < g.buffers.size(); ++b) {
      if (g.buffers[b].alloc_index != none && g.buffers[b].free_at == none) carried_out.emplace_back(g.buffers[b].alloc_index, b);
    }
    std::sort(carried_out.begin(), carried_out.end());
    for (const auto& [idx, b] : carried_out) {
      if (const auto it = carried_in_freed.find(g.buffers[b].size); it != carried_in_freed.end()) {
        carried_in_freed.erase(it);
        by_alloc.emplace_back(idx, b);
      }
    }
    std::sort(by_alloc.begin(), by_alloc.end());
    for (auto& [idx, b] : by_alloc) transient_buffers.push_back(b);
    buffer_evictable.assign(g.buffers.size(), 0);
    entry_of.assign(g.buffers.size(), -1);
    evict_at.assign(n + 1, {});
    restore_at.assign(n + 1, {});
    saved_needed.assign(n + 1, 0);
    for (std::size_t i = 0; i < plan.evictions.size(); ++i) {
      const auto& e = plan.evictions[i];
      buffer_evictable[e.target] = 1;
      if (entry_of[e.target] < 0 || !e.recipe.empty()) entry_of[e.target] = static_cast<std::int32_t>(i);
      if (e.evict_after < n) evict_at[e.evict_after].push_back(i);
      if (e.restore_before <= n && !e.recipe.empty()) restore_at[e.restore_before].push_back(i);
      for (launch_id l : e.recipe) saved_needed[l] = 1;
    }
    // Entries without a recipe are regenerated by the entry that lists them.
    for (std::size_t i = 0; i < plan.evictions.size(); ++i)
      for (buffer_id b : plan.evictions[i].also_regenerates)
        if (entry_of[b] < 0 || plan.evictions[static_cast<std::size_t>(entry_of[b])].recipe.empty())
          entry_of[b] = static_cast<std::int32_t>(i);
    pack_of.assign(g.buffers.size(), none);
    pack_offset.assign(g.buffers.size(), 0);
    if (opts.config.packs) {
      for (std::size_t j = 0; j < plan.packs.size(); ++j) {
        for (std::size_t i = 0; i < plan.packs[j].members.size(); ++i) {
          pack_of[plan.packs[j].members[i]] = static_cast<std::uint32_t>(j);
          pack_offset[plan.packs[j].members[i]] = plan.packs[j].offsets[i];
        }
      }
    }
    retain_until.assign(g.buffers.size(), none);
    release_at.assign(n + 1, {});
    for (const policy::retention& r : plan.retentions) {
      retain_until[r.buffer] = r.release_before;
      release_at[r.release_before].push_back(r.buffer);
    }
    uses.assign(g.buffers.size(), {});
    writers.assign(g.buffers.size(), {});
    for (launch_id l = 0; l < n; ++l) {
      for (buffer_id b : g.launches[l].touched) uses[b].push_back(l);
      for (buffer_id b : g.launches[l].written) writers[b].push_back(l);
    }
    expected_handle.assign(n, 0);
    for (launch_id l = 0; l < n; ++l) {
      const auto& ev = recorded_event(l);
      switch (ev.kind) {
        case tracer::event_kind::launch: expected_handle[l] = kernel_handle(ev); break;
        case tracer::event_kind::memcpy: expected_handle[l] = ~std::uint64_t{1}; break;
        default: expected_handle[l] = ~std::uint64_t{2}; break;
      }
    }
  }

  // The analysed iteration keeps indices into the trace it came from; keep that trace.
  tracer::trace kept_trace;
  const tracer::event& recorded_event(launch_id l) const { return kept_trace.events[an.launch_events[l]]; }
  std::uint64_t kernel_handle(const tracer::event& ev) const { return kept_trace.kernels[ev.kernel].handle; }

  // ---- iteration boundaries -----------------------------------------------------------------
  void begin_iteration() {
    pos = 0;
    alloc_count = 0;
    diverged = false;
    restore_all_pending = false;
    memory_op_pending = false;
    evicted_ranges.clear();
    backups.clear();
    buffer_at.clear();
    current = {};
    current.index = iteration_index;
    current.state = st;
    current.budget = budget_bytes;
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
    handoffs_at_begin = at_begin.handoffs;
    pack_members_at_begin = at_begin.pack_members;
    iteration_started_s = dev.now_s();
  }

  void end_iteration() {
    flush_memory_op();
    release_held(none);
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
    current.wall_s = dev.now_s() - iteration_started_s;
    current.diverged = diverged;
    reports.push_back(current);
    note(timeline_event::kind::iteration, iteration_started_s, current.peak_mapped, to_string(current.state));
    {
      char line[512];
      std::snprintf(line, sizeof line,
                    "iteration %zu [%s]: peak mapped %s%s%s, %zu evictions (%s), %zu recomputed launches, "
                    "recompute %.1f ms, stall %.1f ms%s%s",
                    current.index, to_string(current.state), format_bytes(current.peak_mapped).c_str(),
                    current.budget ? " of a " : "", current.budget ? (format_bytes(current.budget) + " budget").c_str() : "",
                    current.evictions, format_bytes(current.evicted_bytes).c_str(), current.recomputed_launches,
                    current.recompute_s * 1e3, current.stall_s * 1e3, diverged ? ", diverged" : "",
                    current.offloads == 0 ? ""
                                          : (", " + std::to_string(current.offloads) + " offloads (" +
                                             format_bytes(current.offloaded_bytes) + "), " +
                                             std::to_string(current.offload_restores) + " restored")
                                                .c_str());
      log_info(line);
    }
    ++iteration_index;

    switch (st) {
      case engine_state::disabled: break;
      case engine_state::trace:
        if (++traced_iterations >= static_cast<std::size_t>(opts.config.trace_iterations)) {
          traced_iterations = 0;
          try {
            build_plan_from_trace();
          } catch (const std::exception& e) {
            plan_error = e.what();
            have_plan = false;
            log_warn(std::string("planning failed: ") + e.what() + "; continuing without eviction");
          }
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
        } else if (current.validation_mismatches > 0 || current.budget_lifted) {
          // A lifted budget re-plans with the whole traced cache (scaled_refused); without a
          // plan the engine runs plain caching from here on.
          make_plan(reports.empty() ? 0 : std::max(max_traced_peak(), planning_peak));
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

  std::size_t max_traced_peak() const {
    std::size_t peak = 0;
    for (const auto& r : reports)
      if (r.state == engine_state::trace) peak = std::max(peak, r.peak_mapped);
    return peak;
  }

  bool active() const { return have_plan && !diverged && (st == engine_state::validate || st == engine_state::steady); }

  // ---- retention (Note [Retention]) -------------------------------------------------------------
  // Whether the program's free of `ptr` is deferred: a retained buffer freed before its
  // release point.
  bool hold(const void* ptr) {
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
  void release_held(launch_id at) {
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
  void forget_freed(const void* ptr) {
    if (!have_plan) return;
    auto it = buffer_at.find(ptr);
    if (it == buffer_at.end()) return;
    const buffer_id b = it->second;
    buffer_at.erase(it);
    if (b < freed.size()) {
      freed[b] = 1;
      if (evicted[b]) evicted_ranges.erase(addr[b]);
      backups.erase(b);
    }
  }

  // ---- divergence -----------------------------------------------------------------------------
  void diverge(const std::string& why) {
    if (diverged) return;
    diverged = true;
    current.divergence = why;
    restore_all_pending = true;
    // Without a plan for what comes next the budget cannot be kept: lift it for the rest
    // of this iteration (the next one is traced unbudgeted and planned again).
    alloc.set_budget(0);
    log_info("iteration " + std::to_string(iteration_index) + " diverged from the trace (" + why +
             "); regenerating evicted buffers and tracing again");
  }

  // ---- eviction and regeneration ------------------------------------------------------------------
  void evict(std::size_t entry_index, device::stream_handle stream) {
    evict_buffer(plan.evictions[entry_index].target, entry_index, stream, true);
  }

  // `planned`: at the plan's evict point (validation keeps a copy); otherwise the valve's.
  void evict_buffer(buffer_id b, std::size_t entry_index, device::stream_handle stream, bool planned) {
    if (addr[b] == nullptr || freed[b] || evicted[b] || kept_resident[b]) return;
    const std::size_t size = graph().buffers[b].size;
    if (planned && st == engine_state::validate) {
      auto& copy = backups[b];
      copy.resize(size);
      dev.download(copy.data(), addr[b], size, stream);
    }
    if (opts.config.log >= log_level::debug)
      log_debug("iteration " + std::to_string(iteration_index) + ": evict buffer " + std::to_string(b) + " at " +
              std::to_string(static_cast<const void*>(addr[b]) != nullptr ? reinterpret_cast<std::uintptr_t>(addr[b]) : 0) +
              " after launch " + std::to_string(pos));
    alloc.evict(addr[b]);
    evicted[b] = 1;
    active_entry[b] = static_cast<std::int32_t>(entry_index);
    evicted_ranges[addr[b]] = b;
    ++current.evictions;
    current.evicted_bytes += size;
    auto& r = record_for(b);
    ++r.times_evicted;
    note_block(timeline_event::kind::evict, dev.now_s(), addr[b], size, r.producer);
  }

  eviction_record& record_for(buffer_id b) {
    const auto& buf = graph().buffers[b];
    auto& r = records[buf.alloc_index];
    if (r.size == 0) {
      r.size = buf.size;
      auto p = an.producer.size() > b ? an.producer[b] : none;
      if (p != none) {
        const auto& ev = recorded_event(p);
        r.producer = ev.kind == tracer::event_kind::launch ? kept_trace.kernels[ev.kernel].name
                                                           : tracer::to_string(ev.kind);
      }
    }
    return r;
  }

  // Rewrites pointer words of `op` that point into a temporary's range to its scratch.
  static void patch(launch_view& op, std::vector<std::byte>& params,
                    const std::vector<std::pair<std::pair<const char*, std::size_t>, char*>>& moves) {
    auto moved = [&](std::uint64_t word, std::uint64_t* out) {
      for (const auto& [range, scratch] : moves) {
        auto base = reinterpret_cast<std::uint64_t>(range.first);
        if (word >= base && word < base + range.second) {
          *out = reinterpret_cast<std::uint64_t>(scratch) + (word - base);
          return true;
        }
      }
      return false;
    };
    if (moves.empty()) return;
    if (op.what == launch_view::kind::kernel) {
      for (std::size_t off = 0; off + 8 <= params.size(); off += 8) {
        std::uint64_t word = 0, to = 0;
        std::memcpy(&word, params.data() + off, 8);
        if (moved(word, &to)) std::memcpy(params.data() + off, &to, 8);
      }
      op.params = params;
    } else {
      std::uint64_t to = 0;
      if (moved(reinterpret_cast<std::uint64_t>(op.dst), &to)) op.dst = reinterpret_cast<void*>(to);
      if (op.src != nullptr && moved(reinterpret_cast<std::uint64_t>(op.src), &to))
        op.src = reinterpret_cast<const void*>(to);
    }
  }

  // Maps the entry's buffers back and replays its recipe on `stream`.
  // Keeps the buffers a regeneration needs out of the pressure valve's reach.
  struct pin_scope {
    std::vector<std::uint32_t>& pins;
    std::vector<buffer_id> held;
    pin_scope(std::vector<std::uint32_t>& p, const policy::iteration& g, const policy::eviction& e) : pins(p) {
      held.push_back(e.target);
      held.insert(held.end(), e.also_regenerates.begin(), e.also_regenerates.end());
      for (launch_id l : e.recipe) held.insert(held.end(), g.launches[l].touched.begin(), g.launches[l].touched.end());
      for (buffer_id b : held) ++pins[b];
    }
    ~pin_scope() {
      for (buffer_id b : held) --pins[b];
    }
    pin_scope(const pin_scope&) = delete;
    pin_scope& operator=(const pin_scope&) = delete;
  };

  // Note [Failed recipe]
  // A recipe can fail where it runs: the device refuses a replayed launch (on an H200 one
  // of PyTorch's ResNet-50 kernels was refused with CUDA_ERROR_INVALID_VALUE, and the
  // program saw CUDNN_STATUS_BAD_PARAM), an input changed since the original launch, or
  // two recipes need each other's targets. While validating, every buffer evicted at a
  // planned point has a copy of its bytes: the targets get them back, count as validation
  // mismatches (never evicted again), a refused kernel is left out of every later plan,
  // and the iteration goes on. Steady iterations run the recipes validation ran, so they
  // meet the same failures only if something changed; without a copy the bytes are gone
  // and the error says so. Out of memory is not a failed recipe: it propagates (the valve
  // has already tried).
  void regenerate(std::size_t entry_index, device::stream_handle stream, int depth = 0, bool prefetch = false) {
    const auto& e = plan.evictions[entry_index];
    std::vector<buffer_id> pending;  // targets evicted now: what a failure must give back
    if (!freed[e.target] && evicted[e.target]) pending.push_back(e.target);
    for (buffer_id b : e.also_regenerates)
      if (!freed[b] && evicted[b]) pending.push_back(b);
    if (pending.empty()) return;
    try {
      regenerate_now(entry_index, stream, depth, prefetch);
    } catch (const out_of_memory&) {
      throw;
    } catch (const std::exception& failure) {
      if (recover_failed_recipe(pending, failure.what(), stream)) return;
      if (depth > 0) throw;  // the outermost recipe says it once
      throw error(std::string(failure.what()) +
                  "; no copy of the evicted bytes was kept (SUBLINEAR_VALIDATE=first or always catches this in the "
                  "first planned iteration, while copies exist)");
    }
  }

  bool recover_failed_recipe(const std::vector<buffer_id>& pending, const std::string& why,
                             device::stream_handle stream) {
    for (buffer_id b : pending)
      if (backups.find(b) == backups.end()) return false;
    for (buffer_id b : pending) {
      if (evicted[b]) {
        try {
          alloc.restore(addr[b], stream);
        } catch (const std::exception&) {
          return false;
        }
        evicted[b] = 0;
        evicted_ranges.erase(addr[b]);
      }
      auto it = backups.find(b);
      dev.upload(addr[b], it->second.data(), it->second.size(), stream);
      backups.erase(it);
      ++current.validation_mismatches;
      const auto alloc_index = graph().buffers[b].alloc_index;
      never_evict_allocs.insert(alloc_index);
      record_for(b).never_evict = true;
      log_warn("validation: regenerating buffer #" + std::to_string(alloc_index) + " (" +
               format_bytes(graph().buffers[b].size) + ") failed (" + why +
               "); its bytes were restored from the validation copy and it will not be evicted again");
    }
    return true;
  }

  // Note [Recipe prefix]: a recipe whose later launches this iteration has not issued
  // yet runs only the launches it has. That happens when a carrier's own target is still
  // to come but buffers it regenerates on the way were evicted already, and the run
  // diverges (restore everything) or a launch touches one of them (the safety net) before
  // the target's restore point. Every write an evicted buffer got before its eviction was
  // issued, so the launches seen so far bring it back as it was; what comes later had not
  // happened yet either. A target evicted now that no seen launch writes cannot be
  // regenerated, and the replay says so.
  std::vector<launch_id> runnable_recipe(const policy::eviction& e, const std::vector<buffer_id>& targets) const {
    std::size_t seen = 0;
    while (seen < e.recipe.size() && saved[e.recipe[seen]].present) ++seen;
    if (seen == e.recipe.size()) return e.recipe;
    const auto& g = graph();
    for (buffer_id b : targets) {
      if (!evicted[b] || freed[b]) continue;
      bool written = false;
      for (std::size_t i = 0; i < seen && !written; ++i) {
        const auto& w = g.launches[e.recipe[i]].written;
        written = std::find(w.begin(), w.end(), b) != w.end();
      }
      if (!written) throw error("sublinear: a recipe launch was not seen in this iteration before it is replayed");
    }
    if (opts.config.log >= log_level::debug)
      log_debug("iteration " + std::to_string(iteration_index) + ": the recipe of buffer " + std::to_string(e.target) +
                " runs the " + std::to_string(seen) + " of its " + std::to_string(e.recipe.size()) +
                " launches issued so far (Note [Recipe prefix])");
    return {e.recipe.begin(), e.recipe.begin() + static_cast<std::ptrdiff_t>(seen)};
  }

  void regenerate_now(std::size_t entry_index, device::stream_handle stream, int depth, bool prefetch) {
    const auto& e = plan.evictions[entry_index];
    std::vector<buffer_id> targets{e.target};
    targets.insert(targets.end(), e.also_regenerates.begin(), e.also_regenerates.end());
    if (depth > 64) throw error("sublinear: replay recursion deeper than 64 recipes; the plan is cyclic");
    if (e.recipe.empty()) throw error("sublinear: an evicted buffer has no recipe to regenerate it");
    const auto& g = graph();
    const std::vector<launch_id> recipe = runnable_recipe(e, targets);
    pin_scope pinned(pins, g, e);
    std::unordered_set<buffer_id> regenerated(targets.begin(), targets.end());
    std::unordered_set<buffer_id> temps(e.temporaries.begin(), e.temporaries.end());
    // While this recipe runs, a recipe it needs first must not need its targets back.
    std::vector<buffer_id> marked;
    for (buffer_id b : targets)
      if (regenerating.insert(b).second) marked.push_back(b);
    struct unmark {
      std::unordered_set<buffer_id>& set;
      const std::vector<buffer_id>& ids;
      ~unmark() {
        for (buffer_id b : ids) set.erase(b);
      }
    } unmark_at_exit{regenerating, marked};
    // Inputs evicted at this moment that the plan expected resident: regenerate them first.
    // A live temporary the recipe reads before writing it needs its bytes too (its scratch
    // starts from them, below), but not regenerated here: that was tried, and on the host
    // without write observation it corrupted the Transformer's parameters, which
    // validation did not catch. Such a recipe fails instead (Note [Failed recipe]). Without
    // write observation every block a launch touches may be written, so a recipe's inputs
    // are temporaries too: the CUDA collector's case before session 22.
    std::unordered_set<buffer_id> written_so_far;
    for (launch_id l : recipe) {
      for (buffer_id u : g.launches[l].touched) {
        if (regenerated.count(u) || !evicted[u] || freed[u]) continue;
        if (temps.count(u)) {
          if (written_so_far.count(u) || !reads(l, u)) continue;
          throw error("sublinear: the recipe of buffer #" + std::to_string(g.buffers[e.target].alloc_index) +
                      " reads buffer #" + std::to_string(g.buffers[u].alloc_index) +
                      " as a temporary, and that buffer is evicted now: the plan is invalid here");
        }
        if (regenerating.count(u) != 0) {
          throw error("sublinear: the recipe of buffer #" + std::to_string(g.buffers[e.target].alloc_index) +
                      " needs buffer #" + std::to_string(g.buffers[u].alloc_index) +
                      ", which is itself waiting for this recipe (the plan is cyclic here)");
        }
        if (carrier_of(u) < 0) throw error("sublinear: a recipe input was evicted with no way to regenerate it");
        regenerate(static_cast<std::size_t>(carrier_of(u)), stream, depth + 1);
        if (evicted[u]) throw error("sublinear: a recipe input could not be regenerated");
      }
      for (buffer_id w : g.launches[l].written) written_so_far.insert(w);
    }
    // What the recipe's own launches write of each live temporary (check_versions).
    std::unordered_map<buffer_id, std::uint64_t> recipe_writes;
    for (launch_id l : recipe)
      for (buffer_id w : g.launches[l].written)
        if (temps.count(w)) ++recipe_writes[w];
    const double started = dev.now_s();
    if (opts.config.log >= log_level::debug)
      log_debug("iteration " + std::to_string(iteration_index) + ": regenerate buffer " + std::to_string(e.target) +
                " before launch " + std::to_string(pos));
    std::vector<buffer_id> restored;
    std::unordered_map<buffer_id, char*> scratch_of;
    // Scratch for temporaries, at other addresses (Note [Recipe scratch]). Blocks the
    // recipe writes that have been freed since (a regeneration the pressure valve moved
    // later than planned) get scratch too: their addresses may belong to others now.
    for (launch_id l : recipe)
      for (buffer_id w : g.launches[l].written)
        if (freed[w]) temps.insert(w);
    // The last recipe launch that touches each temporary: its scratch goes back to the
    // allocator, stream-ordered, once that launch is queued.
    std::unordered_map<buffer_id, std::size_t> last_use;
    for (std::size_t i = 0; i < recipe.size(); ++i)
      for (buffer_id t : g.launches[recipe[i]].touched)
        if (temps.count(t)) last_use[t] = i;
    auto release_scratch = [&] {
      for (const auto& [t, s] : scratch_of) alloc.deallocate(s);
      scratch_of.clear();
    };
    // Out of memory before the recipe is complete: what was mapped back holds no valid
    // bytes, so it is evicted again (after what is queued) and the state stays consistent
    // for a later attempt.
    auto evict_restored_again = [&] {
      for (buffer_id b : restored) {
        alloc.evict(addr[b]);
        evicted[b] = 1;
        evicted_ranges[addr[b]] = b;
      }
    };
    // Before any page is mapped back: a failure past this point would leave the targets
    // mapped and marked resident with no valid bytes.
    for (launch_id l : recipe)
      if (!saved[l].present) throw error("sublinear: a recipe launch was not seen in this iteration before it is replayed");
    try {
      for (buffer_id b : targets) {
        if (!evicted[b] || freed[b]) continue;
        // The recipe writes the pages on `stream` first (Note [Stream-ordered handoff]).
        alloc.restore(addr[b], stream);
        restored.push_back(b);
        evicted[b] = 0;
        evicted_ranges.erase(addr[b]);
      }
    } catch (...) {
      evict_restored_again();
      throw;
    }
    std::vector<std::pair<std::pair<const char*, std::size_t>, char*>> moves;
    for (std::size_t i = 0; i < recipe.size(); ++i) {
      const launch_id l = recipe[i];
      saved_op& so = saved[l];  // present: checked above
      try {
        check_versions(l, so, regenerated, temps, recipe_writes);
      } catch (...) {
        release_scratch();
        throw;
      }
      // Only the temporaries this launch touched: a freed workspace's addresses may belong
      // to another buffer by the time a later recipe launch ran.
      moves.clear();
      for (buffer_id t : g.launches[l].touched) {
        if (!temps.count(t)) continue;
        if (addr[t] == nullptr) throw error("sublinear: a recipe temporary has no address in this iteration");
        auto it = scratch_of.find(t);
        if (it == scratch_of.end()) {
          // First use in the recipe: map its scratch now; a live side output starts from
          // its contents, which nothing has changed since the recipe began.
          const std::size_t size = g.buffers[t].size;
          char* s = nullptr;
          try {
            s = static_cast<char*>(alloc.allocate(size, stream));
          } catch (...) {
            release_scratch();
            evict_restored_again();
            throw;
          }
          it = scratch_of.emplace(t, s).first;
          if (!freed[t] && !evicted[t]) dev.copy(s, addr[t], size, stream);
        }
        moves.push_back({{addr[t], g.buffers[t].size}, it->second});
      }
      launch_view op = so.view;
      std::vector<std::byte> params = so.params;
      op.params = params;
      patch(op, params, moves);
      touch_and_restore(op, stream);  // a block offloaded while tracing that the recipe reads
      try {
        dev.replay(op, stream);
      } catch (const std::exception& failure) {
        release_scratch();
        // Note [Failed recipe]: the kernel stays out of every later plan.
        unreplayable_kernels.insert(kernel_name_of(l));
        throw error("sublinear: replaying " + kernel_name_of(l) + " to regenerate buffer #" +
                    std::to_string(g.buffers[e.target].alloc_index) + " failed: " + failure.what());
      }
      // A retained input is freed later by the engine, on its own stream's order: make that
      // free wait for this replay too when it runs on another stream.
      for (buffer_id u : g.launches[l].touched)
        if (!retain_until.empty() && retain_until[u] != none && !temps.count(u) && addr[u] != nullptr)
          alloc.record_stream(addr[u], stream);
      ++current.recomputed_launches;
      current.recompute_s += g.launches[l].cost_s;
      for (buffer_id w : g.launches[l].written) regenerated.insert(w);
      for (buffer_id t : g.launches[l].touched) {
        auto lu = last_use.find(t);
        if (lu == last_use.end() || lu->second != i) continue;
        auto sc = scratch_of.find(t);
        if (sc == scratch_of.end()) continue;
        alloc.deallocate(sc->second);  // stream-ordered: reusable by what is queued after
        scratch_of.erase(sc);
      }
    }
    release_scratch();
    for (buffer_id b : targets) {
      if (freed[b]) continue;
      auto& r = record_for(b);
      ++r.times_recomputed;
      r.recompute_cost_s = 0;
      for (launch_id l : recipe) r.recompute_cost_s += g.launches[l].cost_s;
      validate_regenerated(b, stream);
    }
    if (prefetch) {
      ++current.prefetched;
    } else {
      current.stall_s += dev.now_s() - started;
    }
    // One event per buffer mapped back, all with the recipe's time span.
    for (buffer_id b : restored)
      note_block(timeline_event::kind::regenerate, started, addr[b], g.buffers[b].size, record_for(b).producer);
  }

  // Note [Replay recipes]: inputs must hold the values they had at the original launch.
  // So must a live temporary at its first use in the recipe, whose scratch starts from its
  // present bytes; a freed one has none to check (its scratch holds what the recipe writes).
  // A live temporary the launch reads may have been written since only by the recipe's own
  // launches: each write counts once in its version (`recipe_writes`). One it only writes
  // needs no bytes of its own.
  void check_versions(launch_id l, const saved_op& so, const std::unordered_set<buffer_id>& regenerated,
                      const std::unordered_set<buffer_id>& temps,
                      const std::unordered_map<buffer_id, std::uint64_t>& recipe_writes) const {
    const auto& touched = graph().launches[l].touched;
    for (std::size_t i = 0; i < touched.size(); ++i) {
      buffer_id u = touched[i];
      if (regenerated.count(u) || (temps.count(u) && (freed[u] || !reads(l, u)))) continue;
      std::uint64_t expected = so.input_versions[i];
      if (temps.count(u)) {
        const auto w = recipe_writes.find(u);
        if (w != recipe_writes.end()) expected += w->second;
      }
      if (version[u] != expected) {
        throw error("sublinear: replay of launch " + std::to_string(l) + " would read buffer " + std::to_string(u) +
                    " after it changed; the plan is invalid for this iteration");
      }
    }
  }

  // Whether launch `l` may read buffer `u` (the analysis's inputs: every touched buffer but
  // one it writes first after its allocation).
  [[nodiscard]] bool reads(launch_id l, buffer_id u) const {
    const auto& in = an.inputs[l];
    return std::binary_search(in.begin(), in.end(), u);
  }

  [[nodiscard]] std::string kernel_name_of(launch_id l) const {
    const auto& g = graph();
    const std::uint32_t k = g.launches[l].kernel;
    return k < g.kernel_names.size() ? g.kernel_names[k] : "launch " + std::to_string(l);
  }

  void validate_regenerated(buffer_id b, device::stream_handle stream) {
    auto it = backups.find(b);
    if (it == backups.end()) return;
    std::vector<std::byte> now(it->second.size());
    dev.download(now.data(), addr[b], now.size(), stream);
    if (now != it->second) {
      dev.upload(addr[b], it->second.data(), it->second.size(), stream);  // keep this iteration right
      ++current.validation_mismatches;
      const auto alloc_index = graph().buffers[b].alloc_index;
      never_evict_allocs.insert(alloc_index);
      record_for(b).never_evict = true;
      log_warn("validation: regenerating buffer #" + std::to_string(alloc_index) + " (" +
               format_bytes(graph().buffers[b].size) + ", produced by " + record_for(b).producer +
               ") gave different bytes; it will not be evicted again");
    }
    backups.erase(it);
  }

  void restore_everything(device::stream_handle stream) {
    restore_all_pending = false;
    std::vector<std::size_t> order;
    for (buffer_id b = 0; b < evicted.size(); ++b)
      if (evicted[b] && !freed[b] && carrier_of(b) >= 0) order.push_back(static_cast<std::size_t>(carrier_of(b)));
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      return plan.evictions[x].restore_before < plan.evictions[y].restore_before;
    });
    order.erase(std::unique(order.begin(), order.end()), order.end());
    for (std::size_t i : order) regenerate(i, stream);
  }

  // The entry whose recipe brings `b` back now: the one that evicted it if it carries a
  // recipe, else the entry that lists it in also_regenerates.
  std::int32_t carrier_of(buffer_id b) const {
    const std::int32_t e = active_entry[b];
    if (e >= 0 && !plan.evictions[static_cast<std::size_t>(e)].recipe.empty()) return e;
    return entry_of[b];
  }

  // Whether the traced launch at `l` held a pointer into buffer `b` at parameter offset
  // `offset` (Note [Stray pointer words]).
  bool traced_touch(std::size_t l, std::size_t offset, buffer_id b) const {
    if (l >= an.touches.size()) return false;
    for (const auto& t : an.touches[l])
      if (t.param_offset == offset && t.buffer == b) return true;
    return false;
  }

  // The safety net: a launch whose parameters point into an evicted block.
  void regenerate_touched(const launch_view& op) {
    if (evicted_ranges.empty()) return;
    // Note [Stray pointer words]: while the iteration follows the trace, a kernel's word
    // counts only where the traced launch at this position pointed into the same buffer.
    const bool follow_trace = !diverged && pos < graph().launches.size() && op.what == launch_view::kind::kernel;
    auto hit = [&](std::uint64_t word, std::size_t offset) {
      auto p = reinterpret_cast<const char*>(word);
      auto it = evicted_ranges.upper_bound(p);
      if (it == evicted_ranges.begin()) return;
      --it;
      const buffer_id b = it->second;
      if (p >= it->first + graph().buffers[b].size) return;
      if (follow_trace && !traced_touch(pos, offset, b)) {
        ++current.stray_pointers;
        if (opts.config.log >= log_level::debug)
          log_debug("iteration " + std::to_string(iteration_index) + ": launch " + std::to_string(pos) + " (" +
                    kernel_name_of(static_cast<launch_id>(pos)) + ") has a word at parameter offset " +
                    std::to_string(offset) + " pointing into evicted buffer #" +
                    std::to_string(graph().buffers[b].alloc_index) +
                    ", which the traced launch did not hold there: left alone");
        return;
      }
      const std::int32_t entry = carrier_of(b);
      if (entry < 0) throw error("sublinear: a launch touches an evicted buffer that has no recipe");
      regenerate(static_cast<std::size_t>(entry), op.stream);
    };
    if (op.what == launch_view::kind::kernel) {
      for (std::size_t off = 0; off + 8 <= op.params.size(); off += 8) {
        std::uint64_t word = 0;
        std::memcpy(&word, op.params.data() + off, 8);
        hit(word, off);
      }
    } else {
      hit(reinterpret_cast<std::uint64_t>(op.dst), 0);
      if (op.src != nullptr) hit(reinterpret_cast<std::uint64_t>(op.src), 8);
    }
  }

  // ---- prefetch and the pressure valve (Note [Prefetch], Note [Pressure valve]) -----------------

  // True if launch in [from, until) writes `b`.
  bool written_in(buffer_id b, std::size_t from, std::size_t until) const {
    const auto& w = writers[b];
    auto it = std::lower_bound(w.begin(), w.end(), static_cast<launch_id>(from));
    return it != w.end() && *it < until;
  }

  // True if the recipe of entry `i` can run now: every launch of it seen in this iteration,
  // every block it touches in place allocated and not freed, its inputs resident and
  // unchanged since the original launches. With `until` (the valve), it must also stay
  // valid up to that launch: nothing it touches is freed before it or written in
  // [pos, until), and every buffer it writes that is resident still holds what the recipe
  // wrote (the recipe will write it again).
  bool recipe_valid(std::size_t i, std::size_t until) const {
    const auto& e = plan.evictions[i];
    const auto& g = graph();
    if (e.recipe.empty()) return false;
    std::unordered_set<buffer_id> made(e.also_regenerates.begin(), e.also_regenerates.end());
    made.insert(e.target);
    std::unordered_set<buffer_id> temps(e.temporaries.begin(), e.temporaries.end());
    std::unordered_map<buffer_id, launch_id> recipe_writer;
    for (launch_id l : e.recipe) {
      const saved_op& so = saved[l];
      if (l >= pos || !so.present) return false;
      const auto& touched = g.launches[l].touched;
      const auto& writes = g.launches[l].written;
      for (std::size_t k = 0; k < touched.size(); ++k) {
        const buffer_id u = touched[k];
        if (temps.count(u) != 0) continue;
        if (addr[u] == nullptr) return false;
        // A block the recipe produces may be gone by then: it is replayed into scratch
        // (regenerate). One it only reads must exist now and, for the valve, still exist
        // when the regeneration runs: a replay never touches a freed block.
        const bool produced = made.count(u) != 0 || std::binary_search(writes.begin(), writes.end(), u);
        const bool gone_by_then = freed[u] || (until > pos && g.buffers[u].free_at != none && g.buffers[u].free_at <= until);
        if (gone_by_then && !produced) return false;
        if (until > pos && written_in(u, pos, until)) return false;
        if (gone_by_then) continue;  // a temporary then
        if (made.count(u) != 0) continue;
        if (evicted[u] && !freed[u]) return false;
        if (version[u] != so.input_versions[k]) return false;
      }
      for (buffer_id w : g.launches[l].written) {
        made.insert(w);
        recipe_writer[w] = l;
      }
    }
    if (until > pos) {
      for (const auto& [w, l] : recipe_writer) {
        if (temps.count(w) != 0 || evicted[w] || freed[w]) continue;
        if (last_write[w] != l) return false;
      }
    }
    return true;
  }

  // Regenerates, ahead of their restore points, the entries due within the next
  // prefetch_launches launches whose recipes can run now and that fit under the budget.
  void prefetch(device::stream_handle stream) {
    const auto& g = graph();
    const std::size_t horizon = std::min(g.launches.size(), pos + opts.prefetch_launches);
    std::size_t q = std::max(prefetch_scan, pos + 1);
    if (q > horizon) return;
    const std::size_t gran = alloc.granularity();
    auto pages = [&](buffer_id b) { return (g.buffers[b].size + gran - 1) / gran * gran; };
    auto s = alloc.get_stats();
    for (; q <= horizon; ++q) {
      for (std::size_t i : restore_at[q]) {
        const auto& e = plan.evictions[i];
        // Its target is still to be evicted: the recipe would run now for the buffers it
        // regenerates on the way and again at its restore point for the target.
        if (!evicted[e.target] && !freed[e.target] && !kept_resident[e.target] && e.evict_after != none &&
            e.evict_after >= pos)
          continue;
        std::size_t need = 0;
        if (evicted[e.target] && !freed[e.target]) need += pages(e.target);
        for (buffer_id t : e.also_regenerates)
          if (evicted[t] && !freed[t]) need += pages(t);
        if (need == 0) continue;
        for (buffer_id t : e.temporaries) need += pages(t);
        const std::size_t in_use = s.mapped - s.pooled;  // pooled chunks can serve the targets
        if (in_use + need + s.budget / 32 > s.budget) continue;
        if (!recipe_valid(i, 0)) continue;
        // A prefetch is an optimisation: it must neither fail the launch nor make the
        // pressure valve evict others to make room for it.
        prefetching = true;
        try {
          regenerate(i, stream, 0, true);
        } catch (const out_of_memory&) {
          // left to its restore point
        }
        prefetching = false;
        s = alloc.get_stats();
      }
    }
    prefetch_scan = horizon + 1;
  }

  // The pressure valve: evicts resident buffers the plan placed evictable until
  // `shortfall` bytes are on their way out. Returns the bytes asked to evict.
  std::size_t relieve(std::size_t shortfall) {
    if (st == engine_state::trace && trace_budget_bytes > 0) return offload(shortfall);
    if (!active() || prefetching) return 0;
    const auto& g = graph();
    const std::size_t n = g.launches.size();
    const std::size_t gran = alloc.granularity();
    struct candidate {
      buffer_id b;
      std::size_t next;      // next launch touching it (n: none this iteration)
      double cost_per_byte;  // its recipe's traced cost
    };
    std::vector<candidate> found;
    std::size_t considered = 0;
    for (buffer_id b = 0; b < g.buffers.size(); ++b) {
      if (!buffer_evictable[b] || kept_resident[b] || addr[b] == nullptr || freed[b] || evicted[b] || pins[b] != 0)
        continue;
      ++considered;
      const auto& u = uses[b];
      auto it = std::lower_bound(u.begin(), u.end(), static_cast<launch_id>(pos));
      const std::size_t next = it == u.end() ? n : *it;
      if (next == pos) continue;  // the launch entering now needs it
      const std::int32_t c = entry_of[b];
      if (c < 0) continue;
      const auto& e = plan.evictions[static_cast<std::size_t>(c)];
      // Its current value is the recipe's: the recipe's last write of it was its last write.
      launch_id writer = none;
      for (launch_id l : e.recipe)
        if (std::binary_search(g.launches[l].written.begin(), g.launches[l].written.end(), b)) writer = l;
      if (writer == none || last_write[b] != writer) {
        if (opts.config.log >= log_level::debug)
          log_debug("valve: buffer " + std::to_string(b) + " next use " + std::to_string(next) + ": entry " +
                    std::to_string(c) + "'s recipe did not write it last");
        continue;
      }
      if (!recipe_valid(static_cast<std::size_t>(c), std::max(next, pos + 1))) {
        if (opts.config.log >= log_level::debug)
          log_debug("valve: buffer " + std::to_string(b) + " next use " + std::to_string(next) +
                    ": its recipe would not be valid then");
        continue;
      }
      double cost = 0.0;
      for (launch_id l : e.recipe) cost += g.launches[l].cost_s;
      found.push_back({b, next, cost / static_cast<double>(g.buffers[b].size)});
    }
    std::sort(found.begin(), found.end(), [](const candidate& x, const candidate& y) {
      if (x.next != y.next) return x.next > y.next;
      return x.cost_per_byte < y.cost_per_byte;
    });
    std::size_t asked = 0;
    std::size_t count = 0;
    for (const candidate& c : found) {
      if (asked >= shortfall) break;
      evict_buffer(c.b, static_cast<std::size_t>(entry_of[c.b]), nullptr, false);
      asked += (g.buffers[c.b].size + gran - 1) / gran * gran;
      ++count;
    }
    current.pressure_evictions += count;
    log_info("iteration " + std::to_string(iteration_index) + ": pressure at launch " + std::to_string(pos) + ", " +
             format_bytes(shortfall) + " short of the budget: evicted " + std::to_string(count) + " more buffers (" +
             format_bytes(asked) + ") of " + std::to_string(found.size()) + " that could be regenerated later (" +
             std::to_string(considered) + " resident and evictable)");
    return asked;
  }

  // Asked when a request finds no room even after the valve (Note [Scaled cache allowance]):
  // a plan made with the scaled cache allowance gives the budget up for the rest of the
  // iteration, and the next plan keeps the whole traced cache back. Prefetches are left to
  // fail: they are retried at their restore point. Only a budget shortfall is lifted: when
  // the device's memory or the address space ran out, no budget would help, and the error
  // goes to the caller as it would without a plan.
  bool overrun(const out_of_memory& error) {
    if (!active() || prefetching || allowance != policy::cache_allowance_mode::scaled || current.budget_lifted) return false;
    if (error.details().ran_out != out_of_memory::cause::budget) return false;
    log_warn("iteration " + std::to_string(iteration_index) + ": the plan made with the allocator's cache scaled to "
             "the budget ran out of room at launch " + std::to_string(pos) + " (" + error.what() +
             "); the rest of this iteration runs without the budget, and the next plan keeps the whole traced "
             "cache back (Note [Scaled cache allowance]).");
    alloc.set_budget(0);
    current.budget_lifted = true;
    scaled_refused = true;
    return true;
  }

  // ---- offloading while tracing (Note [Offloading the traced iteration]) -----------------------

  // The peak this iteration would have had without offloading: mapped pages, less chunks
  // pooled only because of offloads, plus the offloaded blocks' pages.
  void sample_unoffloaded_peak() {
    const auto s = alloc.get_stats();
    unoffloaded_peak = std::max(unoffloaded_peak, s.mapped - s.pooled + s.evicted);
  }

  // Calls `f(base, block)` for every tracked block overlapping [p, p + bytes).
  // Addresses compare as integers: parameter words may be anything, not pointers.
  template <class F>
  void for_blocks_in(std::uintptr_t p, std::size_t bytes, F&& f) {
    auto at = [](const char* base) { return reinterpret_cast<std::uintptr_t>(base); };
    const std::uintptr_t end = p + std::max<std::size_t>(bytes, 1) < p ? UINTPTR_MAX : p + std::max<std::size_t>(bytes, 1);
    auto it = blocks.upper_bound(reinterpret_cast<const char*>(p));
    if (it != blocks.begin()) {
      auto prev = std::prev(it);
      if (p < at(prev->first) + prev->second.size) it = prev;
    }
    for (; it != blocks.end() && at(it->first) < end; ++it) f(it->first, it->second);
  }

  // The blocks `op` touches: pointer words of a kernel's parameters, a copy's or set's ranges.
  std::vector<const char*> touched_blocks(const launch_view& op) {
    std::vector<const char*> out;
    auto add = [&](const char* base, tracked_block&) {
      if (std::find(out.begin(), out.end(), base) == out.end()) out.push_back(base);
    };
    if (op.what == launch_view::kind::kernel) {
      for (std::size_t off = 0; off + 8 <= op.params.size(); off += 8) {
        std::uint64_t word = 0;
        std::memcpy(&word, op.params.data() + off, 8);
        for_blocks_in(static_cast<std::uintptr_t>(word), 1, add);
      }
    } else {
      const std::size_t bytes = std::max<std::size_t>(op.bytes, 1);
      for_blocks_in(reinterpret_cast<std::uintptr_t>(op.dst), bytes, add);
      if (op.src != nullptr) for_blocks_in(reinterpret_cast<std::uintptr_t>(op.src), bytes, add);
    }
    return out;
  }

  // Brings an offloaded block back: pages at its address, then its bytes, before anything
  // queued on `stream` after this call.
  void bring_back(const char* base, device::stream_handle stream) {
    auto it = blocks.find(base);
    if (it == blocks.end() || !it->second.offloaded) return;
    tracked_block& t = it->second;
    alloc.restore(const_cast<char*>(base));  // may offload others, never those entering now
    dev.upload(const_cast<char*>(base), t.host.data(), t.size, stream);
    t.offloaded = false;
    std::vector<std::byte>().swap(t.host);
    --offloaded_live;
    ++current.offload_restores;
    sample_unoffloaded_peak();
  }

  // At ENTER (and before a recipe launch is replayed): marks what `op` touches as used now
  // and restores the offloaded blocks among it.
  void touch_and_restore(const launch_view& op, device::stream_handle stream) {
    if (blocks.empty() || (st != engine_state::trace && offloaded_live == 0)) return;
    ++launch_clock;
    entering = touched_blocks(op);
    try {
      for (const char* base : entering) {
        auto& t = blocks.at(base);
        t.last_touch = launch_clock;
        if (t.offloaded) bring_back(base, stream);
      }
    } catch (...) {
      entering.clear();
      throw;
    }
    entering.clear();
  }

  // The pressure handler while tracing: offloads the least recently touched evictable
  // blocks the launch entering now does not touch until `shortfall` bytes are on their
  // way out. Returns the bytes asked to evict (0: nothing could go).
  std::size_t offload(std::size_t shortfall) {
    const std::size_t gran = alloc.granularity();
    std::vector<std::pair<std::uint64_t, const char*>> found;
    for (auto& [base, t] : blocks) {
      if (!t.evictable || t.offloaded) continue;
      if (std::find(entering.begin(), entering.end(), base) != entering.end()) continue;
      found.emplace_back(t.last_touch, base);
    }
    std::sort(found.begin(), found.end());
    std::size_t asked = 0;
    std::size_t count = 0;
    for (const auto& [touch, base] : found) {
      if (asked >= shortfall) break;
      tracked_block& t = blocks.at(base);
      t.host.resize(t.size);
      dev.download(t.host.data(), base, t.size, t.stream);  // waits for the work queued on it
      alloc.evict(const_cast<char*>(base));
      t.offloaded = true;
      ++offloaded_live;
      ++current.offloads;
      current.offloaded_bytes += t.size;
      asked += (t.size + gran - 1) / gran * gran;
      ++count;
      if (opts.record_timeline) note_block(timeline_event::kind::evict, dev.now_s(), base, t.size, "offload");
    }
    log_info("iteration " + std::to_string(iteration_index) + " (traced): " + format_bytes(shortfall) +
             " short of the budget: offloaded " + std::to_string(count) + " blocks (" + format_bytes(asked) +
             ") to host memory of " + std::to_string(found.size()) + " that could go");
    if (asked == 0) lift_trace_budget(shortfall);
    return asked == 0 ? shortfall : asked;
  }

  // Nothing is left to offload: the rest of this traced iteration runs without a budget
  // (Note [Offloading the traced iteration]); the next iteration sets it again.
  void lift_trace_budget(std::size_t shortfall) {
    log_warn("iteration " + std::to_string(iteration_index) + " (traced) needs " + format_bytes(shortfall) +
             " more than the budget of " + format_bytes(trace_budget_bytes) +
             " and nothing is left to offload (blocks under a page, and those the launch entering now touches, "
             "stay); the rest of this traced iteration runs without a budget. The plan holds the budget from "
             "the first planned iteration on.");
    alloc.set_budget(0);
    current.budget = 0;
  }

  // ---- interception -----------------------------------------------------------------------
  void flush_memory_op() {
    if (!memory_op_pending) return;
    memory_op_pending = false;
    after(pending_op);
  }

  void before(const launch_view& op) {
    flush_memory_op();
    touch_and_restore(op, op.stream);
    if (!have_plan || (st != engine_state::validate && st != engine_state::steady)) return;
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
      for (std::size_t i : restore_at[pos]) regenerate(i, op.stream);
      if (opts.prefetch_launches > 0) prefetch(op.stream);
    }
    static const bool debug_launches = std::getenv("SUBLINEAR_DEBUG_LAUNCHES") != nullptr;
    if (debug_launches && pos < expected_handle.size())
      log_debug("launch " + launch_name(pos));
    regenerate_touched(op);
    if (!diverged && saved_needed[pos]) {
      saved_op& so = saved[pos];
      so.present = true;
      so.view = op;
      so.params.assign(op.params.begin(), op.params.end());
      so.view.params = so.params;
      const auto& touched = graph().launches[pos].touched;
      so.input_versions.resize(touched.size());
      for (std::size_t i = 0; i < touched.size(); ++i) so.input_versions[i] = version[touched[i]];
    }
  }

  void after(const launch_view& op) {
    if (opts.record_timeline) note(timeline_event::kind::memory, dev.now_s(), 0, {});
    if (!have_plan || (st != engine_state::validate && st != engine_state::steady)) return;
    if (!diverged && pos < graph().launches.size()) {
      for (buffer_id w : graph().launches[pos].written) {
        ++version[w];
        last_write[w] = static_cast<launch_id>(pos);
      }
      for (std::size_t i : evict_at[pos]) evict(i, op.stream);
    }
    ++pos;
  }
};

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
class hook_clock {
 public:
  hook_clock(replay_device& dev, iteration_report& it) : dev_(dev), it_(it), t0_(dev.now_s()) {}
  ~hook_clock() { it_.engine_s += dev_.now_s() - t0_; }
  hook_clock(const hook_clock&) = delete;
  hook_clock& operator=(const hook_clock&) = delete;

 private:
  replay_device& dev_;
  iteration_report& it_;
  double t0_;
};

}  // namespace

void engine::before_launch(const launch_view& op) {
  if (inside_engine) return;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current);
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
  const hook_clock clock(impl_->dev, impl_->current);
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
  const hook_clock clock(impl_->dev, impl_->current);
  auto& m = *impl_;
  // Tracing under an absolute budget: whole pages, so that offloading gives them back.
  if (m.st == engine_state::trace && m.trace_budget_bytes > 0) return size >= m.alloc.granularity();
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
  const hook_clock clock(impl_->dev, impl_->current);
  auto& m = *impl_;
  m.flush_memory_op();
  if (m.opts.fill_fresh_blocks && !m.announcing_live_blocks && ptr != nullptr && size > 0 &&
      m.st == engine_state::trace) {
    m.dev.fill(ptr, tracer::fresh_fill_byte, size, stream);  // Note [Filled fresh blocks]
  }
  // Only blocks allocated while tracing can be offloaded; planned iterations keep no map.
  if (m.trace_budget_bytes > 0 && ptr != nullptr && m.st == engine_state::trace) {
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
  const hook_clock clock(impl_->dev, impl_->current);
  auto& m = *impl_;
  m.flush_memory_op();
  if (m.opts.record_timeline) m.note_block(timeline_event::kind::release, m.dev.now_s(), ptr, size, {});
  if (auto t = m.blocks.find(static_cast<const char*>(ptr)); t != m.blocks.end()) {
    if (t->second.offloaded) --m.offloaded_live;  // its host copy goes with it
    m.blocks.erase(t);
  }
  m.forget_freed(ptr);
}

bool engine::defer_free(void* ptr, std::size_t, device::stream_handle) {
  if (inside_engine || !impl_->retaining.load(std::memory_order_relaxed)) return false;
  std::lock_guard lock(impl_->mutex);
  const hook_clock clock(impl_->dev, impl_->current);
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
  return impl_->have_plan ? impl_->plan_cost : plan_compute{};
}

}  // namespace sublinear::runtime
