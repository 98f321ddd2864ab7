// Figures for the policy module (docs/policy.md): planner run time against graph size,
// plan quality against the MILP oracle and the exact solvers, and the sqrt(n) law.
//
// Usage: policy_figures [runtime] [quality] [sqrtn]   (no argument: all three)
//        policy_figures trace FILE [--milp-seconds S] BUDGET...
// Prints Markdown tables. Budgets are fractions of the traced peak (iteration.peak_bytes).
// `trace` plans the last iteration of a recorded trace at each BUDGET (bytes for live
// buffers, "5MiB", or a multiple of the unplanned peak, "0.5x") with every planner, the
// MILP oracle and the recompute floor (Note [Recompute floor]): how far the planners are
// from the best drop set, and that from the floor.
// A benchmark, not a test: it prints what it measures and asserts nothing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "policy/budget.hpp"
#include "policy/candidates.hpp"
#include "policy/oracle/milp.hpp"
#include "policy/planner.hpp"
#include "policy/recompute_floor.hpp"
#include "policy/simulator.hpp"
#include "policy/testing/synthetic.hpp"
#include "sublinear/error.hpp"
#include "tracer/analysis.hpp"
#include "tracer/trace_file.hpp"

namespace {

using namespace sublinear::policy;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t MiB = std::size_t{1} << 20;

struct outcome {
  bool feasible = false;
  double added_s = 0.0;
  std::size_t peak = 0;
  std::size_t smallest = 0;  // when infeasible
  double seconds = 0.0;      // planner wall time (median of repeats)
};

std::string fmt_cell(double s, double total) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f (+%.1f%%)", s * 1e3, total > 0 ? 100.0 * s / total : 0.0);
  return buf;
}

outcome run_planner(std::string_view name, const iteration& it, std::size_t budget, int repeats = 1) {
  outcome o;
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock_type::now();
    try {
      const plan p = make_planner(name)->make_plan(it, budget);
      o.feasible = true;
      o.added_s = p.added_compute_s;
      o.peak = p.predicted_peak;
    } catch (const infeasible_budget& e) {
      o.feasible = false;
      o.smallest = e.smallest_feasible();
    }
    times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  o.seconds = times[times.size() / 2];
  return o;
}

double forward_cost(const iteration& it) {
  double s = 0.0;
  for (const launch& l : it.launches) {
    const std::string& k = it.kernel_names[l.kernel];
    if (k.size() > 4 && k.compare(k.size() - 4, 4, "_fwd") == 0) s += l.cost_s;
  }
  return s;
}

std::size_t persistent_bytes(const iteration& it) {
  std::size_t s = 0;
  for (const buffer& b : it.buffers) {
    if (b.alloc_index == none) s += sublinear::round_up(b.size, unplanned_rounding);
  }
  return s;
}

// ---- run time ---------------------------------------------------------------------------

iteration graph_of(const std::string& family, std::size_t launches) {
  if (family == "chain") return synthetic::build(synthetic::chain(launches / 2, 8 * MiB, 2 * MiB));
  if (family == "resnet") return synthetic::build(synthetic::resnet(launches / 14, 8 * MiB, 2 * MiB));
  synthetic::dag_spec spec;
  spec.layers = launches * 10 / 19;
  spec.granularity = 2 * MiB;
  spec.quantum = MiB;
  return synthetic::build(synthetic::random_dag(spec, 11));
}

void runtime_figure() {
  std::printf("## Planner run time against graph size (budget 0.5x the traced peak)\n\n");
  std::printf("Seconds per make_plan() (median of 3 below 100k launches); `inf` marks a budget the planner "
              "reported infeasible (its time then includes the search for the smallest feasible budget).\n\n");
  for (const std::string family : {"chain", "resnet", "dag"}) {
    std::printf("### %s\n\n| launches | candidates |", family.c_str());
    for (std::string_view n : planner_names()) std::printf(" %s |", std::string(n).c_str());
    std::printf("\n|---|---|");
    for (std::size_t i = 0; i < planner_names().size(); ++i) std::printf("---|");
    std::printf("\n");
    for (std::size_t size : {1000u, 10000u, 100000u}) {
      const iteration it = graph_of(family, size);
      const dataflow df(it);
      const candidate_set cs(df);
      const auto budget = static_cast<std::size_t>(0.5 * static_cast<double>(it.peak_bytes));
      std::printf("| %zu | %zu |", it.launches.size(), cs.size());
      for (std::string_view n : planner_names()) {
        const outcome o = run_planner(n, it, budget, size >= 100000 ? 1 : 3);
        std::printf(" %.3f%s |", o.seconds, o.feasible ? "" : " inf");
        std::fflush(stdout);
      }
      std::printf("\n");
    }
    std::printf("\n");
  }
}

