// The recomputation sweeps of issue 6, as a small library: what `remat_sweeps` (the
// figures program) and `sublinear bench` (the CLI) both run.
//
// Note [Remat sweeps]
// Rationale: the claims sublinear makes (feature-map memory O(sqrt n) in depth at <= 1
//   extra forward, a > 4x cut on long LSTMs, less overhead than DTR at the same share of
//   peak, a larger cut than Re-forwarding at no more overhead) are only worth what their
//   measurement is. Each is measured here side by side in one process, with the models,
//   training loop, allocator and replay engine a user gets, so the figures in
//   docs/benchmarks.md can be reproduced by one command.
// Approach: a sweep is a list of points (a model at one size); at each point a group of
//   runs (the baseline without sublinear first, then sublinear with a planner and a
//   budget) trains the same model from the same seed for the same number of
//   iterations, each in a fresh host session. Groups are repeated in rounds (every run
//   once per round, in order), so load on a shared machine hits every run alike; the
//   time of a run is the median of its steady iterations pooled over the rounds, and a
//   time ratio is taken against the baseline of the same group. Budgets that depend on
//   what a planner can do are chosen from a probe: one traced iteration under the
//   engine, analysed as the engine analyses it, and asked of the planner offline
//   (smallest feasible budget; smallest budget whose plan adds at most one forward's
//   compute), with the engine's own budget arithmetic (budget_for_planner_bytes). A budget
//   the planner cannot meet shows as "infeasible (smallest feasible X)", X as the run's
//   engine reported it (the probe's figure when the message names none); such a run
//   stops after its traced iteration.
// Limitations: the host device is a CPU running each stream on one thread: times show how
//   recomputation scales, not GPU speed, and on a shared machine they carry its load
//   (ratios within one group are the figures to read). Memory figures are exact.
//   Planners' costs are the traced kernel durations, which vary from run to run, so a
//   run's plan can differ slightly from the probe's; a run whose probe-chosen budget then
//   turns out infeasible is retried at 2%, then 5% more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/settings.hpp"

