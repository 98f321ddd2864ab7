// How the recomputation sweeps measure: one point (a model at one size) probed once, a
// budget chosen per planner from the probe, and a group of runs trained side by side.
// The sweeps (sweeps.cpp) say which points and which runs; this measures them.
//
// Note [Remat sweeps]
// Rationale: the claims sublinear makes (feature-map memory O(sqrt n) in depth at <= 1
//   extra forward, a > 4x cut on long LSTMs, less overhead than DTR at the same share of
//   peak, a larger cut than Re-forwarding at no more overhead) are only worth what their
//   measurement is. Each is measured here side by side in one process, with the models,
//   training loop, allocator and replay engine a user gets, so the figures in
//   docs/benchmarks.md can be reproduced by one command.
// Approach: a sweep is a list of points; at each point a group of runs (the baseline
//   without sublinear first, then sublinear with a planner and a budget) trains the same
//   model from the same seed for the same number of iterations, each in a fresh host
//   session. Groups are repeated in rounds (every run once per round, in order), so load
//   on a shared machine hits every run alike; a run's time is the median of its steady
//   iterations pooled over the rounds, its ratio paired with a baseline twin (Note
//   [Paired timing]). Budgets that depend on what a planner can do are chosen from a
//   probe: one traced iteration under the engine, analysed as the engine analyses it, and
//   asked of the planner offline (smallest feasible budget; smallest budget whose plan
//   adds at most one forward's compute), with the engine's own budget arithmetic
//   (budget_for_planner_bytes). A budget the planner cannot meet shows as "infeasible
//   (smallest feasible X)", X as the run's engine reported it (else the probe's); such a
//   run stops after its traced iteration.
// Limitations: the host device is a CPU running each stream on one thread: times show how
//   recomputation scales, not GPU speed, and carry the machine's load (read the ratios
//   within one group). Memory figures are exact. Plans follow the traced kernel durations,
//   which vary from run to run, so a run's plan can differ slightly from the probe's; a
//   run whose probe-chosen budget then turns out infeasible is retried at 2%, then 5% more.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "integrations/cli/bench/sweep_results.hpp"
#include "policy/budget.hpp"
#include "policy/planner.hpp"
#include "policy/planning_overhead.hpp"
#include "runtime/engine.hpp"
#include "runtime/settings.hpp"
#include "workloads/host_session.hpp"
#include "workloads/models/registry.hpp"

namespace sublinear::cli::bench {

namespace wl = sublinear::workloads;
namespace models = sublinear::workloads::models;
using clock_type = std::chrono::steady_clock;

inline constexpr std::uint64_t kSeed = 1;
// Iterations before the measured ones: the traced ones and the validating one (Note
// [Iteration lifecycle]); the baseline skips as many, so every run measures the same
// steps of training.
[[nodiscard]] std::int64_t warmup_iterations();

// ---- small helpers ------------------------------------------------------------------------

// CPU seconds of every thread of this process: the host device's stream threads (the
// kernels) and the calling thread (launches, the engine's hooks). Unlike wall time it
// does not grow while other processes hold the cores.
[[nodiscard]] double process_cpu_s();
[[nodiscard]] double seconds_since(clock_type::time_point t);
[[nodiscard]] double median(std::vector<double> v);
// Least-squares slope of log y against log x: the exponent s in y ~ x^s.
[[nodiscard]] double loglog_slope(const std::vector<double>& xs, const std::vector<double>& ys);
[[nodiscard]] std::string fmt(const char* format, double v);
[[nodiscard]] std::string mib(std::size_t bytes);
[[nodiscard]] std::string ratio_text(double v);  // "1.23x", or "-" when not a positive number
// A budget of `bytes`, as a run asks for it (its text is the plain byte count).
[[nodiscard]] policy::budget_spec bytes_budget(std::size_t bytes);
[[nodiscard]] wl::host_session_options session_options();
// A run label as part of a JSON key: "reforward (min)" -> "reforward_min".
[[nodiscard]] std::string key_of(const std::string& label);
// "resnet-110", "lstm-256": the model and its size.
[[nodiscard]] std::string point_name(const models::model_config& c);

// ---- the probe: one traced iteration, analysed as the engine analyses it -----------------------

struct probe_result {
  policy::iteration graph;
  std::size_t mapped_peak = 0;  // the traced iteration's peak of mapped bytes
  std::size_t forward_launches = 0;
  double forward_s = 0.0;       // traced durations of the forward launches

