// What the recomputation sweeps measure and the options they run with: the data the
// sweeps (sweeps.hpp) fill and the printers, writers and plots (sweep_output.hpp,
// sweep_plots.hpp) read. Note [Remat sweeps] in measure.hpp says how it is measured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/settings.hpp"

namespace sublinear::cli::bench {

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
// Told the index of each point of a sweep as it starts (sweeps.hpp, sweep_points).
using point_fn = std::function<void(std::size_t index)>;

}  // namespace sublinear::cli::bench