// ---- quality ----------------------------------------------------------------------------

struct named {
  std::string name;
  iteration it;
};

std::vector<named> small_graphs() {
  std::vector<named> out;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    std::vector<std::size_t> bytes;
    std::vector<double> costs;
    std::uint64_t s = seed * 977 + 3;
    for (std::size_t k = 0; k < 32; ++k) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      bytes.push_back(((s >> 33) % 6 + 1) * MiB);
      costs.push_back(1e-4 * static_cast<double>((s >> 20) % 9 + 1));
    }
    out.push_back({"chain32-" + std::to_string(seed), synthetic::build(synthetic::chain(bytes, costs, MiB))});
  }
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    synthetic::dag_spec spec;
    spec.layers = 32;
    spec.quantum = MiB;
    spec.granularity = MiB;
    spec.p_non_replayable = 0.0;
    out.push_back({"dag32-" + std::to_string(seed), synthetic::build(synthetic::random_dag(spec, seed * 7))});
  }
  out.push_back({"resnet2", synthetic::build(synthetic::resnet(2, 4 * MiB, 2 * MiB))});
  out.push_back({"lstm3", synthetic::build(synthetic::lstm(3, 2 * MiB, 2 * MiB))});
  return out;
}

void quality_row(const char* label, const std::vector<named>& graphs, double fraction,
                 const std::function<std::optional<double>(const iteration&, std::size_t)>& reference) {
  std::map<std::string, std::vector<double>> ratios;
  std::map<std::string, int> infeasible;
  int instances = 0;
  for (const named& g : graphs) {
    const auto budget = static_cast<std::size_t>(fraction * static_cast<double>(g.it.peak_bytes));
    const std::optional<double> ref = reference(g.it, budget);
    if (!ref) continue;
    ++instances;
    for (std::string_view n : planner_names()) {
      const outcome o = run_planner(n, g.it, budget);
      if (!o.feasible) {
        ++infeasible[std::string(n)];
        continue;
      }
      ratios[std::string(n)].push_back(*ref > 0 ? o.added_s / *ref : (o.added_s == 0 ? 1.0 : INFINITY));
    }
  }
  std::printf("| %s | %.2fx | %d |", label, fraction, instances);
  for (std::string_view n : planner_names()) {
    const auto& r = ratios[std::string(n)];
    if (r.empty()) {
      std::printf(" - (%d inf) |", infeasible[std::string(n)]);
      continue;
    }
    double mean = 0.0;
    double worst = 0.0;
    for (double x : r) {
      mean += x;
      worst = std::max(worst, x);
    }
    mean /= static_cast<double>(r.size());
    std::printf(" %.3f / %.3f", mean, worst);
    if (infeasible[std::string(n)] > 0) std::printf(" (%d inf)", infeasible[std::string(n)]);
    std::printf(" |");
  }
  std::printf("\n");
  std::fflush(stdout);
}

