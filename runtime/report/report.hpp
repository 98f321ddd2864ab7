// Reports: what a run evicted, recomputed and cost, in four forms: a JSON document with a
// versioned schema (docs/report-schema.json), a text summary with the table of the top
// evicted buffers, a Chrome-trace / Perfetto timeline, and an SVG memory-timeline plot.
//
// Note [Report model]
// Rationale: the same figures are written by a training process at exit and rendered
//   later by `sublinear report` from the JSON file alone, so every renderer works on one
//   plain value, `run_report`, that the JSON form carries completely (the file is the
//   interface; nothing a renderer shows comes from elsewhere).
// Approach: make_report() fills a run_report from the engine's public API (iterations,
//   eviction records, timeline, plan figures) plus what only the caller knows (the model
//   or command, the device, a baseline run). The timeline is thinned on the way in:
//   memory samples that repeat the previous one are dropped and every kept sample carries
//   its launch number within its iteration, so the plot's step curves are unchanged.
//   to_json()/parse_report() are inverse (tests check the round trip); parse_report()
//   checks the document against the embedded schema first, so a renderer never sees a
//   malformed value. Renderers are pure functions from run_report to text.
// Limitations: the engine keeps at most engine_options::timeline_limit events; a longer
//   run's report has the early timeline only (the JSON says how many events were kept).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/engine.hpp"
#include "runtime/settings.hpp"

