// The sweeps' results for people and for programs: a table per sweep, one JSON document,
// one CSV row per run.
#include "integrations/cli/bench/sweep_output.hpp"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "integrations/cli/bench/measure.hpp"
#include "workloads/training.hpp"

namespace sublinear::cli::bench {

// ---- printing --------------------------------------------------------------------------------------

namespace {

std::string budget_cell(const run_result& r) {
  if (r.policy.empty()) return "none";
  std::string rule = r.budget_rule;
  if (rule.size() > 26) rule = rule.substr(0, 23) + "...";
  if (r.budget_bytes == 0) return rule;
  std::string cell = mib(r.budget_bytes);
  if (r.traced_peak_bytes > 0) {
    cell += fmt(" (%.2fx)", static_cast<double>(r.budget_bytes) / static_cast<double>(r.traced_peak_bytes));
  }
  return cell;
}

void print_point(std::FILE* to, const point_result& p) {
  const run_result* base = nullptr;
  for (const auto& r : p.runs)
    if (r.policy.empty()) base = &r;
  std::fprintf(to, "\n  %s%s%s (forward: %zu launches)\n", p.model.c_str(), p.shape.empty() ? "" : ": ",
               p.shape.c_str(), p.forward_launches);
  for (const auto& r : p.runs) {
    if (r.status != "ok") {
      std::string why = r.status;
      if (r.status == "unsteady") {
        why = "no steady iteration to time: " + std::to_string(r.validation_mismatches) + " validation mismatches, " +
              std::to_string(r.diverged_iterations) + " diverged; peak " + mib(r.peak_bytes) + ", bit-identical " +
              (r.params_bit_identical ? "yes" : "NO");
      } else if (r.status == "infeasible") {
        why = "infeasible";
        if (r.smallest_feasible_bytes > 0) {
          why += " (smallest feasible " + mib(r.smallest_feasible_bytes);
          if (r.traced_peak_bytes > 0) {
            why += fmt(" = %.2fx", static_cast<double>(r.smallest_feasible_bytes) /
                                       static_cast<double>(r.traced_peak_bytes));
          }
          why += ")";
        }
      } else {
        why = "failed" + (r.budget_bytes > 0 ? " at " + mib(r.budget_bytes) : std::string()) + ": " + r.error.substr(0, 110);
      }
      std::fprintf(to, "    %-16s %-26s %s\n", r.label.c_str(), r.budget_rule.substr(0, 26).c_str(), why.c_str());
      continue;
    }
    const double vs_base =
        base && base->peak_bytes > 0 ? static_cast<double>(r.peak_bytes) / static_cast<double>(base->peak_bytes) : 0.0;
    std::string cut = "-";
    if (!r.policy.empty() && base && r.resident_feature_map_bytes > 0) {
      cut = ratio_text(static_cast<double>(base->resident_feature_map_bytes) /
                       static_cast<double>(r.resident_feature_map_bytes));
    }
    std::string correct = r.params_bit_identical ? (r.within_budget ? "yes" : "yes, OVER BUDGET") : "NO";
    if (r.validation_mismatches > 0) correct += " (" + std::to_string(r.validation_mismatches) + " caught by validation)";
    std::fprintf(to, "    %-16s %-26s %12s %6s %12s %12s %6s %9.3f s %6s %6s %9s %9s %6s %s\n", r.label.c_str(),
                 budget_cell(r).c_str(), mib(r.peak_bytes).c_str(), ratio_text(vs_base).c_str(),
                 mib(r.feature_map_bytes).c_str(), mib(r.resident_feature_map_bytes).c_str(), cut.c_str(), r.iter_s, ratio_text(r.cpu_ratio).c_str(),
                 ratio_text(r.time_ratio).c_str(),
                 r.policy.empty() ? "-" : fmt("%.0f", r.evictions).c_str(),
                 r.policy.empty() ? "-" : fmt("%.0f", r.recomputed_launches).c_str(),
                 r.policy.empty() ? "-" : fmt("%.2f", r.extra_forwards).c_str(),
                 r.policy.empty() ? "-" : correct.c_str());
  }
}

}  // namespace

void print_sweep(std::FILE* to, const sweep_result& s) {
  std::fprintf(to, "\n== %s: %s ==\n", s.id.c_str(), s.title.c_str());
  std::fprintf(to, "    %-16s %-26s %12s %6s %12s %12s %6s %11s %6s %6s %9s %9s %6s %s\n", "run", "budget",
               "peak mapped", "vs base", "FM mapped", "FM resident", "FM cut", "iteration", "cpu", "wall", "evict/it",
               "recomp/it", "x fwd", "bit-identical");
  for (const auto& p : s.points) print_point(to, p);
  if (!s.figures.empty()) std::fprintf(to, "\n  figures\n");
  for (const auto& f : s.figures) {
    const bool share = f.key.ends_with("_cut") || f.key.ends_with("_overhead");
    const std::string v = share ? fmt("%.0f%%", 100.0 * f.value) : fmt("%.3f", f.value);
    std::fprintf(to, "    %-72s %s\n", f.label.c_str(), v.c_str());
  }
  std::fprintf(to,
               "\n  columns: vs base = peak mapped / the baseline's; FM (feature maps) mapped = peak mapped -\n"
               "  persistent; FM resident = peak of (allocated - evicted) - persistent; FM cut = the baseline's\n"
               "  resident feature maps / this run's; iteration = median steady wall time; cpu, wall = median\n"
               "  over the steady iterations of CPU (all threads) and wall time / the same iteration of a\n"
               "  baseline twin trained in turn beside the run (paired timing); x fwd = recomputed launches /\n"
               "  forward launches.\n");
  for (const auto& n : s.notes) std::fprintf(to, "  note: %s\n", n.c_str());
  std::fflush(to);
}

// ---- JSON and CSV -----------------------------------------------------------------------------------

namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void json_run(std::ostream& out, const run_result& r) {
  out << "{\"label\": " << wl::json_string(r.label) << ", \"policy\": " << wl::json_string(r.policy)
      << ", \"budget_rule\": " << wl::json_string(r.budget_rule) << ", \"status\": " << wl::json_string(r.status)
      << ", \"error\": " << wl::json_string(r.error) << ",\n           \"budget_bytes\": " << r.budget_bytes
      << ", \"smallest_feasible_bytes\": " << r.smallest_feasible_bytes
      << ", \"traced_peak_bytes\": " << r.traced_peak_bytes << ", \"peak_bytes\": " << r.peak_bytes
      << ", \"persistent_bytes\": " << r.persistent_bytes << ", \"feature_map_bytes\": " << r.feature_map_bytes
      << ", \"resident_feature_map_bytes\": " << r.resident_feature_map_bytes << ",\n           \"iter_s\": "
      << num(r.iter_s) << ", \"time_ratio\": " << num(r.time_ratio) << ", \"cpu_s\": " << num(r.cpu_s)
      << ", \"cpu_ratio\": " << num(r.cpu_ratio) << ", \"evictions_per_iter\": " << num(r.evictions)
      << ", \"recomputed_launches_per_iter\": " << num(r.recomputed_launches)
      << ", \"extra_forwards\": " << num(r.extra_forwards)
      << ", \"predicted_extra_compute\": " << num(r.predicted_extra_compute)
      << ", \"planning_s\": " << num(r.planning_s) << ", \"recompute_s\": " << num(median(r.recompute_s))
      << ", \"stall_s\": " << num(median(r.stall_s)) << ",\n           \"params_bit_identical\": "
      << (r.params_bit_identical ? "true" : "false") << ", \"within_budget\": " << (r.within_budget ? "true" : "false")
      << ", \"validation_mismatches\": " << r.validation_mismatches
      << ", \"diverged_iterations\": " << r.diverged_iterations << ", \"rounds\": " << r.rounds
      << ", \"iteration_s\": [";
  for (std::size_t i = 0; i < r.iteration_s.size(); ++i) out << (i ? ", " : "") << num(r.iteration_s[i]);
  out << "], \"iteration_cpu_s\": [";
  for (std::size_t i = 0; i < r.iteration_cpu_s.size(); ++i) out << (i ? ", " : "") << num(r.iteration_cpu_s[i]);
  out << "], \"paired_wall\": [";
  for (std::size_t i = 0; i < r.paired_wall.size(); ++i) out << (i ? ", " : "") << num(r.paired_wall[i]);
  out << "], \"paired_cpu\": [";
  for (std::size_t i = 0; i < r.paired_cpu.size(); ++i) out << (i ? ", " : "") << num(r.paired_cpu[i]);
  out << "]}";
}

}  // namespace

