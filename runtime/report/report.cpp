// The report model, its JSON form and the text renderer (Note [Report model] in
// report.hpp). The timeline renderers are in report_timeline.cpp and report_plot.cpp.
#include "common/checked.hpp"
#include "common/text.hpp"
#include "runtime/report/report.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/atomic_file.hpp"
#include "runtime/report/report_json.hpp"
#include "runtime/report/report_text.hpp"
#include "sublinear/error.hpp"
#include "sublinear/version.h"

namespace sublinear::runtime {

namespace {

const char* kind_name(timeline_event::kind k) {
  switch (k) {
    case timeline_event::kind::memory: return "memory";
    case timeline_event::kind::evict: return "evict";
    case timeline_event::kind::regenerate: return "regenerate";
    case timeline_event::kind::iteration: return "iteration";
    case timeline_event::kind::allocate: return "allocate";
    case timeline_event::kind::release: return "release";
    case timeline_event::kind::offload: return "offload";
    case timeline_event::kind::fetch: return "fetch";
  }
  return "?";
}

timeline_event::kind parse_kind(const std::string& s) {
  if (s == "memory") return timeline_event::kind::memory;
  if (s == "evict") return timeline_event::kind::evict;
  if (s == "regenerate") return timeline_event::kind::regenerate;
  if (s == "iteration") return timeline_event::kind::iteration;
  if (s == "allocate") return timeline_event::kind::allocate;
  if (s == "release") return timeline_event::kind::release;
  if (s == "offload") return timeline_event::kind::offload;
  if (s == "fetch") return timeline_event::kind::fetch;
  throw config_error("report: unknown timeline event kind '" + s + "'");
}

engine_state parse_state(const std::string& s) {
  for (engine_state st : {engine_state::trace, engine_state::validate, engine_state::steady, engine_state::disabled})
    if (s == to_string(st)) return st;
  throw config_error("report: unknown iteration state '" + s + "'");
}

// "NAME=value" lines of describe() as pairs.
std::vector<std::pair<std::string, std::string>> settings_pairs(const settings& config) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream lines(describe(config));
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

// Assigns each event its iteration and, for memory samples, evictions and regenerations, the
// launches completed in the iteration when it happened; drops the
// memory samples that repeat the previous one of their iteration (keeping each
// iteration's last sample, so a step curve still reaches the iteration's end).
std::vector<report_event> thin_timeline(const std::vector<timeline_event>& timeline,
                                        const std::vector<iteration_report>& iterations, std::size_t& dropped) {
  std::vector<report_event> out;
  out.reserve(timeline.size());
  std::size_t iteration_ordinal = 0;  // how many iteration events we have passed
  auto index_of = [&](std::size_t ordinal) {
    if (ordinal < iterations.size()) return iterations[ordinal].index;
    if (!iterations.empty()) return iterations.back().index + 1 + (ordinal - iterations.size());
    return ordinal;
  };
  std::size_t launch = 0;
  bool have_last = false;
  report_event last_dropped;
  bool last_was_dropped = false;
  std::size_t last_mapped = 0, last_allocated = 0, last_evicted = 0;
  dropped = 0;
  for (const timeline_event& e : timeline) {
    report_event r{e, index_of(iteration_ordinal), 0};
    if (e.what == timeline_event::kind::memory) {
      r.launch = ++launch;
      if (have_last && e.mapped == last_mapped && e.allocated == last_allocated && e.evicted == last_evicted) {
        last_dropped = r;
        last_was_dropped = true;
        ++dropped;
        continue;
      }
      have_last = true;
      last_was_dropped = false;
      last_mapped = e.mapped;
      last_allocated = e.allocated;
      last_evicted = e.evicted;
      out.push_back(std::move(r));
      continue;
    }
    if (e.what == timeline_event::kind::iteration) {
      if (last_was_dropped) {
        out.push_back(last_dropped);
        --dropped;
      }
      out.push_back(std::move(r));
      ++iteration_ordinal;
      launch = 0;
      have_last = false;
      last_was_dropped = false;
      continue;
    }
    if (e.what == timeline_event::kind::evict || e.what == timeline_event::kind::regenerate) r.launch = launch;
    out.push_back(std::move(r));
  }
  if (last_was_dropped) {
    out.push_back(last_dropped);
    --dropped;
  }
  return out;
}

// 0 when empty; the mean of the middle two for an even count.
double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

run_report make_report(const settings& config, const report_metadata& meta, plan_summary plan,
                       std::vector<iteration_report> iterations, std::vector<eviction_record> evictions,
                       const std::vector<timeline_event>& timeline) {
  run_report r;
  r.generator = "sublinear " SUBLINEAR_VERSION_STRING;
  r.model = meta.model;
  r.device = meta.device;
  r.granularity = meta.granularity;
  r.settings = settings_pairs(config);
  r.plan = std::move(plan);
  if (r.plan.planner.empty()) r.plan.planner = config.policy;
  r.baseline = meta.baseline;
  r.timeline = thin_timeline(timeline, iterations, r.timeline_dropped);
  r.iterations = std::move(iterations);
  r.evictions = std::move(evictions);
  return r;
}

run_report make_report(const engine& e, const settings& config, const report_metadata& meta) {
  plan_summary plan;
  plan.planner = config.policy;
  plan.budget = e.budget();
  plan.predicted_peak = e.predicted_peak();
  plan.traced_mapped_peak = e.planning_mapped_peak();
  plan.cache_allowance = to_string(e.plan_allowance());
  const engine::plan_compute pc = e.planned_compute();
  plan.added_compute_s = pc.added_s;
  plan.floor_s = pc.floor_s;
  plan.floor_with_offload = pc.floor_with_offload;
  plan.traced_compute_s = pc.traced_s;
  plan.planning_s = pc.planning_s;
  plan.error = e.plan_error();
  const engine::plan_link pl = e.planned_link();
  plan.offloads = pl.offloads;
  plan.offloaded_bytes = pl.offloaded_bytes;
  plan.host_bytes = pl.host_bytes;
  plan.link_busy_s = pl.link_busy_s;
  plan.predicted_stall_s = pl.predicted_stall_s;
  plan.link_to_host_bytes_per_s = pl.to_host_bytes_per_s;
  plan.link_to_device_bytes_per_s = pl.to_device_bytes_per_s;
  plan.link_source = pl.source;
  plan.offload_error = pl.refused;
  const engine::plan_time pt = e.predicted_time();
  plan.predicted_device_s = pt.at_plan.device_s;
  plan.host_s_per_launch = pt.at_plan.host_s_per_launch;
  plan.predicted_launches = pt.at_plan.launches;
  plan.predicted_iteration_s = pt.at_plan.predicted_s;
  plan.traced_active_s = pt.traced.active_s;
  plan.traced_observation_s = pt.traced.observation_s;
  plan.traced_recording_s = pt.traced.recording_s;
  plan.traced_launches = pt.traced.launches;
  plan.predicted_map_backs = pt.at_plan.remaps.map_backs;
  plan.predicted_vmm_calls = pt.at_plan.vmm_calls;
  plan.predicted_map_back_bytes = pt.at_plan.remaps.bytes;
  plan.predicted_vmm_s = pt.at_plan.vmm_s;
  plan.vmm_cycle_s = pt.vmm_cycle.cycle_s;
  plan.vmm_byte_s = pt.vmm_cycle.byte_s;
  plan.vmm_probe = pt.vmm_cycle.error.empty() ? pt.vmm_cycle.device : "failed: " + pt.vmm_cycle.error;
  plan.predicted_hashes = pt.at_plan.checks.hashes;
  plan.predicted_hashed_bytes = pt.at_plan.checks.hashed_bytes;
  plan.predicted_check_waits = pt.at_plan.checks.waits;
  plan.predicted_input_copy_bytes = pt.at_plan.checks.copied_bytes;
  plan.predicted_check_s = pt.at_plan.check_s;
  plan.hash_issue_s = pt.hash.issue_s;
  plan.hash_wait_s = pt.hash.wait_s;
  plan.hash_byte_s = pt.hash.byte_s;
  plan.hash_probe = pt.hash.error.empty() ? pt.hash.device : "failed: " + pt.hash.error;
  return make_report(config, meta, std::move(plan), e.iterations(), e.evictions(), e.timeline());
}

report_totals totals(const run_report& r) {
  report_totals t;
  // At most the schema's largest integer, so that the summary of a report read from a file
  // (each count at most 2^53) is written back as a valid one.
  const auto add = [](std::size_t& total, std::size_t v) {
    total = std::min<std::size_t>(saturating_add(total, v), max_report_integer);
  };
  t.iterations = r.iterations.size();
  for (const auto& it : r.iterations) {
    const bool planned = (it.state == engine_state::validate || it.state == engine_state::steady) && it.budget > 0;
    if (it.state == engine_state::trace) t.traced_peak = std::max(t.traced_peak, it.peak_mapped);
    if (planned) {
      ++t.planned_iterations;
      t.budgeted_peak = std::max(t.budgeted_peak, it.peak_mapped);
    }
    // A traced iteration under an absolute budget (Note [Offloading the traced iteration])
    // is held to it as well.
    if (it.budget > 0 && it.peak_mapped > it.budget) t.within_budget = false;
    add(t.offloads, it.offloads);
    add(t.offloaded_bytes, it.offloaded_bytes);
    add(t.prefetched, it.prefetched);
    add(t.pressure_evictions, it.pressure_evictions);
    add(t.kept_resident, it.kept_resident);
    add(t.stray_pointers, it.stray_pointers);
    add(t.unseen_writes, it.unseen_writes);
    add(t.hashed_bytes, it.hashed_bytes);
    add(t.copied_bytes, it.copied_bytes);
    add(t.uncopied_bytes, it.uncopied_bytes);
    t.host_held_bytes = std::max(t.host_held_bytes, it.host_held_bytes);
    add(t.check_waits, it.check_waits);
    add(t.settle_waits, it.settle_waits);
    t.budget_lifted += it.budget_lifted ? 1 : 0;
    add(t.retained, it.retained);
    add(t.allocator_waits, it.allocator_waits);
    add(t.handoffs, it.handoffs);
    add(t.packed, it.packed);
    add(t.fetches, it.fetches);
    add(t.link_copies, it.link_copies);
    add(t.fetched_bytes, it.fetched_bytes);
    add(t.safety_fetches, it.safety_fetches);
    add(t.failed_copies, it.failed_copies);
    t.link_busy_s = std::min(t.link_busy_s + it.link_busy_s, max_report_seconds);
    t.copy_stall_s = std::min(t.copy_stall_s + it.copy_stall_s, max_report_seconds);
    t.release_wait_s = std::min(t.release_wait_s + it.release_wait_s, max_report_seconds);
    add(t.evictions, it.evictions);
    add(t.evicted_bytes, it.evicted_bytes);
    add(t.recomputed_launches, it.recomputed_launches);
    t.recompute_s = std::min(t.recompute_s + it.recompute_s, max_report_seconds);
    t.stall_s = std::min(t.stall_s + it.stall_s, max_report_seconds);
    t.diverged += it.diverged ? 1 : 0;
    add(t.validation_mismatches, it.validation_mismatches);
  }
  return t;
}

// ---- JSON ----------------------------------------------------------------------------------------

std::string to_json(const run_report& r) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  w.member("schema", report_schema_name);
  w.member("schema_version", report_schema_version);
  w.member("generator", r.generator);
  w.key("run");
  w.begin_object();
  w.member("model", r.model);
  w.member("device", r.device);
  w.member("granularity_bytes", r.granularity);
  w.end_object();
  w.key("settings");
  w.begin_object();
  for (const auto& [name, value] : r.settings) w.member(name, value);
  w.end_object();
  w.key("plan");
  w.begin_object();
  w.member("planner", r.plan.planner);
  w.member("budget_bytes", r.plan.budget);
  w.member("predicted_peak_bytes", r.plan.predicted_peak);
  w.member("traced_mapped_peak_bytes", r.plan.traced_mapped_peak);
  w.member("cache_allowance", r.plan.cache_allowance);
  w.member("added_compute_s", r.plan.added_compute_s);
  w.member("floor_s", r.plan.floor_s);
  w.member("floor_with_offload", r.plan.floor_with_offload);
  w.member("traced_compute_s", r.plan.traced_compute_s);
  w.member("planning_s", r.plan.planning_s);
  w.member("offloads", r.plan.offloads);
  w.member("offloaded_bytes", r.plan.offloaded_bytes);
  w.member("host_bytes", r.plan.host_bytes);
  w.member("link_busy_s", r.plan.link_busy_s);
  w.member("predicted_stall_s", r.plan.predicted_stall_s);
  w.member("link_to_host_bytes_per_s", r.plan.link_to_host_bytes_per_s);
  w.member("link_to_device_bytes_per_s", r.plan.link_to_device_bytes_per_s);
  w.member("link_source", r.plan.link_source);
  w.member("offload_error", r.plan.offload_error);
  w.member("predicted_device_s", r.plan.predicted_device_s);
  w.member("host_s_per_launch", r.plan.host_s_per_launch);
  w.member("predicted_launches", r.plan.predicted_launches);
  w.member("predicted_iteration_s", r.plan.predicted_iteration_s);
  w.member("traced_active_s", r.plan.traced_active_s);
  w.member("traced_observation_s", r.plan.traced_observation_s);
  w.member("traced_recording_s", r.plan.traced_recording_s);
  w.member("traced_launches", r.plan.traced_launches);
  w.member("predicted_map_backs", r.plan.predicted_map_backs);
  w.member("predicted_map_back_bytes", r.plan.predicted_map_back_bytes);
  w.member("predicted_vmm_calls", r.plan.predicted_vmm_calls);
  w.member("predicted_vmm_s", r.plan.predicted_vmm_s);
  w.member("vmm_cycle_s", r.plan.vmm_cycle_s);
  w.member("vmm_byte_s", r.plan.vmm_byte_s);
  w.member("vmm_probe", r.plan.vmm_probe);
  w.member("predicted_hashes", r.plan.predicted_hashes);
  w.member("predicted_hashed_bytes", r.plan.predicted_hashed_bytes);
  w.member("predicted_check_waits", r.plan.predicted_check_waits);
  w.member("predicted_input_copy_bytes", r.plan.predicted_input_copy_bytes);
  w.member("predicted_check_s", r.plan.predicted_check_s);
  w.member("hash_issue_s", r.plan.hash_issue_s);
  w.member("hash_wait_s", r.plan.hash_wait_s);
  w.member("hash_byte_s", r.plan.hash_byte_s);
  w.member("hash_probe", r.plan.hash_probe);
  w.member("error", r.plan.error);
  w.end_object();
  w.key("baseline");
  if (r.baseline) {
    w.begin_object(true);
    w.member("peak_mapped_bytes", r.baseline->peak_mapped);
    w.member("iteration_s", r.baseline->iteration_s);
    w.end_object();
  } else {
    w.null();
  }
  const report_totals t = totals(r);
  w.key("summary");
  w.begin_object();
  w.member("iterations", t.iterations);
  w.member("planned_iterations", t.planned_iterations);
  w.member("traced_peak_bytes", t.traced_peak);
  w.member("budgeted_peak_bytes", t.budgeted_peak);
  w.member("within_budget", t.within_budget);
  w.member("evictions", t.evictions);
  w.member("evicted_bytes", t.evicted_bytes);
  w.member("recomputed_launches", t.recomputed_launches);
  w.member("recompute_s", t.recompute_s);
  w.member("stall_s", t.stall_s);
  w.member("diverged_iterations", t.diverged);
  w.member("validation_mismatches", t.validation_mismatches);
  w.end_object();
  w.key("iterations");
  w.begin_array();
  for (const auto& it : r.iterations) {
    w.begin_object(true);
    w.member("index", it.index);
    w.member("state", to_string(it.state));
    w.member("peak_mapped_bytes", it.peak_mapped);
    w.member("budget_bytes", it.budget);
    w.member("evictions", it.evictions);
    w.member("evicted_bytes", it.evicted_bytes);
    w.member("recomputed_launches", it.recomputed_launches);
    w.member("recompute_s", it.recompute_s);
    w.member("stall_s", it.stall_s);
    w.member("prefetched", it.prefetched);
    w.member("pressure_evictions", it.pressure_evictions);
    w.member("kept_resident", it.kept_resident);
    w.member("stray_pointers", it.stray_pointers);
    w.member("unseen_writes", it.unseen_writes);
    w.member("hashed_bytes", it.hashed_bytes);
    w.member("copied_bytes", it.copied_bytes);
    w.member("uncopied_bytes", it.uncopied_bytes);
    w.member("host_held_bytes", it.host_held_bytes);
    w.member("check_waits", it.check_waits);
    w.member("settle_waits", it.settle_waits);
    w.member("retained", it.retained);
    w.member("offloads", it.offloads);
    w.member("offloaded_bytes", it.offloaded_bytes);
    w.member("offload_restores", it.offload_restores);
    w.member("fetches", it.fetches);
    w.member("fetched_bytes", it.fetched_bytes);
    w.member("link_copies", it.link_copies);
    w.member("safety_fetches", it.safety_fetches);
    w.member("failed_copies", it.failed_copies);
    w.member("link_busy_s", it.link_busy_s);
    w.member("copy_stall_s", it.copy_stall_s);
    w.member("release_wait_s", it.release_wait_s);
    w.member("allocator_waits", it.allocator_waits);
    w.member("handoffs", it.handoffs);
    w.member("packed", it.packed);
    w.member("budget_lifted", it.budget_lifted);
    w.member("diverged", it.diverged);
    if (it.diverged) w.member("divergence", it.divergence);
    w.member("validation_mismatches", it.validation_mismatches);
    w.member("engine_s", it.engine_s);
    // Note [Interception cost] (runtime/engine.cpp).
    w.member("launches", it.launches);
    w.member("launch_hooks_s", it.launch_hooks_s);
    w.member("launch_hook_ns", it.launches == 0 ? 0.0 : it.launch_hooks_s * 1e9 / static_cast<double>(it.launches));
    w.member("vmm_calls", it.vmm_calls);
    w.member("wall_s", it.wall_s);
    w.member("active_s", it.active_s);
    w.member("predicted_s", it.predicted_s);
    w.end_object();
  }
  w.end_array();
  w.key("evictions");
  w.begin_array();
  for (const auto& e : r.evictions) {
    w.begin_object(true);
    w.member("size_bytes", e.size);
    w.member("producer", e.producer);
    w.member("times_evicted", e.times_evicted);
    w.member("times_recomputed", e.times_recomputed);
    w.member("recompute_cost_s", e.recompute_cost_s);
    w.member("never_evict", e.never_evict);
    w.end_object();
  }
  w.end_array();
  w.key("timeline");
  w.begin_object();
  w.member("dropped_repeats", r.timeline_dropped);
  w.key("events");
  w.begin_array();
  for (const auto& re : r.timeline) {
    const timeline_event& e = re.event;
    w.begin_object(true);
    w.member("kind", kind_name(e.what));
    w.member("iteration", re.iteration);
    w.member("begin_s", std::max(0.0, e.begin_s));
    w.member("end_s", std::max(0.0, e.end_s));
    switch (e.what) {
      case timeline_event::kind::memory:
        w.member("launch", re.launch);
        w.member("mapped_bytes", e.mapped);
        w.member("allocated_bytes", e.allocated);
        w.member("evicted_bytes", e.evicted);
        break;
      case timeline_event::kind::evict:
      case timeline_event::kind::regenerate:
      case timeline_event::kind::offload:
      case timeline_event::kind::fetch:
      case timeline_event::kind::iteration:
        if (e.what != timeline_event::kind::iteration) w.member("launch", re.launch);
        w.member("bytes", e.bytes);
        w.member("mapped_bytes", e.mapped);
        w.member("allocated_bytes", e.allocated);
        w.member("label", e.label);
        if (e.address != 0) w.member("address", static_cast<std::size_t>(e.address));
        break;
      case timeline_event::kind::allocate:
      case timeline_event::kind::release:
        w.member("bytes", e.bytes);
        w.member("address", static_cast<std::size_t>(e.address));
        break;
    }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  w.end_object();
  return out;
}

namespace {

std::size_t size_or(const json::value& obj, std::string_view key, std::size_t otherwise = 0) {
  const json::value* v = obj.find(key);
  return v == nullptr ? otherwise : static_cast<std::size_t>(v->as_size());
}

}  // namespace

run_report parse_report(std::string_view json_text, std::string_view source) {
  const json::value doc = json::parse(json_text, source);
  // Name the version problem first: it explains every other difference.
  if (const json::value* v = doc.find("schema_version");
      v != nullptr && v->is_number() && v->as_number() != report_schema_version) {
    throw config_error(std::string(source) + ": report schema version " + json::number(v->as_number()) +
                       " is not supported (this sublinear reads version " + std::to_string(report_schema_version) +
                       ")");
  }
  static const json::value schema = json::parse(report_schema(), "report-schema.json");
  const auto problems = json::validate(doc, schema);
  if (!problems.empty()) {
    std::string what = std::string(source) + ": not a valid sublinear report (docs/report-schema.json):";
    for (const auto& p : problems) what += "\n  " + p;
    throw config_error(what);
  }
  run_report r;
  r.generator = doc.at("generator").as_string();
  const auto& run = doc.at("run");
  r.model = run.at("model").as_string();
  r.device = run.at("device").as_string();
  r.granularity = size_or(run, "granularity_bytes");
  for (const auto& [name, value] : doc.at("settings").as_object()) r.settings.emplace_back(name, value.as_string());
  const auto& plan = doc.at("plan");
  r.plan.planner = plan.at("planner").as_string();
  r.plan.budget = size_or(plan, "budget_bytes");
  r.plan.predicted_peak = size_or(plan, "predicted_peak_bytes");
  r.plan.traced_mapped_peak = size_or(plan, "traced_mapped_peak_bytes");
  // Optional plan fields: a report from an earlier version of sublinear may lack them.
  if (const json::value* a = plan.find("cache_allowance")) r.plan.cache_allowance = a->as_string();
  const auto seconds_or_zero = [&plan](std::string_view key) {
    const json::value* v = plan.find(key);
    return v != nullptr ? v->as_number() : 0.0;
  };
  r.plan.added_compute_s = seconds_or_zero("added_compute_s");
  r.plan.floor_s = seconds_or_zero("floor_s");
  if (const json::value* f = plan.find("floor_with_offload")) r.plan.floor_with_offload = f->as_bool();  // optional
  r.plan.traced_compute_s = seconds_or_zero("traced_compute_s");
  r.plan.planning_s = seconds_or_zero("planning_s");
  r.plan.offloads = size_or(plan, "offloads");
  r.plan.offloaded_bytes = size_or(plan, "offloaded_bytes");
  r.plan.host_bytes = size_or(plan, "host_bytes");
  r.plan.link_busy_s = seconds_or_zero("link_busy_s");
  r.plan.predicted_stall_s = seconds_or_zero("predicted_stall_s");
  r.plan.link_to_host_bytes_per_s = seconds_or_zero("link_to_host_bytes_per_s");
  r.plan.link_to_device_bytes_per_s = seconds_or_zero("link_to_device_bytes_per_s");
  if (const json::value* v = plan.find("link_source")) r.plan.link_source = v->as_string();
  if (const json::value* v = plan.find("offload_error")) r.plan.offload_error = v->as_string();
  r.plan.predicted_device_s = seconds_or_zero("predicted_device_s");
  r.plan.host_s_per_launch = seconds_or_zero("host_s_per_launch");
  r.plan.predicted_launches = size_or(plan, "predicted_launches");
  r.plan.predicted_iteration_s = seconds_or_zero("predicted_iteration_s");
  r.plan.traced_active_s = seconds_or_zero("traced_active_s");
  r.plan.traced_observation_s = seconds_or_zero("traced_observation_s");
  r.plan.traced_recording_s = seconds_or_zero("traced_recording_s");
  r.plan.traced_launches = size_or(plan, "traced_launches");
  r.plan.predicted_map_backs = size_or(plan, "predicted_map_backs");
  r.plan.predicted_map_back_bytes = size_or(plan, "predicted_map_back_bytes");
  r.plan.predicted_vmm_calls = size_or(plan, "predicted_vmm_calls");
  r.plan.predicted_vmm_s = seconds_or_zero("predicted_vmm_s");
  r.plan.vmm_cycle_s = seconds_or_zero("vmm_cycle_s");
  r.plan.vmm_byte_s = seconds_or_zero("vmm_byte_s");
  if (const json::value* v = plan.find("vmm_probe")) r.plan.vmm_probe = v->as_string();
  r.plan.predicted_hashes = size_or(plan, "predicted_hashes");
  r.plan.predicted_hashed_bytes = size_or(plan, "predicted_hashed_bytes");
  r.plan.predicted_check_waits = size_or(plan, "predicted_check_waits");
  r.plan.predicted_input_copy_bytes = size_or(plan, "predicted_input_copy_bytes");
  r.plan.predicted_check_s = seconds_or_zero("predicted_check_s");
  r.plan.hash_issue_s = seconds_or_zero("hash_issue_s");
  r.plan.hash_wait_s = seconds_or_zero("hash_wait_s");
  r.plan.hash_byte_s = seconds_or_zero("hash_byte_s");
  if (const json::value* v = plan.find("hash_probe")) r.plan.hash_probe = v->as_string();
  r.plan.error = plan.at("error").as_string();
  if (const auto& b = doc.at("baseline"); b.is_object()) {
    r.baseline = baseline_figures{size_or(b, "peak_mapped_bytes"), b.at("iteration_s").as_number()};
  }
  for (const auto& it : doc.at("iterations").as_array()) {
    iteration_report ir;
    ir.index = size_or(it, "index");
    ir.state = parse_state(it.at("state").as_string());
    ir.peak_mapped = size_or(it, "peak_mapped_bytes");
    ir.budget = size_or(it, "budget_bytes");
    ir.evictions = size_or(it, "evictions");
    ir.evicted_bytes = size_or(it, "evicted_bytes");
    ir.recomputed_launches = size_or(it, "recomputed_launches");
    ir.recompute_s = it.at("recompute_s").as_number();
    ir.stall_s = it.at("stall_s").as_number();
    // Optional: reports from earlier versions of sublinear may lack them.
    ir.prefetched = size_or(it, "prefetched");
    ir.pressure_evictions = size_or(it, "pressure_evictions");
    ir.kept_resident = size_or(it, "kept_resident");
    ir.stray_pointers = size_or(it, "stray_pointers");
    ir.unseen_writes = size_or(it, "unseen_writes");
    ir.hashed_bytes = size_or(it, "hashed_bytes");
    ir.copied_bytes = size_or(it, "copied_bytes");
    ir.uncopied_bytes = size_or(it, "uncopied_bytes");
    ir.host_held_bytes = size_or(it, "host_held_bytes");
    ir.check_waits = size_or(it, "check_waits");
    ir.settle_waits = size_or(it, "settle_waits");
    ir.retained = size_or(it, "retained");
    ir.offloads = size_or(it, "offloads");
    ir.offloaded_bytes = size_or(it, "offloaded_bytes");
    ir.offload_restores = size_or(it, "offload_restores");
    ir.fetches = size_or(it, "fetches");
    ir.fetched_bytes = size_or(it, "fetched_bytes");
    ir.link_copies = size_or(it, "link_copies");
    ir.safety_fetches = size_or(it, "safety_fetches");
    ir.failed_copies = size_or(it, "failed_copies");
    const auto number_or_zero = [&it](std::string_view key) {
      const json::value* v = it.find(key);
      return v != nullptr ? v->as_number() : 0.0;
    };
    ir.link_busy_s = number_or_zero("link_busy_s");
    ir.copy_stall_s = number_or_zero("copy_stall_s");
    ir.release_wait_s = number_or_zero("release_wait_s");
    ir.allocator_waits = size_or(it, "allocator_waits");
    ir.handoffs = size_or(it, "handoffs");
    ir.packed = size_or(it, "packed");
    if (const json::value* l = it.find("budget_lifted")) ir.budget_lifted = l->as_bool();  // optional
    ir.diverged = it.at("diverged").as_bool();
    if (const json::value* d = it.find("divergence")) ir.divergence = d->as_string();  // optional
    ir.validation_mismatches = size_or(it, "validation_mismatches");
    if (const json::value* e = it.find("engine_s")) ir.engine_s = e->as_number();  // optional
    ir.launches = size_or(it, "launches");  // optional, with the two below (launch_hook_ns is derived)
    if (const json::value* h = it.find("launch_hooks_s")) ir.launch_hooks_s = h->as_number();
    ir.vmm_calls = size_or(it, "vmm_calls");
    ir.wall_s = it.at("wall_s").as_number();
    ir.active_s = number_or_zero("active_s");  // optional, with predicted_s
    ir.predicted_s = number_or_zero("predicted_s");
    r.iterations.push_back(ir);
  }
  for (const auto& e : doc.at("evictions").as_array()) {
    eviction_record er;
    er.size = size_or(e, "size_bytes");
    er.producer = e.at("producer").as_string();
    er.times_evicted = size_or(e, "times_evicted");
    er.times_recomputed = size_or(e, "times_recomputed");
    er.recompute_cost_s = e.at("recompute_cost_s").as_number();
    er.never_evict = e.at("never_evict").as_bool();
    r.evictions.push_back(er);
  }
  const auto& tl = doc.at("timeline");
  r.timeline_dropped = size_or(tl, "dropped_repeats");
  for (const auto& e : tl.at("events").as_array()) {
    report_event re;
    re.event.what = parse_kind(e.at("kind").as_string());
    re.iteration = size_or(e, "iteration");
    re.launch = size_or(e, "launch");
    re.event.begin_s = e.at("begin_s").as_number();
    re.event.end_s = e.at("end_s").as_number();
    re.event.bytes = size_or(e, "bytes");
    re.event.mapped = size_or(e, "mapped_bytes");
    re.event.allocated = size_or(e, "allocated_bytes");
    re.event.evicted = size_or(e, "evicted_bytes");
    if (const json::value* l = e.find("label")) re.event.label = l->as_string();
    re.event.address = static_cast<std::uintptr_t>(size_or(e, "address"));
    r.timeline.push_back(std::move(re));
  }
  return r;
}

// ---- text ----------------------------------------------------------------------------------------

std::string render_eviction_table(const run_report& r, std::size_t top) {
  std::vector<const eviction_record*> order;
  for (const auto& e : r.evictions) order.push_back(&e);
  // Most bytes given back first: those are the buffers the budget is met with.
  std::stable_sort(order.begin(), order.end(), [](const eviction_record* a, const eviction_record* b) {
    // In long double: a size times a count can pass 2^64 (each is at most 2^53 in a report).
    const long double va = static_cast<long double>(a->size) * static_cast<long double>(a->times_evicted);
    const long double vb = static_cast<long double>(b->size) * static_cast<long double>(b->times_evicted);
    if (va != vb) return va > vb;
    return a->recompute_cost_s * static_cast<double>(a->times_recomputed) >
           b->recompute_cost_s * static_cast<double>(b->times_recomputed);
  });
  if (order.empty()) return "  (no buffer was evicted)\n";
  std::vector<std::vector<std::string>> rows;
  const std::size_t shown = std::min(top, order.size());
  bool any_note = false;
  for (std::size_t i = 0; i < shown; ++i) any_note = any_note || order[i]->never_evict;
  for (std::size_t i = 0; i < shown; ++i) {
    const eviction_record& e = *order[i];
    rows.push_back({std::to_string(i + 1), format_bytes(e.size), e.producer.empty() ? "(unknown)" : e.producer,
                    std::to_string(e.times_evicted), std::to_string(e.times_recomputed),
                    text::seconds(e.recompute_cost_s),
                    text::seconds(e.recompute_cost_s * static_cast<double>(e.times_recomputed)),
                    e.never_evict ? "never evict (validation failed)" : ""});
    if (!any_note) rows.back().pop_back();
  }
  std::vector<std::string> header = {"#", "size", "producer kernel", "evicted", "recomputed", "cost/regen", "total cost", "note"};
  if (!any_note) header.pop_back();
  std::string out = text::table(header, rows, {false, false, true, false, false, false, false, true});
  if (order.size() > shown)
    out += "  ... and " + std::to_string(order.size() - shown) + " more buffers (the JSON report lists every one)\n";
  return out;
}

std::string render_text(const run_report& r, std::size_t top) {
  const report_totals t = totals(r);
  std::string budget_setting;
  for (const auto& [name, value] : r.settings)
    if (name == "SUBLINEAR_BUDGET") budget_setting = value;
  std::ostringstream out;
  out << "sublinear report: " << (r.model.empty() ? "(unnamed run)" : r.model) << " on the " << r.device
      << " device, policy " << r.plan.planner << "\n\n";
  if (r.plan.budget > 0) {
    out << "  budget             " << format_bytes(r.plan.budget);
    if (!budget_setting.empty()) out << " (SUBLINEAR_BUDGET=" << budget_setting << ")";
    out << "\n  predicted peak     " << format_bytes(r.plan.predicted_peak) << " (the plan's live buffers)\n";
    if (r.plan.cache_allowance == "scaled")
      out << "  cache allowance    scaled to the budget: below the smallest budget the traced cache allows\n";
    if (r.plan.traced_compute_s > 0) {
      const auto share = [&](double s) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "+%.1f%%", 100.0 * s / r.plan.traced_compute_s);
        return std::string(buf);
      };
      out << "  planned recompute  " << text::seconds(r.plan.added_compute_s) << " per iteration ("
          << share(r.plan.added_compute_s) << " of the traced " << text::seconds(r.plan.traced_compute_s)
          << (r.plan.floor_with_offload ? "); no plan that may also offload adds less time than "
                                        : "); no plan recomputes less than ")
          << text::seconds(r.plan.floor_s) << " (" << share(r.plan.floor_s)
          << (r.plan.floor_with_offload ? ", the offload floor)\n" : ", the recompute floor)\n");
    }
  } else {
    out << "  budget             none in force"
        << (r.plan.error.empty() ? std::string() : ": " + r.plan.error) << "\n";
  }
  if (r.plan.planning_s > 0)
    out << "  planning           " << text::seconds(r.plan.planning_s)
        << " (the pause at the marker after the traced iteration, in no iteration's time)\n";
  if (r.baseline) out << "  baseline peak      " << format_bytes(r.baseline->peak_mapped) << " mapped (run without a budget)\n";
  if (t.traced_peak > 0) out << "  traced peak        " << format_bytes(t.traced_peak) << " mapped (traced iterations)\n";
  // Only the traced iterations' offloads (Note [Offloading the traced iteration]); the
  // plan's own appear on the link lines below.
  std::size_t traced_offloads = 0, traced_offloaded_bytes = 0;
  for (const auto& it : r.iterations) {
    if (it.state != engine_state::trace) continue;
    traced_offloads = saturating_add(traced_offloads, it.offloads);
    traced_offloaded_bytes = saturating_add(traced_offloaded_bytes, it.offloaded_bytes);
  }
  if (traced_offloads > 0)
    out << "  offloaded          " << traced_offloads << " blocks (" << format_bytes(traced_offloaded_bytes)
        << ") to host memory while tracing under the budget\n";
  if (t.fetches > 0 || r.plan.offloads > 0) {
    char line[400];
    std::snprintf(line, sizeof line,
                  "  link               %zu planned offloads (%s each way per iteration predicted, %s of host "
                  "memory), link %.1f/%.1f GB/s (%s)\n"
                  "  offload copies     %s to host, %s back in %zu fetches (%zu by the safety net, %zu failed "
                  "copies), %zu copies over the link; link busy %s, compute waited %s for fetches, host waited %s "
                  "at release points\n",
                  r.plan.offloads, format_bytes(r.plan.offloaded_bytes).c_str(), format_bytes(r.plan.host_bytes).c_str(),
                  r.plan.link_to_host_bytes_per_s / 1e9, r.plan.link_to_device_bytes_per_s / 1e9,
                  r.plan.link_source.c_str(), format_bytes(t.offloaded_bytes).c_str(),
                  format_bytes(t.fetched_bytes).c_str(), t.fetches, t.safety_fetches, t.failed_copies, t.link_copies,
                  text::seconds(t.link_busy_s).c_str(), text::seconds(t.copy_stall_s).c_str(),
                  text::seconds(t.release_wait_s).c_str());
    out << line;
  }
  if (!r.plan.offload_error.empty()) out << "  offload            off: " << r.plan.offload_error << "\n";
  if (r.plan.predicted_iteration_s > 0.0) {
    // The plan's prediction, then the planned iterations' (Note [Predicted iteration time]).
    std::vector<double> active, predicted;
    for (const auto& it : r.iterations) {
      if (it.predicted_s <= 0.0 || it.diverged) continue;
      active.push_back(it.active_s);
      predicted.push_back(it.predicted_s);
    }
    char line[400];
    std::snprintf(line, sizeof line,
                  "  predicted time     %s per iteration: %s on the device (the simulator) + %zu launches x "
                  "%.1f us on the host (the traced iteration's) + %zu map-backs (%s, twice) in %s\n",
                  text::seconds(r.plan.predicted_iteration_s).c_str(), text::seconds(r.plan.predicted_device_s).c_str(),
                  r.plan.predicted_launches, r.plan.host_s_per_launch * 1e6, r.plan.predicted_map_backs,
                  format_bytes(r.plan.predicted_map_back_bytes).c_str(), text::seconds(r.plan.predicted_vmm_s).c_str());
    out << line;
    if (!active.empty())
      out << "  measured time      " << text::seconds(median_of(active)) << " per planned iteration (median), "
          << text::seconds(median_of(predicted)) << " predicted before each (median)\n";
  }
  if (t.planned_iterations > 0) {
    out << "  budgeted peak      " << format_bytes(t.budgeted_peak) << " mapped over " << t.planned_iterations
        << " planned iterations, " << (t.within_budget ? "within the budget" : "ABOVE THE BUDGET") << "\n";
  }
  out << "  evictions          " << t.evictions << " (" << format_bytes(t.evicted_bytes) << " given back)\n"
      << "  recomputed         " << t.recomputed_launches << " launches, " << text::seconds(t.recompute_s)
      << " of recompute, " << text::seconds(t.stall_s) << " stalled\n";
  if (t.prefetched > 0) out << "  prefetched         " << t.prefetched << " regenerations ahead of their consumer\n";
  if (t.pressure_evictions > 0)
    out << "  pressure valve     " << t.pressure_evictions << " evictions the plan did not foresee\n";
  if (t.kept_resident > 0)
    out << "  kept resident      " << t.kept_resident
        << " planned evictions not made: no room for the buffer's own pages\n";
  if (t.stray_pointers > 0)
    out << "  stray pointers     " << t.stray_pointers
        << " parameter words into evicted blocks that the traced launches did not hold: left alone\n";
  if (t.unseen_writes > 0)
    out << "  unseen writes      " << t.unseen_writes
        << " writes the trace did not see, found (buffers kept, or recipe inputs read from copies)\n";
  if (t.hashed_bytes > 0)
    out << "  write checks       " << format_bytes(t.hashed_bytes) << " hashed, " << format_bytes(t.copied_bytes)
        << " copied to host memory, " << t.check_waits << " + " << t.settle_waits
        << " waits for the stream, to find writes the trace did not see\n";
  if (t.uncopied_bytes > 0)
    out << "  uncopied inputs    " << format_bytes(t.uncopied_bytes)
        << " of recipe inputs not copied at releases: no room under the host budget (an unseen write to them is "
           "caught, not undone)\n";
  if (t.host_held_bytes > 0)
    out << "  host memory        " << format_bytes(t.host_held_bytes)
        << " held for copies at most (offload pool, input copies, blocks offloaded while tracing)\n";
  if (t.budget_lifted > 0)
    out << "  budget lifted      " << t.budget_lifted
        << " iterations ran out of room with the cache scaled to the budget and finished without it\n";
  if (t.retained > 0)
    out << "  retained           " << t.retained << " frees deferred so that recipes read the block in place\n";
  if (t.allocator_waits > 0 || t.handoffs > 0)
    out << "  allocator          " << t.allocator_waits << " waits for a stream to make room, " << t.handoffs
        << " chunks taken from queued work without one\n";
  if (t.packed > 0)
    out << "  packed             " << t.packed << " evicted buffers placed in shared pages with others of their recipe\n";
  if (t.diverged > 0) out << "  diverged           " << t.diverged << " iterations differed from the trace and were traced again\n";
  if (t.validation_mismatches > 0)
    out << "  validation         " << t.validation_mismatches << " regenerated buffers differed; they are no longer evicted\n";