namespace sublinear::runtime {

// "sublinear-report", version 1. A reader accepts its major version only.
inline constexpr std::string_view report_schema_name = "sublinear-report";
inline constexpr int report_schema_version = 1;

// The plan the run used (from the engine).
struct plan_summary {
  std::string planner;              // SUBLINEAR_POLICY
  std::size_t budget = 0;           // bytes (0: no budget or no plan)
  std::size_t predicted_peak = 0;   // the plan's predicted peak (0: no plan)
  // The traced mapped peak the planner's overhead came from (engine::planning_mapped_peak;
  // 0: unknown, as in older reports without it).
  std::size_t traced_mapped_peak = 0;
  std::string error;                // why there is no plan ("" when there is one)
  // "traced" or "scaled": how much of the traced cache the planner's share kept back (Note
  // [Scaled cache allowance] in policy/planning_overhead.hpp; "traced" in older reports without it).
  std::string cache_allowance = "traced";
  // Per iteration, from the traced durations (0 when unknown, as in older reports without
  // them): what the plan recomputes, the recompute floor at the planner's share (no plan
  // recomputes less; Note [Recompute floor]), and the traced iteration's compute.
  double added_compute_s = 0.0;
  double floor_s = 0.0;
  bool floor_with_offload = false;  // floor_s is the offload floor (added time), not the recompute floor
  double traced_compute_s = 0.0;
  // Wall time the program paused at the marker to make the plan (engine::plan_compute;
  // 0 in older reports), with or without a plan made.
  double planning_s = 0.0;
  // Offload (docs/runtime.md, "Offload execution"): the plan's copies per iteration as the
  // simulator predicts them, and the link the plan was made for (0 / "" in older reports).
  std::size_t offloads = 0;
  std::size_t offloaded_bytes = 0;       // each way, per iteration
  std::size_t host_bytes = 0;            // the pinned host pool the offloads' slots take
  double link_busy_s = 0.0;
  double predicted_stall_s = 0.0;
  double link_to_host_bytes_per_s = 0.0;
  double link_to_device_bytes_per_s = 0.0;
  std::string link_source{};             // configured, measured, SUBLINEAR_LINK_BANDWIDTH, synchronous
  std::string offload_error{};           // why offload is off ("" when it is not refused)
  // The plan's predicted iteration time (Note [Predicted iteration time] in
  // runtime/iteration_time.hpp; 0 in older reports): the simulator's device time, the
  // host's cost per launch measured on the traced iteration, the launches a planned
  // iteration runs (traced and replayed) and their sum; the traced iteration's measure.
  double predicted_device_s = 0.0;
  double host_s_per_launch = 0.0;
  std::size_t predicted_launches = 0;
  double predicted_iteration_s = 0.0;
  double traced_active_s = 0.0;
  double traced_observation_s = 0.0;  // of that, the tracer's write observation
  double traced_recording_s = 0.0;    // and the collectors' recording of launches
  std::size_t traced_launches = 0;
  // The plan's map-backs, the VMM calls they and the allocations they displace make, and
  // their cost at the probed device's rate (Note [VMM cost probe] in
  // device/vmm_cost_probe.hpp), in predicted_iteration_s.
  std::size_t predicted_map_backs = 0;
  std::size_t predicted_map_back_bytes = 0;
  std::size_t predicted_vmm_calls = 0;
  double predicted_vmm_s = 0.0;
  double vmm_cycle_s = 0.0;
  double vmm_byte_s = 0.0;
  std::string vmm_probe{};  // the device probed, or why there is no cost ("" without a probe)
  // The write checks' work per planned iteration and its cost at the probed device's rate
  // (Note [Write check work] in runtime/write_check_work.hpp), in predicted_iteration_s.
  std::size_t predicted_hashes = 0;
  std::size_t predicted_hashed_bytes = 0;
  std::size_t predicted_check_waits = 0;
  std::size_t predicted_input_copy_bytes = 0;
  double predicted_check_s = 0.0;
  double hash_issue_s = 0.0;
  double hash_wait_s = 0.0;
  double hash_byte_s = 0.0;
  std::string hash_probe{};  // the device probed, or why there is no cost ("" without a probe)
};

// A run of the same workload without sublinear's budget, when the caller knows one.
struct baseline_figures {
  std::size_t peak_mapped = 0;
  double iteration_s = 0.0;         // median iteration time (0: unknown)
};

// One timeline entry as reports keep it: the engine's event plus, for memory samples, the
// launch number within its iteration.
struct report_event {
  timeline_event event;
  std::size_t iteration = 0;        // index of the iteration it belongs to
  std::size_t launch = 0;           // launches completed in the iteration (memory, evict, regenerate)
};

struct run_report {
  std::string generator;            // "sublinear <version>" (SUBLINEAR_VERSION_STRING)
  std::string model;                // the workload, or the command that ran
  std::string device;               // "host", "cuda"
  std::size_t granularity = 0;      // allocator page size (0: unknown)
  std::vector<std::pair<std::string, std::string>> settings;  // effective SUBLINEAR_* values
  plan_summary plan;
  std::optional<baseline_figures> baseline;
  std::vector<iteration_report> iterations;
  std::vector<eviction_record> evictions;
  std::vector<report_event> timeline;
  std::size_t timeline_dropped = 0; // memory samples left out because they repeated
};

// What the caller knows about the run beyond the engine.
struct report_metadata {
  std::string model;
  std::string device = "host";
  std::size_t granularity = 0;
  std::optional<baseline_figures> baseline;
};

[[nodiscard]] run_report make_report(const engine& e, const settings& config, const report_metadata& meta);
// The same from plain data (tests, other front ends).
[[nodiscard]] run_report make_report(const settings& config, const report_metadata& meta, plan_summary plan,
                                     std::vector<iteration_report> iterations,
                                     std::vector<eviction_record> evictions,
                                     const std::vector<timeline_event>& timeline);

// ---- derived figures (used by every renderer) -------------------------------------------------------

struct report_totals {
  std::size_t iterations = 0;
  std::size_t planned_iterations = 0;   // validate or steady, with a budget
  std::size_t traced_peak = 0;          // largest peak of a traced iteration
  std::size_t budgeted_peak = 0;        // largest peak of a planned iteration
  bool within_budget = true;            // every iteration with a budget peaked at most at it
  std::size_t evictions = 0;
  std::size_t evicted_bytes = 0;
  std::size_t recomputed_launches = 0;
  double recompute_s = 0.0;
  double stall_s = 0.0;
  std::size_t diverged = 0;
  std::size_t validation_mismatches = 0;
  std::size_t offloads = 0;             // blocks offloaded while tracing under an absolute budget
  std::size_t offloaded_bytes = 0;
  std::size_t prefetched = 0;
  std::size_t pressure_evictions = 0;
  std::size_t budget_lifted = 0;   // iterations whose budget was lifted (Note [Scaled cache allowance])
  std::size_t kept_resident = 0;
  std::size_t stray_pointers = 0;       // Note [Stray pointer words]
  std::size_t unseen_writes = 0;        // Note [Unseen writes]
  std::size_t hashed_bytes = 0;
  std::size_t copied_bytes = 0;
  std::size_t uncopied_bytes = 0;      // Note [Host budget]
  std::size_t host_held_bytes = 0;     // the most of any iteration
  std::size_t check_waits = 0;         // Note [Write check work]
  std::size_t settle_waits = 0;        // Note [Unsettled releases]
  std::size_t retained = 0;             // frees deferred (Note [Retention])
  std::size_t allocator_waits = 0;      // the allocator waited for a stream to make room
  std::size_t handoffs = 0;             // Note [Stream-ordered handoff]
  std::size_t packed = 0;               // Note [Packs]
  std::size_t fetches = 0;              // planned offloads' copies back (Note [Offload execution])
  std::size_t link_copies = 0;          // copies queued over the link, both ways (Note [Offload packs])
  std::size_t fetched_bytes = 0;
  std::size_t safety_fetches = 0;
  std::size_t failed_copies = 0;
  double link_busy_s = 0.0;
  double copy_stall_s = 0.0;
  double release_wait_s = 0.0;
};
[[nodiscard]] report_totals totals(const run_report& r);

// ---- renderers ---------------------------------------------------------------------------------------

// The JSON document (docs/report-schema.json).
[[nodiscard]] std::string to_json(const run_report& r);
// Parses and schema-checks a JSON report; throws config_error naming `source` and every
// problem found (at most 20).
[[nodiscard]] run_report parse_report(std::string_view json_text, std::string_view source = "<report>");
// The JSON Schema every report satisfies (the text of docs/report-schema.json).
[[nodiscard]] std::string_view report_schema();

// Summary, per-iteration table and the `top` evicted buffers by bytes evicted.
[[nodiscard]] std::string render_text(const run_report& r, std::size_t top = 10);
// Only the table of the top evicted buffers (size, producer kernel, times evicted and
// recomputed, recompute cost per regeneration and in total).
[[nodiscard]] std::string render_eviction_table(const run_report& r, std::size_t top = 10);

// Chrome trace event format (JSON object form), loadable by chrome://tracing and
// ui.perfetto.dev: a "memory" counter track (mapped, allocated) and slice tracks for
// iterations, evictions, replay (regeneration) and stalls.
[[nodiscard]] std::string render_chrome_trace(const run_report& r);

// An SVG memory-timeline plot: mapped bytes against the launch number within one
// iteration, for the baseline (a traced iteration, unbudgeted) and the budgeted (the last
// planned) iteration, with the budget as a line. Self-contained SVG 1.1.
struct plot_options {
  int width = 960;
  int height = 700;
  std::string title;  // "" : a title naming the model and the budget
};
[[nodiscard]] std::string render_memory_plot(const run_report& r, const plot_options& options = {});

// PyTorch's memory-snapshot format (the pickle torch.cuda.memory._dump_snapshot writes),
// so pytorch.org/memory_viz and torch.cuda._memory_viz open our runs: every allocation,
// free, eviction (a free) and regeneration (an allocation) with its address and size, the
// frames naming what sublinear did. Needs a report whose timeline has the per-block
// events; throws config_error saying so otherwise. Note [Memory snapshot].
[[nodiscard]] std::string render_torch_snapshot(const run_report& r);

// The largest integer and number of seconds a report holds (docs/report-schema.json,
// "$defs"): JSON numbers are exact up to 2^53; 10^9 seconds is about 32 years.
inline constexpr std::uint64_t max_report_integer = std::uint64_t{1} << 53;
inline constexpr double max_report_seconds = 1e9;
// The largest report `sublinear report` reads (docs/reports.md).
inline constexpr std::uint64_t max_report_file_bytes = std::uint64_t{1} << 30;
// Reads a whole file; throws sublinear::error naming the path on failure, config_error
// when it is not a regular file or holds more than max_report_file_bytes.
[[nodiscard]] std::string read_text_file(const std::string& path);
// Writes a whole file (write_file_atomically, Note [Atomic file writes]); throws
// sublinear::error naming the path when any part of the write fails.
void write_text_file(const std::string& path, std::string_view text);

}  // namespace sublinear::runtime