void write_json(std::ostream& out, std::span<const sweep_result> sweeps, const bench_options& options) {
  out << "{\n  \"schema_version\": 1,\n  \"device\": \"host\",\n  \"options\": {\"quick\": "
      << (options.quick ? "true" : "false") << ", \"iterations\": " << options.iterations
      << ", \"repeats\": " << options.repeats << ", \"planner\": " << wl::json_string(options.planner) << "},\n"
      << "  \"sweeps\": [";
  for (std::size_t i = 0; i < sweeps.size(); ++i) {
    const auto& s = sweeps[i];
    out << (i ? ",\n" : "\n") << "    {\"id\": " << wl::json_string(s.id) << ", \"title\": " << wl::json_string(s.title)
        << ",\n     \"figures\": {";
    for (std::size_t j = 0; j < s.figures.size(); ++j) {
      out << (j ? ", " : "") << wl::json_string(s.figures[j].key) << ": " << num(s.figures[j].value);
    }
    out << "},\n     \"notes\": [";
    for (std::size_t j = 0; j < s.notes.size(); ++j) out << (j ? ", " : "") << wl::json_string(s.notes[j]);
    out << "],\n     \"points\": [";
    for (std::size_t j = 0; j < s.points.size(); ++j) {
      const auto& p = s.points[j];
      out << (j ? ",\n" : "\n") << "       {\"model\": " << wl::json_string(p.model)
          << ", \"shape\": " << wl::json_string(p.shape) << ", " << wl::json_string(p.size_key) << ": " << p.size
          << ", \"forward_launches\": " << p.forward_launches << ", \"forward_compute_s\": " << num(p.forward_compute_s)
          << ",\n        \"runs\": [";
      for (std::size_t k = 0; k < p.runs.size(); ++k) {
        out << (k ? ",\n          " : "\n          ");
        json_run(out, p.runs[k]);
      }
      out << "]}";
    }
    out << "]}";
  }
  out << "\n  ]\n}\n";
}

