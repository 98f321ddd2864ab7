// The plan (Note [Iteration lifecycle] in engine.cpp, PLAN): the traced iteration
// analysed, the planner asked for a plan under the budget less the planning overhead
// (Note [Planning overhead] in policy/planning_overhead.hpp), and the plan indexed by
// launch position for the planned iterations.
#include "common/text.hpp"
#include "runtime/detail/engine_impl.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <future>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "policy/budget.hpp"
#include "policy/planner.hpp"
#include "policy/planning_overhead.hpp"
#include "policy/recompute_floor.hpp"
#include "tracer/analysis.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::runtime {

namespace {

using policy::buffer_id;
using policy::launch_id;
using policy::none;

}  // namespace

void engine::impl::log_plan() const {
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

void engine::impl::build_plan_from_trace() {
  kept_trace = rec.take();
  rec.stop();
  if (kept_trace.events.empty()) throw config_error("sublinear: the traced iteration recorded no events");
  tracer::require_replayable(kept_trace, "sublinear: the traced iteration");
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
  // The traced iteration just ended (Note [Predicted iteration time] in iteration_time.hpp).
  const device::vmm_cycle_cost probed = plan_time.vmm_cycle;  // measured once per engine
  plan_time = {};
  plan_time.vmm_cycle = probed;
  if (!reports.empty()) {
    plan_time.traced.active_s = reports.back().active_s;
    plan_time.traced.observation_s = reports.back().observation_s;
    plan_time.traced.recording_s = reports.back().recording_s;
    plan_time.traced.launches = reports.back().launches;
    plan_time.measured_on = "traced iteration " + std::to_string(reports.back().index);
  }
  for (const auto& l : an.graph.launches) plan_time.traced.device_s += l.cost_s;
  plan_time.measured = plan_time.traced;
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

void engine::impl::make_plan(std::size_t traced_peak) {
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
  const auto planner_options = [&] {
    policy::planner::options po;
    po.retention = opts.config.retention;
    po.multi_pass = opts.config.multi_pass;
    po.packs = opts.config.packs;
    po.offload_packs = opts.config.packs && opts.config.offload_packs;  // Note [Offload packs]
    po.fetch_margin = opts.config.fetch_margin;                         // Note [Fetch margin]
    // Offload (Note [Offload execution] in engine_swap.cpp): the link as the device runs it,
    // unless SUBLINEAR_LINK_BANDWIDTH says otherwise, and the host memory it may hold.
    po.offload = offload_refused.empty() ? opts.config.offload : policy::offload_mode::off;
    // The device's link is measured at its first query (CUDA): not asked with offload off.
    const replay_device::link_figures link =
        po.offload == policy::offload_mode::off ? replay_device::link_figures{} : dev.link();
    po.link.to_host = {opts.config.link_to_host > 0.0 ? opts.config.link_to_host : link.to_host_bytes_per_s,
                       link.to_host_latency_s};
    po.link.to_device = {opts.config.link_to_device > 0.0 ? opts.config.link_to_device : link.to_device_bytes_per_s,
                         link.to_device_latency_s};
    // The pool may take the host budget but for the blocks offloaded while tracing (Note
    // [Host budget]); 0 would mean no bound.
    po.host_budget = host_budget() == 0 ? 0 : std::max<std::size_t>(host_room(host_pool_made + host_copies.held()), 1);
    po.threads = planning_threads(opts.config.planning_threads);
    return po;
  };
  // How far the plan will be from any plan at the same share (reported). It depends on
  // the iteration and that share only, so it runs beside the planning threads; a share
  // changed by the scaled cache below is computed again. Nothing writes `g` until it is
  // taken. (libstdc++ runs the job deferred where no thread can be started.)
  policy::recompute_floor_options fo;
  if (const policy::planner::options po = planner_options();
      po.offload != policy::offload_mode::off && policy::make_planner(opts.config.policy)->offloads()) {
    fo.link = po.link;  // a floor of added time over plans that may also offload (planners that do)
    fo.host_budget = po.host_budget;
  }
  const auto floor_at = [&g, fo](std::size_t share) { return policy::find_recompute_floor(g, share, fo); };
  const std::size_t floor_share = budget_bytes > overhead ? budget_bytes - overhead : 0;
  std::future<policy::recompute_floor> floor_job =
      std::async(std::launch::async | std::launch::deferred, floor_at, floor_share);
  const auto make = [&](std::size_t planner_overhead) {
    return policy::make_planner(opts.config.policy)
        ->make_plan(g, budget_bytes > planner_overhead ? budget_bytes - planner_overhead : 0, planner_options());
  };
  const auto give_up = [&](const std::string& why) {
    plan_error = why;
    log_warn(plan_error + " Continuing without eviction (plain caching).");
    budget_bytes = 0;
    alloc.set_budget(0);
  };
  const std::string infeasible = "sublinear: budget " + format_bytes(budget_bytes) + " (" + opts.config.budget->text +
                                 ") is infeasible for planner '" + opts.config.policy + "'";
  // A budget given as a multiple of the traced peak is not held while tracing, so the next
  // run traces the same way only if given a multiple again (a budget in bytes is held, and
  // its traced layout differs: Note [Offloading the traced iteration]). The smallest
  // multiple, to a thousandth, that resolves to at least `bytes`; "" for other forms.
  const auto multiple_for = [&](std::size_t bytes) -> std::string {
    if (opts.config.budget->form != policy::budget_spec::kind::peak_fraction || traced_peak == 0) return "";
    double f = std::ceil(static_cast<double>(bytes) * 1000.0 / static_cast<double>(traced_peak)) / 1000.0;
    for (int step = 0; step < 4; ++step, f += 0.001) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3fx", f);
      if (policy::resolve_budget(policy::parse_budget(text), 0, traced_peak) >= bytes) return text;
    }
    return "";
  };
  // The smallest budget whose share for the planner is `planner_bytes`, as a user gives it
  // back: rounded up, the bytes exact, the margin kept beside the plan (planning_overhead),
  // and the multiple to give after a budget given as one.
  const auto smallest_text = [&](std::size_t planner_bytes, policy::cache_allowance_mode mode) {
    const std::size_t b = policy::budget_for_planner_bytes(planner_bytes, tm, mode);
    const std::string multiple = multiple_for(b);
    return format_bytes_at_least(b) + " (" + std::to_string(b) + " bytes: " + format_bytes(planner_bytes) +
           " for the plan and " + format_bytes(b - planner_bytes) + " kept back for the allocator's cache" +
           (mode == policy::cache_allowance_mode::scaled ? " scaled to the budget" : "") + " and fragmentation" +
           (multiple.empty() ? ")" : "; as a multiple of this traced peak SUBLINEAR_BUDGET=" + multiple + ")");
  };
  try {
    plan = make(overhead);
  } catch (const policy::infeasible_budget& traced_error) {
    // The planner speaks of the bytes it was given; the user set the whole budget.
    const std::string traced_smallest =
        smallest_text(traced_error.smallest_feasible(), policy::cache_allowance_mode::traced);
    // Again with the cache scaled to the budget (Note [Scaled cache allowance]), unless that
    // gives the planner no more (no cache traced, or a budget at the traced peak).
    const std::size_t scaled_cache = policy::cache_allowance(tm, budget_bytes, policy::cache_allowance_mode::scaled);
    const std::size_t scaled_overhead =
        policy::planning_overhead(budget_bytes, tm, policy::cache_allowance_mode::scaled) - scaled_cache +
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
      const bool same = policy::budget_for_planner_bytes(e.smallest_feasible(), tm, policy::cache_allowance_mode::scaled) ==
                        policy::budget_for_planner_bytes(traced_error.smallest_feasible(), tm);
      give_up(infeasible + ": the smallest feasible budget for it is " +
              smallest_text(e.smallest_feasible(), policy::cache_allowance_mode::scaled) +
              (same ? std::string()
                    : " with the allocator's cache scaled to the budget, and " + traced_smallest +
                          " with the whole traced cache, which holds a budget strictly") +
              "; no plan can go below " +
              format_bytes(
                  policy::budget_for_planner_bytes(e.lower_bound(), tm, policy::cache_allowance_mode::scaled)) +
              " (live buffers plus the allocator's overhead, " + format_bytes(overhead) + " here).");
      return;
    }
    allowance = policy::cache_allowance_mode::scaled;
    log_warn("budget " + format_bytes(budget_bytes) + " is below the smallest the traced cache allows for planner '" +
             opts.config.policy + "' (" +
             format_bytes_at_least(policy::budget_for_planner_bytes(traced_error.smallest_feasible(), tm)) +
             "): planning with the allocator's cache scaled to the "
             "budget. If a planned iteration still runs out of room, the rest of it runs without the budget and "
             "sublinear plans again with the whole cache (Note [Scaled cache allowance]).");
  }
  if (opts.amend_plan && offload_refused.empty() && opts.config.offload != policy::offload_mode::off)
    opts.amend_plan(g, plan);
  plan_cost.added_s = plan.added_compute_s;
  for (const auto& l : g.launches) plan_cost.traced_s += l.cost_s;
  plan_cost.floor_with_offload = fo.link.usable();
  const std::size_t share = budget_bytes > overhead ? budget_bytes - overhead : 0;
  policy::recompute_floor floor = floor_job.get();
  if (share != floor_share) floor = floor_at(share);
  plan_cost.floor_s = floor.feasible ? floor.added_s : 0.0;  // a plan exists: it is feasible
  // From here on the engine's graph has the retained lifetimes: recipes, the valve's
  // checks and the simulator agree on them.
  for (const policy::retention& r : plan.retentions) {
    traced_free_at.emplace_back(r.buffer, g.buffers[r.buffer].free_at);
    g.buffers[r.buffer].free_at = r.release_before;
  }
  retaining = !plan.retentions.empty();
  index_plan();
  if (!plan.offloads.empty()) {
    // The pool is made once per plan and kept (Note [Offload execution]); a pool the host
    // cannot give, or one over SUBLINEAR_HOST_BUDGET, makes the plan recompute instead.
    // Input copies that leave a larger pool no room go first (Note [Host budget]).
    std::string refused;
    const std::size_t pool = std::max(host_pool_bytes, host_pool_made);
    if (pool > host_room(host_pool_made) && pool <= host_room(host_pool_made + host_copies.held())) {
      host_copies.release();
      input_copies.clear();
    }
    if (pool > host_room(host_pool_made)) {
      refused = "its offloads need " + format_bytes(host_pool_bytes) + " of host memory at once, over the host budget " +
                format_bytes(host_budget()) +
                (traced_offload_bytes > 0 ? " beside the " + format_bytes(traced_offload_bytes) +
                                                " of blocks offloaded while tracing"
                                          : std::string()) +
                " (raise SUBLINEAR_HOST_BUDGET)";
    } else {
      try {
        host_pool = dev.host_pool(host_pool_bytes);
        host_pool_made = pool;
        note_host_held();
      } catch (const std::exception& e) {
        refused = std::string("the host pool of ") + format_bytes(host_pool_bytes) + " could not be made (" + e.what() +
                  "; lower SUBLINEAR_HOST_BUDGET or free host memory)";
      }
    }
    if (!refused.empty()) {
      offload_refused = "plan '" + plan.planner + "' offloads " + std::to_string(plan.offloads.size()) + " buffers but " +
                        refused + "; planning with recompute only";
      log_warn(offload_refused);
      for (const auto& [b, f] : traced_free_at) g.buffers[b].free_at = f;
      traced_free_at.clear();
      make_plan(traced_peak);
      return;
    }
  }
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
  predict_plan_time();
  log_plan();
  log_info("plan '" + plan.planner + "': " + std::to_string(plan.evictions.size()) + " evictions, " +
           std::to_string(plan.offloads.size()) + " offloads, budget " +
           format_bytes(budget_bytes) + ", predicted peak " + format_bytes(plan.predicted_peak) +
           ", added compute " + std::to_string(plan.added_compute_s) + " s");
}