namespace sublinear::figures {

// "depth", "lstm", "budget", "reforward", in the order `all` runs them.
[[nodiscard]] std::span<const std::string_view> sweep_names() noexcept;

struct bench_options {
  std::vector<std::string> sweeps;  // names from sweep_names()
  bool quick = false;               // a fast subset of every sweep
  std::int64_t iterations = 0;      // measured (steady) iterations per run; 0: 3 (quick: 2)
  std::int64_t repeats = 0;         // rounds of every side-by-side group; 0: 2 (quick: 1)
  std::string planner = "auto";     // the planner of the depth and lstm sweeps, or auto
  std::vector<std::int64_t> depths;   // the depth sweep's ResNet depths; empty: the defaults
  std::vector<std::int64_t> lengths;  // the lstm sweep's lengths; empty: the defaults
  std::string json_path;
  std::string csv_path;
  std::string plots_dir;
  bool progress = true;             // progress lines on stderr
  runtime::log_level engine_log = runtime::log_level::error;  // the engine's log in every budgeted run
};

// One configuration of a group, over every round it ran in.
struct run_result {
  std::string label;            // "baseline", or the planner's name
  std::string policy;           // "" for the baseline (no sublinear)
  std::string budget_rule;      // how the budget was chosen: "0.50x", "smallest feasible", ...
  std::string status;           // "ok", "infeasible" (no plan at that budget), "failed"
  std::string error;            // the planner's or the run's message, when not ok
  std::size_t budget_bytes = 0;             // the budget the run asked for
  std::size_t smallest_feasible_bytes = 0;  // infeasible: the smallest budget this planner meets (0: unknown)
  std::size_t traced_peak_bytes = 0;        // sublinear: mapped peak of the traced iteration
  std::size_t peak_bytes = 0;               // peak mapped: baseline every iteration, sublinear the planned ones
  std::size_t persistent_bytes = 0;         // parameters, gradients, optimizer state, buffers
  std::size_t feature_map_bytes = 0;        // peak_bytes - persistent_bytes (mapped feature maps)
  std::size_t resident_feature_map_bytes = 0;   // peak of (allocated - evicted) - persistent (Note [Feature-map memory])
  double iter_s = 0.0;                      // median of the steady iterations, pooled over rounds
  double time_ratio = 0.0;                  // median of paired ratios (Note [Paired timing]); else
                                            // iter_s / the baseline's iter_s in the same group
  double cpu_s = 0.0;                       // median CPU seconds of the steady iterations (every thread)
  double cpu_ratio = 0.0;                   // the same for CPU time
  std::vector<double> paired_wall;          // per steady iteration: wall / its baseline twin's
  std::vector<double> paired_cpu;           // and CPU / the twin's
  double evictions = 0.0;                   // per steady iteration
  double recomputed_launches = 0.0;         // per steady iteration
  double extra_forwards = 0.0;              // recomputed launches / forward launches
  double predicted_extra_compute = -1.0;    // the probe's plan: added compute / forward compute (-1: none)
  double planning_s = 0.0;                  // time the engine took to plan, median over rounds
  bool params_bit_identical = false;        // parameters after training equal the baseline's
  bool within_budget = false;               // every planned iteration's peak <= budget
  std::size_t validation_mismatches = 0;
  std::size_t diverged_iterations = 0;
  std::size_t rounds = 0;
  std::vector<double> iteration_s;          // every steady iteration's wall time, all rounds
  std::vector<double> iteration_cpu_s;      // and its CPU time
  std::vector<double> recompute_s;          // per steady iteration: the engine's recompute time (host:
  std::vector<double> stall_s;              //   queuing replays) and stall time (launches waiting)
};

struct point_result {
  std::string model;       // "resnet-110"
  std::string shape;       // what it stands for ("ResNet-152"), or ""
  std::string size_key;    // "depth" or "seq_len"
  std::int64_t size = 0;
  std::size_t forward_launches = 0;  // launches before the turning point (the probe)
  double forward_compute_s = 0.0;    // their traced durations
  std::vector<run_result> runs;      // the baseline first
};

struct named_figure {
  std::string key;    // JSON key
  std::string label;  // for the table
  double value = 0.0;
};

struct sweep_result {
  std::string id;      // a name from sweep_names()
  std::string title;
  std::vector<point_result> points;
  std::vector<named_figure> figures;  // fitted slopes, ratios, ...
  std::vector<std::string> notes;     // how budgets were chosen, anchors from the papers
};

using progress_fn = std::function<void(const std::string&)>;

// Runs one sweep. Throws config_error for an unknown name or planner.
[[nodiscard]] sweep_result run_sweep(std::string_view id, const bench_options& options, const progress_fn& progress);

// A readable table of the sweep, its figures and notes.
void print_sweep(std::FILE* to, const sweep_result& s);
// One JSON document: {"schema_version", "device", "options", "sweeps": [...]}.
void write_json(std::ostream& out, std::span<const sweep_result> sweeps, const bench_options& options);
// One row per run: sweep, model, size, label, policy, budget, status and the figures.
void write_csv(std::ostream& out, std::span<const sweep_result> sweeps);
// SVG plots (one per sweep that has one) into `dir`, created if missing; returns the paths.
std::vector<std::string> write_plots(const std::string& dir, std::span<const sweep_result> sweeps);

// The command line both front ends share. `prog` names the command in messages
// ("sublinear bench", "remat_sweeps"). Throws config_error with what would be right.
[[nodiscard]] bench_options parse_bench_args(std::span<const std::string_view> args, std::string_view prog);
[[nodiscard]] std::string bench_help(std::string_view prog);
// Parses, runs, prints, writes; returns 0, 1 (a run failed or a file could not be
// written) or 2 (bad arguments, nothing ran).
int bench_main(std::string_view prog, std::span<const std::string_view> args);

}  // namespace sublinear::figures