  // The budget a run must ask for so that the engine gives the planner `planner_bytes`
  // (the engine's own arithmetic, Note [Planning overhead]), for a planner whose smallest
  // feasible share is `smallest`: with the cache scaled to the budget where the whole
  // traced cache would leave it less than that (Note [Scaled cache allowance]).
  [[nodiscard]] policy::traced_memory traced() const { return policy::traced_memory_of(graph, mapped_peak); }
  [[nodiscard]] std::size_t user_budget(std::size_t planner_bytes, std::size_t smallest) const {
    const std::size_t scaled =
        policy::budget_for_planner_bytes(planner_bytes, traced(), policy::cache_allowance_mode::scaled);
    if (share(scaled, policy::cache_allowance_mode::traced) < smallest) return scaled;
    return policy::budget_for_planner_bytes(planner_bytes, traced());
  }
  // What the engine gives that planner from a budget of `budget` bytes, and with which
  // allowance.
  [[nodiscard]] policy::cache_allowance_mode allowance_at(std::size_t budget, std::size_t smallest) const {
    return share(budget, policy::cache_allowance_mode::traced) < smallest ? policy::cache_allowance_mode::scaled
                                                                           : policy::cache_allowance_mode::traced;
  }
  [[nodiscard]] std::size_t planner_share(std::size_t budget, std::size_t smallest) const {
    return share(budget, allowance_at(budget, smallest));
  }
  [[nodiscard]] std::size_t share(std::size_t budget, policy::cache_allowance_mode mode) const {
    const std::size_t o = policy::planning_overhead(budget, traced(), mode);
    return budget > o ? budget - o : 0;
  }
};

[[nodiscard]] probe_result run_probe(const models::model_config& config);

// ---- budgets chosen from the probe ----------------------------------------------------------------

struct budget_choice {
  bool feasible = false;
  std::size_t budget = 0;          // what the run asks for (probe_result::user_budget)
  std::size_t smallest = 0;        // the smallest feasible budget, same units
  std::size_t predicted_peak = 0;  // the plan's peak + the allocator's cache
  double extra_compute = -1.0;     // added compute / forward compute
  std::string error;
};

// The budget for `planner` on the probed iteration: its smallest feasible budget, or with
// `one_forward` the smallest budget whose plan adds at most `forwards` forwards' compute
// (Chen et al.'s "one extra forward"), found by bisection above the smallest feasible.
[[nodiscard]] budget_choice choose_budget(const probe_result& p, std::string_view planner, bool one_forward,
                                          const policy::planner::options& o = {}, double forwards = 1.0);
// `planner` at `budget` (what a run asks for), or infeasible with `error` set where no
// plan fits there.
[[nodiscard]] budget_choice choose_budget_of(const probe_result& p, std::string_view planner, std::size_t budget,
                                             const policy::planner::options& o = {});
// `planner` at a budget another run chose (`at`, what that run asks for): the same memory,
// to compare time at equal memory.
[[nodiscard]] budget_choice choose_budget_at(const probe_result& p, std::string_view planner,
                                             const budget_choice& at);
// `planner` at the largest budget that still cuts `cut` of the traced peak of mapped
// bytes, rounded down to whole pages: peak mapped never exceeds a budget, so a run there
// cuts at least that much (against a baseline whose peak is the traced one).
[[nodiscard]] budget_choice choose_budget_for_cut(const probe_result& p, std::string_view planner, double cut,
                                                  const policy::planner::options& o = {});
// The planner with the lowest predicted peak at <= 1 extra forward on the probed
// iteration, among every planner but none and sqrtn (sqrtn is always shown on its own).
// Says how it chose in `notes`.
[[nodiscard]] std::string choose_best_planner(const probe_result& p, const std::string& where,
                                              std::vector<std::string>& notes, const progress_fn& progress);

// The smallest feasible budget of a planner on the probed model (0: unknown), for the
// "infeasible (smallest feasible X)" cells.
using smallest_fn = std::function<std::size_t(const std::string& planner)>;
// Smallest feasible budgets from the probe, one planner call per planner asked about.
// The probe must outlive the function.
[[nodiscard]] smallest_fn probe_smallest(const probe_result& p);

// ---- a group of runs, side by side --------------------------------------------------------------

struct run_plan {
  std::string label;
  std::string policy;                         // "" = baseline
  std::optional<policy::budget_spec> budget;  // what the engine gets; none for the baseline
  std::string rule;                           // how it was chosen, for the table
  // A budget in bytes chosen from the probe; when the run's own plan (made from its own
  // traced durations) refuses it, the run is retried at 2%, then 5% more.
  std::size_t retry_bytes = 0;
  double predicted_extra = -1.0;
  bool multi_pass = true;  // SUBLINEAR_MULTIPASS of the run (Note [Multi-pass])
};

struct group_settings {
  std::int64_t iterations = 3;
  std::int64_t repeats = 2;
  runtime::log_level log = runtime::log_level::error;
  std::string sweep;
  const progress_fn* progress = nullptr;
};

// Runs `plans` (the baseline first) on `config` for `gs.repeats` rounds and returns their
// results in the same order (Note [Remat sweeps]). `forward_launches` is the probe's, for
// the extra-forward figures; `smallest_for` names a planner's smallest feasible budget
// where a run's engine did not.
[[nodiscard]] std::vector<run_result> measure_group(const models::model_config& config,
                                                    const std::vector<run_plan>& plans, const group_settings& gs,
                                                    std::size_t forward_launches, const smallest_fn& smallest_for);

}  // namespace sublinear::cli::bench