// Note [Predicted iteration time] in iteration_time.hpp. A plan made again (a validation
// mismatch) keeps the latest measure: the host's cost per launch does not depend on it.
void engine::impl::predict_plan_time() {
  const bool given = opts.host_s_per_launch >= 0.0;
  const auto per_launch = [&](const host_cost_sample& s) { return given ? opts.host_s_per_launch : host_s_per_launch(s); };
  auto& t = plan_time;
  if (given) t.measured_on = "given";
  // An injected cost stands for all of the host's work; otherwise the device's cycle cost,
  // probed once (Note [VMM cost probe]).
  if (!given && t.vmm_cycle.device.empty()) t.vmm_cycle = device::probe_vmm_cycle_cost(alloc.device_vmm());
  if (!given && t.hash.device.empty()) t.hash = probe_hash_cost(dev, alloc.device_vmm());
  t.remaps = remaps_of(plan, graph(), alloc.granularity());
  t.checks = count_write_checks(check_index, plan, graph(), dev.downloads_on_stream());
  t.at_plan = predict_iteration_time(plan.predicted_time_s, per_launch(t.traced), t.traced.launches,
                                     plan.recomputed_launches, given ? remap_work{} : t.remaps, t.vmm_cycle,
                                     given ? write_check_work{} : t.checks, t.hash);
  // Until a steady iteration has run a plan, the next one is predicted as the plan is.
  t.next = t.measured_on.rfind("planned iteration", 0) != 0
               ? t.at_plan
               : predict_iteration_time(plan.predicted_time_s, per_launch(t.measured), t.traced.launches,
                                        plan.recomputed_launches);
}