  out << "\nper iteration\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& it : r.iterations) {
    rows.push_back({std::to_string(it.index), std::string(to_string(it.state)) + (it.diverged ? " (diverged)" : ""),
                    format_bytes(it.peak_mapped), it.budget ? format_bytes(it.budget) : "-",
                    std::to_string(it.evictions), std::to_string(it.recomputed_launches), text::seconds(it.recompute_s),
                    text::seconds(it.stall_s), text::seconds(it.wall_s)});
  }
  out << text::table({"iter", "state", "peak mapped", "budget", "evictions", "recomputed", "recompute", "stall", "wall"}, rows,
               {false, true, false, false, false, false, false, false, false});
  for (const auto& it : r.iterations) {
    if (it.diverged && !it.divergence.empty()) out << "  iteration " << it.index << " diverged: " << it.divergence << "\n";
  }
  out << "\ntop evicted buffers (by bytes given back over the run)\n" << render_eviction_table(r, top);
  return out.str();
}

// ---- files ----------------------------------------------------------------------------------------

std::string read_text_file(const std::string& path) {
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) throw error("cannot open '" + path + "': " + std::strerror(errno));
  // A device (/dev/zero) or a pipe has no size to check and may never end.
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a pipe"
                                              : "a socket";
    throw config_error("cannot read '" + path + "': not a regular file (" + kind +
                       "); save the report to a file and give that file's path");
  }
  const auto too_large = [&path](std::uint64_t bytes) {
    throw config_error("cannot read '" + path + "': " + std::to_string(bytes) + " bytes, more than the limit of " +
                       std::to_string(max_report_file_bytes) + " bytes (1 GiB) for a report; a run's report keeps " +
                       "at most a million timeline events and is far smaller: check that this is a sublinear report");
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_report_file_bytes) too_large(static_cast<std::uint64_t>(st.st_size));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("cannot open '" + path + "': " + std::strerror(errno));
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  std::array<char, 1 << 16> chunk;
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_report_file_bytes) too_large(text.size());  // it grew while being read
  }
  if (in.bad()) throw error("cannot read '" + path + "'");
  return text;
}

void write_text_file(const std::string& path, std::string_view text) { write_file_atomically(path, text); }

namespace text {

std::string seconds(double s) {
  char buf[32];
  if (s == 0.0) return "0";
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  } else if (s < 1.0) {
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  }
  return buf;
}

std::string table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& left) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) l += "  ";
      l += left[c] ? cells[c] + pad : pad + cells[c];
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += "  " + l + "\n";
  };
  line(header);
  std::vector<std::string> rule;
  for (std::size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& row : rows) line(row);
  return out;
}

}  // namespace text

}  // namespace sublinear::runtime