void quality_figure() {
  std::printf("## Plan quality: added compute relative to the reference\n\n");
  std::printf("Each cell: mean / worst ratio of the planner's added compute to the reference's, over the "
              "instances where the reference is feasible; `(k inf)`: instances where the planner found no "
              "plan within the budget. Budgets are fractions of the traced peak.\n\n");
  std::printf("| graphs | budget | instances |");
  for (std::string_view n : planner_names()) std::printf(" %s |", std::string(n).c_str());
  std::printf("\n|---|---|---|");
  for (std::size_t i = 0; i < planner_names().size(); ++i) std::printf("---|");
  std::printf("\n");
  const std::vector<named> small = small_graphs();
  std::vector<named> chains(small.begin(), small.begin() + 8);
  std::vector<named> dags(small.begin() + 8, small.end());  // with ResNet-2 and LSTM-3
  auto milp = [](const iteration& it, std::size_t budget) -> std::optional<double> {
    const oracle::milp_result m = oracle::solve_milp(it, budget);
    if (m.outcome != oracle::milp_result::status::optimal) return std::nullopt;
    return m.objective_s;
  };
  for (double f : {0.25, 0.5, 0.75}) quality_row("small chains vs MILP", chains, f, milp);
  for (double f : {0.25, 0.5, 0.75}) quality_row("small DAGs vs MILP", dags, f, milp);

  // Large graphs: the chain solver is exact on chains; on DAGs the reference is the best
  // plan any planner found (no proven optimum at this size).
  std::vector<named> big_chains;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    std::vector<std::size_t> bytes;
    std::vector<double> costs;
    std::uint64_t s = seed * 31 + 5;
    for (std::size_t k = 0; k < 500; ++k) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      bytes.push_back(((s >> 33) % 6 + 1) * 2 * MiB);
      costs.push_back(1e-4 * static_cast<double>((s >> 20) % 9 + 1));
    }
    big_chains.push_back({"chain500", synthetic::build(synthetic::chain(bytes, costs, 2 * MiB))});
  }
  auto exact_chain = [](const iteration& it, std::size_t budget) -> std::optional<double> {
    const outcome o = run_planner("chain", it, budget);
    if (!o.feasible) return std::nullopt;
    return o.added_s;
  };
  for (double f : {0.25, 0.5, 0.75}) quality_row("chains, 1k launches, vs chain", big_chains, f, exact_chain);
  std::vector<named> big_dags;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    synthetic::dag_spec spec;
    spec.layers = 520;
    spec.granularity = 2 * MiB;
    spec.quantum = MiB;
    big_dags.push_back({"dag1k", synthetic::build(synthetic::random_dag(spec, seed))});
  }
  big_dags.push_back({"resnet1k", synthetic::build(synthetic::resnet(71, 8 * MiB, 2 * MiB))});
  big_dags.push_back({"lstm1k", synthetic::build(synthetic::lstm(110, 4 * MiB, 2 * MiB))});
  auto best_found = [](const iteration& it, std::size_t budget) -> std::optional<double> {
    std::optional<double> best;
    for (std::string_view n : planner_names()) {
      const outcome o = run_planner(n, it, budget);
      if (o.feasible && (!best || o.added_s < *best)) best = o.added_s;
    }
    return best;
  };
  for (double f : {0.25, 0.5, 0.75}) quality_row("DAGs, 1k launches, vs best found", big_dags, f, best_found);
  std::printf("\n");
}

// ---- the sqrt(n) law --------------------------------------------------------------------

double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const auto n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += std::log(x[i]);
    sy += std::log(y[i]);
    sxx += std::log(x[i]) * std::log(x[i]);
    sxy += std::log(x[i]) * std::log(y[i]);
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