// A steady iteration that ran the plan as it is: its device time is the traced launches',
// its recipes' (recompute_s: their traced durations) and its copy stalls.
void engine::impl::measure_host_cost() {
  if (opts.host_s_per_launch >= 0.0) return;
  auto& t = plan_time;
  t.measured.active_s = current.active_s;
  t.measured.device_s = t.traced.device_s + current.recompute_s + current.copy_stall_s;
  t.measured.launches = current.launches + current.recomputed_launches;
  t.measured.observation_s = current.observation_s;
  t.measured.recording_s = current.recording_s;
  t.measured_on = "planned iteration " + std::to_string(current.index);
  t.next = predict_iteration_time(plan.predicted_time_s, host_s_per_launch(t.measured), t.traced.launches,
                                  plan.recomputed_launches);
}

void engine::impl::index_plan() {
  const auto& g = graph();
  const std::size_t n = g.launches.size();
  transient_buffers.clear();
  // Note [Recurring allocations]
  // Later iterations are matched against the traced one allocation by allocation, so the
  // list must hold exactly the allocations every iteration makes. Those freed within the
  // traced iteration recur. One allocated and not freed may be lazily created state
  // (optimizer moments, made once) or the iteration's batch or loss, which the program
  // holds until the next iteration allocates their successors and frees them: PyTorch's
  // loops do that (ResNet-50 through sublinear.torch.enable), and taking those for state
  // diverges every validation iteration. A carried-out allocation recurs when the traced
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
  entry_of = carriers_of(plan, g.buffers.size());
  evict_at.assign(n + 1, {});
  restore_at.assign(n + 1, {});
  saved_needed.assign(n + 1, 0);
  for (std::size_t i = 0; i < plan.evictions.size(); ++i) {
    const auto& e = plan.evictions[i];
    buffer_evictable[e.target] = 1;
    if (e.evict_after < n) evict_at[e.evict_after].push_back(i);
    if (e.restore_before <= n && !e.recipe.empty()) restore_at[e.restore_before].push_back(i);
    for (launch_id l : e.recipe) saved_needed[l] = 1;
  }
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
  index_offloads();
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
  check_index = index_write_checks(plan, g);
}

}  // namespace sublinear::runtime