void write_csv(std::ostream& out, std::span<const sweep_result> sweeps) {
  out << "sweep,model,size,label,policy,budget_rule,status,budget_bytes,smallest_feasible_bytes,traced_peak_bytes,"
         "peak_bytes,persistent_bytes,feature_map_bytes,resident_feature_map_bytes,iter_s,time_ratio,cpu_s,"
         "cpu_ratio,evictions_per_iter,recomputed_launches_per_iter,extra_forwards,planning_s,params_bit_identical,within_budget\n";
  for (const auto& s : sweeps) {
    for (const auto& p : s.points) {
      for (const auto& r : p.runs) {
        out << s.id << ',' << p.model << ',' << p.size << ',' << csv_field(r.label) << ',' << csv_field(r.policy) << ','
            << csv_field(r.budget_rule) << ',' << r.status << ',' << r.budget_bytes << ',' << r.smallest_feasible_bytes
            << ',' << r.traced_peak_bytes << ',' << r.peak_bytes << ',' << r.persistent_bytes << ','
            << r.feature_map_bytes << ',' << r.resident_feature_map_bytes << ',' << num(r.iter_s) << ','
            << num(r.time_ratio) << ',' << num(r.cpu_s) << ',' << num(r.cpu_ratio) << ',' << num(r.evictions) << ',' << num(r.recomputed_launches) << ','
            << num(r.extra_forwards) << ',' << num(r.planning_s) << ',' << (r.params_bit_identical ? "true" : "false")
            << ',' << (r.within_budget ? "true" : "false") << '\n';
      }
    }
  }
}

}  // namespace sublinear::cli::bench