void sqrtn_figure() {
  std::printf("## The sqrt(n) law\n\n");
  std::printf("Smallest feasible budget per planner (its planned peak) against depth N, with the "
              "persistent bytes (weights, their gradients, BatchNorm statistics) subtracted to leave the "
              "feature-map memory; `extra fwd` is the added compute over one forward pass.\n\n");
  for (const std::string family : {"chain", "resnet"}) {
    std::printf("### ResNet-N as a %s\n\n", family == "chain" ? "chain of blocks" : "DAG (conv-bn-relu blocks)");
    std::printf("| N | no eviction | chain | extra fwd | sqrtn | extra fwd | chen | extra fwd |\n|---|---|---|---|---|---|---|---|\n");
    std::vector<double> ns;
    std::map<std::string, std::vector<double>> peaks;
    for (std::size_t n : {16u, 32u, 64u, 128u, 256u, 512u, 1024u}) {
      const iteration it = family == "chain" ? synthetic::build(synthetic::chain(n, 8 * MiB, 2 * MiB))
                                             : synthetic::build(synthetic::resnet(n, 8 * MiB, 2 * MiB));
      const std::size_t fixed = persistent_bytes(it);
      const double fwd = forward_cost(it);
      const std::size_t unplanned = simulate(it, plan{}).peak;
      ns.push_back(static_cast<double>(n));
      peaks["none"].push_back(static_cast<double>(unplanned - fixed));
      std::printf("| %zu | %.0f MiB |", n, static_cast<double>(unplanned - fixed) / MiB);
      for (std::string_view name : {"chain", "sqrtn", "chen"}) {
        // The smallest budget it can meet, then the plan at that budget.
        std::size_t smallest = unplanned;
        try {
          (void)make_planner(name)->make_plan(it, 1);
        } catch (const infeasible_budget& e) {
          smallest = e.smallest_feasible();
        }
        const plan p = make_planner(name)->make_plan(it, smallest);
        peaks[std::string(name)].push_back(static_cast<double>(p.predicted_peak - fixed));
        std::printf(" %.0f MiB | %.2f |", static_cast<double>(p.predicted_peak - fixed) / MiB, p.added_compute_s / fwd);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    std::printf("\nlog-log slope of feature-map peak against N: no eviction %.2f, chain %.2f, sqrtn %.2f, chen %.2f\n\n",
                slope(ns, peaks["none"]), slope(ns, peaks["chain"]), slope(ns, peaks["sqrtn"]), slope(ns, peaks["chen"]));
  }
}

// ---- a recorded trace -------------------------------------------------------------------

void trace_figure(const std::string& path, const std::vector<std::string>& budgets, double milp_seconds) {
  const sublinear::tracer::trace t = sublinear::tracer::read_trace_file(path);
  const sublinear::tracer::analysed_iteration an = sublinear::tracer::analyse_last_iteration(t);
  const iteration& it = an.graph;
  double total = 0.0;
  for (const launch& l : it.launches) total += l.cost_s;
  const std::size_t unplanned = simulate(it, plan{}).peak;
  std::printf("## %s: added compute against the recompute floor and the MILP optimum\n\n", path.c_str());
  std::printf("%zu launches, %zu eviction candidates, %.2f ms of traced compute, unplanned peak %.2f MiB of live "
              "buffers. Each cell: added compute, ms (share of the traced compute); budgets are for live buffers.\n\n",
              it.launches.size(), it.candidates.size(), total * 1e3, static_cast<double>(unplanned) / MiB);
  std::printf("| budget | floor | MILP (drop sets) |");
  for (std::string_view n : planner_names()) std::printf(" %s |", std::string(n).c_str());
  std::printf("\n|---|---|---|");
  for (std::size_t i = 0; i < planner_names().size(); ++i) std::printf("---|");
  std::printf("\n");
  const auto cell = [total](double s) { return fmt_cell(s, total); };
  for (const std::string& text : budgets) {
    const std::size_t budget = parse_budget_bytes(text, 0, unplanned);
    const recompute_floor f = find_recompute_floor(it, budget);
    oracle::milp_options mo;
    mo.max_candidates = 1000;
    mo.time_limit_s = milp_seconds;
    const oracle::milp_result m = oracle::solve_milp(it, budget, mo);
    std::string milp;
    switch (m.outcome) {
      case oracle::milp_result::status::optimal: milp = cell(m.objective_s); break;
      case oracle::milp_result::status::infeasible: milp = "infeasible"; break;
      case oracle::milp_result::status::time_limit: milp = "time limit"; break;
      case oracle::milp_result::status::too_large: milp = "too large"; break;
    }
    std::printf("| %s (%.2f MiB) | %s | %s |", text.c_str(), static_cast<double>(budget) / MiB,
                f.feasible ? cell(f.added_s).c_str() : "infeasible", milp.c_str());
    for (std::string_view n : planner_names()) {
      const outcome o = run_planner(n, it, budget);
      std::printf(" %s |", o.feasible ? cell(o.added_s).c_str() : "infeasible");
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "trace") {
    std::vector<std::string> budgets;
    std::string path;
    double milp_seconds = 60.0;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--milp-seconds" && i + 1 < argc) {
        milp_seconds = std::atof(argv[++i]);
      } else if (path.empty()) {
        path = a;
      } else {
        budgets.push_back(a);
      }
    }
    if (path.empty() || budgets.empty()) {
      std::fprintf(stderr, "usage: %s trace FILE [--milp-seconds S] BUDGET...\n", argv[0]);
      return 2;
    }
    try {
      trace_figure(path, budgets, milp_seconds);
    } catch (const sublinear::config_error& e) {
      std::fprintf(stderr, "policy_figures: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  bool runtime = argc == 1;
  bool quality = argc == 1;
  bool sqrtn = argc == 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "runtime") runtime = true;
    else if (a == "quality") quality = true;
    else if (a == "sqrtn") sqrtn = true;
    else {
      std::fprintf(stderr, "usage: %s [runtime] [quality] [sqrtn]\n", argv[0]);
      return 2;
    }
  }
  if (sqrtn) sqrtn_figure();
  if (quality) quality_figure();
  if (runtime) runtime_figure();
  return 0;
}
