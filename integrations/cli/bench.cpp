// `sublinear bench`: the recomputation sweeps of issue 6 (memory against depth, LSTM
// length, overhead against budget, a Re-forwarding-style table) on the host device.
//
// The command line is here: its help, its arguments and the entry point, which the
// `remat_sweeps` figures program (benchmarks/figures/remat_sweeps.cpp) calls as well, so
// the command and the program print and write the same figures. The sweeps are in
// integrations/cli/bench/ (Note [Remat sweeps] in measure.hpp); docs/benchmarks.md shows
// what they measured.
#include "integrations/cli/bench.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "common/atomic_file.hpp"
#include "integrations/cli/args.hpp"
#include "integrations/cli/bench/measure.hpp"
#include "integrations/cli/bench/sweep_output.hpp"
#include "integrations/cli/bench/sweep_plots.hpp"
#include "integrations/cli/bench/sweeps.hpp"
#include "integrations/cli/commands.hpp"
#include "policy/planner.hpp"
#include "sublinear/error.hpp"

namespace sublinear::cli::bench {


namespace {

// About how many seconds a point takes, in the time of a measured `--quick` run (all
// sweeps, on two shared cores): one configuration's iteration by the model's sizes, times
// the configurations (each planned one beside a baseline twin) and their iterations; plus
// the searches of the reforward table at each point, and, for --planner auto, the choice
// of the planner on the largest size before the first point of depth and lstm. Only the
// ratios matter: the time left scales them by how long the finished points took.
double point_seconds(std::string_view sweep, const sweep_point& p, const sweep_point& largest, bool auto_planner,
                     bool first) {
  const models::model_config c = models::with_defaults(p.config);
  const auto d = static_cast<double>(c.depth), t = static_cast<double>(c.seq_len), b = static_cast<double>(c.batch);
  double iteration = 0.0;
  switch (c.kind) {
    case models::model_kind::mlp: iteration = 1.2e-5 * d * b; break;
    case models::model_kind::resnet: iteration = 1.7e-4 * d * b; break;
    case models::model_kind::densenet: iteration = 2.7e-5 * d * d * b; break;
    case models::model_kind::lstm: iteration = 1.25e-3 * t * b; break;
    case models::model_kind::transformer: iteration = 2.7e-5 * d * t * b; break;
  }
  const double configurations = 1.0 + 2.0 * static_cast<double>(p.runs > 0 ? p.runs - 1 : 0);
  double s = iteration * configurations * static_cast<double>(p.iterations);
  if (sweep == "reforward") s += 0.3 * d;
  if (auto_planner && first) {
    const models::model_config l = models::with_defaults(largest.config);
    if (sweep == "depth") s += 0.23 * static_cast<double>(l.depth);
    if (sweep == "lstm") s += 0.48 * static_cast<double>(l.seq_len);
  }
  return s;
}

// Progress over every point of the chosen sweeps: how many are done and, from the time
// the finished ones took against their estimate (point_seconds), about how long the rest
// will take.
class progress_meter {
 public:
  explicit progress_meter(const bench_options& o) : started_(clock_type::now()) {
    for (const auto& id : o.sweeps) {
      first_.push_back(work_.size());
      const std::vector<sweep_point> points = sweep_points(id, o);
      for (std::size_t i = 0; i < points.size(); ++i) {
        work_.push_back(point_seconds(id, points[i], points.back(), o.planner == "auto", i == 0));
      }
    }
    first_.push_back(work_.size());
  }

  // Sweep `sweep` (its index in the options) reached its point `index`: the ones before are done.
  void reached(std::size_t sweep, std::size_t index) { finish_until(first_[sweep] + index); }
  // Every point of sweep `sweep` is done.
  void finished(std::size_t sweep) { finish_until(first_[sweep + 1]); }

  // The estimate of the whole run before it starts, in seconds.
  [[nodiscard]] double estimate_s() const {
    double total = 0.0;
    for (double w : work_) total += w;
    return total;
  }

  // "3/12 points, about 4 min left"
  [[nodiscard]] std::string status() const {
    std::string s = std::to_string(done_) + "/" + std::to_string(work_.size()) + " points";
    if (done_ == work_.size()) return s;
    double rest = 0.0;
    for (std::size_t i = done_; i < work_.size(); ++i) rest += work_[i];
    // How much slower or faster than the estimates this run goes; 1 before a point ends.
    const double rate = done_work_ > 0.0 && done_s_ > 0.0 ? done_s_ / done_work_ : 1.0;
    // Less the time the current point has run already, but no less than the points after it.
    const double current = seconds_since(started_) - done_s_;
    const double left = std::max(rate * rest - current, rate * (rest - work_[done_]));
    return s + ", about " + duration_text(left) + " left";
  }

 private:
  static std::string duration_text(double s) {
    if (s < 90.0) return fmt("%.0f s", std::max(s, 1.0));
    if (s < 5400.0) return fmt("%.0f min", s / 60.0);
    return fmt("%.1f h", s / 3600.0);
  }
  void finish_until(std::size_t end) {
    if (end <= done_) return;
    for (; done_ < end; ++done_) done_work_ += work_[done_];
    done_s_ = seconds_since(started_);
  }

  clock_type::time_point started_;
  std::vector<double> work_;        // per point, over every sweep in order
  std::vector<std::size_t> first_;  // per sweep, its first point's index in work_; then the total
  std::size_t done_ = 0;
  double done_work_ = 0.0;
  double done_s_ = 0.0;  // seconds from the start until the last point finished
};

std::string csv_text(std::span<const sweep_result> results) {
  std::ostringstream out;
  write_csv(out, results);
  return out.str();
}

std::string json_text(std::span<const sweep_result> results, const bench_options& o) {
  std::ostringstream out;
  write_json(out, results, o);
  return out.str();
}

}  // namespace

namespace {

// The estimate of a default run (every sweep, no --quick), for the help.
std::string default_estimate() {
  bench_options o;
  for (auto n : sweep_names()) o.sweeps.emplace_back(n);
  const double s = progress_meter(o).estimate_s();
  return s < 5400.0 ? fmt("%.0f min", s / 60.0) : fmt("%.1f h", s / 3600.0);
}

}  // namespace

std::string bench_help(std::string_view prog) {
  const std::string p(prog);
  const std::string pad(p.size(), ' ');
  return "usage: " + p + " [--sweep depth|lstm|budget|reforward|all] [--quick] [--iterations K]\n" + "       " + pad +
         " [--repeats R] [--planner P|auto] [--json PATH] [--csv PATH] [--plots DIR]\n" + "       " + pad +
         " [--depths LIST] [--lengths LIST] [--no-progress] [--log LEVEL]\n"
         "\n"
         "Measures what recomputation buys on the host device, every configuration side by side\n"
         "in this process (docs/benchmarks.md):\n"
         "  depth      ResNet 32..1202 layers: baseline, sqrtn and the best planner at <= 1 extra\n"
         "             forward and at sqrtn's budget; log-log slopes of feature-map memory and\n"
         "             time overhead\n"
         "  lstm       LSTM 64..2048 steps: reduction against the best run without recomputation\n"
         "  budget     every planner at 0.25x, 0.5x, 0.75x of the traced peak: time overhead\n"
         "             (Transformer-8, and ResNet-434 at batch 16 and 32 unless --quick)\n"
         "  reforward  VGG-19-, ResNet-152- and DenseNet-121-shaped models: memory cut and overhead\n"
         "             at the reforward planner's smallest budget, next to the Re-forwarding paper\n"
         "\n"
         "  --sweep S       one of the above, several separated by commas, or all (default all)\n"
         "  --quick         smaller models and fewer iterations\n"
         "  --iterations K  measured iterations per run, after the traced and validating ones\n"
         "                  (default 3; --quick 2)\n"
         "  --repeats R     rounds of every side-by-side group; times are medians over all rounds'\n"
         "                  iterations (default 2; --quick 1)\n"
         "  --depths LIST   the depth sweep's ResNet depths, comma-separated (default\n"
         "                  32,56,110,218,434,1202; --quick 32,56,110)\n"
         "  --lengths LIST  the lstm sweep's lengths (default 64,...,2048; --quick 64,128,256)\n"
         "  --planner P     the planner of the depth and lstm sweeps (none, sqrtn, chen, chain,\n"
         "                  tiered, reforward, greedy, dtr), or auto: the lowest predicted peak at <= 1\n"
         "                  extra forward at the largest size (default auto)\n"
         "  --json PATH     write every figure as JSON\n"
         "  --csv PATH      write one row per run as CSV\n"
         "  --plots DIR     write SVG plots into DIR\n"
         "  --no-progress   no progress lines on stderr\n"
         "  --log LEVEL     the engine's log in every budgeted run, as SUBLINEAR_LOG: error, warn,\n"
         "                  info or debug (default error; info shows each iteration and offload)\n"
         "\n"
         "Times are wall-clock on this machine and carry its load: read the ratios, taken within\n"
         "one group. Memory figures are exact.\n"
         "\n"
         "How long: a default run (all sweeps) took 35 min on two idle CPU cores\n"
         "(docs/benchmarks.md); `--quick` took 6 min 18 s on two cores shared with other work.\n"
         "From the per-point figures of that --quick run a default run there is estimated at\n"
         "about " + default_estimate() + ".\n"
         "Progress lines on stderr count the points and estimate the time left; each sweep's\n"
         "JSON, CSV and plots are written as it finishes.\n";
}

bench_options parse_bench_args(std::span<const std::string_view> args, std::string_view prog) {
  const auto bad = [&](const std::string& what) -> void {
    throw config_error(what + " (try '" + std::string(prog) + " --help')");
  };
  bench_options o;
  const std::span<const std::string_view> sweeps = sweep_names();
  const auto count = [&](std::string_view flag, std::string_view v) {
    std::int64_t n = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || ptr != v.data() + v.size() || n < 1) {
      bad(std::string(flag) + " needs an integer >= 1, got '" + std::string(v) + "'");
    }
    return n;
  };
  for (cli::arg_reader r(args, bad); r.next();) {
    const std::string_view flag = r.flag();
    const auto next = [&] { return r.value(); };
    if (flag == "--sweep") {
      std::string_view list = next();
      while (!list.empty()) {
        const auto comma = list.find(',');
        const std::string_view name = list.substr(0, comma);
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        if (name == "all") {
          for (auto n : sweeps) o.sweeps.emplace_back(n);
        } else if (std::find(sweeps.begin(), sweeps.end(), name) != sweeps.end()) {
          o.sweeps.emplace_back(name);
        } else {
          bad("--sweep must be depth, lstm, budget, reforward or all (or a comma-separated list), got '" +
              std::string(name) + "'");
        }
      }
    } else if (flag == "--quick") {
      o.quick = true;
    } else if (flag == "--iterations") {
      o.iterations = count(flag, next());
    } else if (flag == "--repeats") {
      o.repeats = count(flag, next());
    } else if (flag == "--depths" || flag == "--lengths") {
      // A comma-separated list of sizes, each checked by building the model it names.
      const bool depth = flag == "--depths";
      std::vector<std::int64_t>& sizes = depth ? o.depths : o.lengths;
      sizes.clear();
      std::string_view list = next();
      while (true) {
        const auto comma = list.find(',');
        const std::int64_t n = count(flag, list.substr(0, comma));
        try {
          (void)models::make_model(depth ? models::model_config{models::model_kind::resnet, n, 0, 0}
                                         : models::model_config{models::model_kind::lstm, 0, n, 0});
        } catch (const config_error& e) {
          bad(std::string(flag) + ": " + e.what());
        }
        sizes.push_back(n);
        if (comma == std::string_view::npos) break;
        list = list.substr(comma + 1);
      }
      std::sort(sizes.begin(), sizes.end());
      sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    } else if (flag == "--planner") {
      o.planner = std::string(next());
      if (o.planner != "auto") {
        const auto names = policy::planner_names();
        if (std::find(names.begin(), names.end(), std::string_view(o.planner)) == names.end()) {
          std::string all;
          for (auto n : names) all += std::string(n) + ", ";
          bad("--planner must be one of " + all + "or auto, got '" + o.planner + "'");
        }
      }
    } else if (flag == "--json" || flag == "--csv" || flag == "--plots") {
      const std::string v(next());
      if (v.empty()) bad(std::string(flag) + " needs a path");
      (flag == "--json" ? o.json_path : flag == "--csv" ? o.csv_path : o.plots_dir) = v;
    } else if (flag == "--no-progress") {
      o.progress = false;
    } else if (flag == "--log") {
      o.engine_log = runtime::parse_log_level("--log", std::string(next()));
    } else {
      bad("unknown argument '" + std::string(r.raw()) + "'");
    }
  }
  if (o.sweeps.empty()) {
    for (auto n : sweeps) o.sweeps.emplace_back(n);
  }
  // In the order `all` runs them, each once.
  std::vector<std::string> ordered;
  for (auto n : sweeps)
    if (std::find(o.sweeps.begin(), o.sweeps.end(), n) != o.sweeps.end()) ordered.emplace_back(n);
  o.sweeps = ordered;
  return o;
}

int bench_main(std::string_view prog, std::span<const std::string_view> args) {
  for (auto a : args) {
    if (a == "-h" || a == "--help") {
      std::fputs(bench_help(prog).c_str(), stdout);
      return 0;
    }
  }
  const std::string name(prog);
  bench_options o;
  try {
    o = parse_bench_args(args, prog);
  } catch (const config_error& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 2;
  }
  // Checked first: an unwritable path fails now, not after the sweeps.
  try {
    if (!o.json_path.empty()) check_file_writable(o.json_path);
    if (!o.csv_path.empty()) check_file_writable(o.csv_path);
    if (!o.plots_dir.empty()) {
      std::filesystem::create_directories(o.plots_dir);
      check_file_writable((std::filesystem::path(o.plots_dir) / "depth_memory.svg").string());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 1;
  }
  const auto started = clock_type::now();
  progress_meter meter(o);
  progress_fn progress;
  if (o.progress) {
    progress = [&](const std::string& line) {
      const double t = seconds_since(started);
      std::fprintf(stderr, "[%2d:%02d] [%s] %s\n", static_cast<int>(t) / 60, static_cast<int>(t) % 60,
                   meter.status().c_str(), line.c_str());
      std::fflush(stderr);
    };
  }
  std::printf("%s: recomputation sweeps on the host device (%s%s)\n", name.c_str(), o.quick ? "quick, " : "",
              ("sweeps: " + [&] {
                std::string l;
                for (const auto& s : o.sweeps) l += (l.empty() ? "" : ", ") + s;
                return l;
              }()).c_str());
  std::printf("Times are wall-clock on a shared machine; ratios are taken within one group of runs.\n");
  std::fflush(stdout);
  std::vector<sweep_result> results;
  std::size_t saved = 0;  // sweeps whose results are in the files
  int status = 0;
  // Each sweep's results are written as it finishes (JSON and CSV rewritten with every
  // sweep so far, its plots added): a failure later keeps them.
  const auto write_outputs = [&] {
    std::string written;
    if (!o.json_path.empty()) {
      write_file_atomically(o.json_path, json_text(results, o));
      written += "JSON " + o.json_path;
    }
    if (!o.csv_path.empty()) {
      write_file_atomically(o.csv_path, csv_text(results));
      written += (written.empty() ? "CSV " : ", CSV ") + o.csv_path;
    }
    if (!o.plots_dir.empty()) {
      for (const auto& path : write_plots(o.plots_dir, std::span(&results.back(), 1))) {
        written += (written.empty() ? "plot " : ", plot ") + path;
      }
    }
    if (!written.empty()) std::printf("\nwritten (sweeps so far): %s\n", written.c_str());
    std::fflush(stdout);
    saved = results.size();
  };
  try {
    for (std::size_t i = 0; i < o.sweeps.size(); ++i) {
      results.push_back(run_sweep(o.sweeps[i], o, progress, [&](std::size_t point) { meter.reached(i, point); }));
      meter.finished(i);
      print_sweep(stdout, results.back());
      for (const auto& p : results.back().points)
        for (const auto& r : p.runs)
          if (r.status == "failed" || ((r.status == "ok" || r.status == "unsteady") && !r.policy.empty() &&
                                       (!r.params_bit_identical || !r.within_budget)))
            status = 1;
      write_outputs();
      if (progress) progress(o.sweeps[i] + " done");
    }
  } catch (const config_error& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    if (saved > 0 && (!o.json_path.empty() || !o.csv_path.empty() || !o.plots_dir.empty())) {
      std::fprintf(stderr, "%s: the results of the sweeps that finished before (%zu of %zu) are in the files written above\n",
                   name.c_str(), saved, o.sweeps.size());
    }
    return 1;
  }
  std::printf("\ntotal %.0f s\n", seconds_since(started));
  if (status != 0) {
    std::fprintf(stderr, "%s: some runs failed or were not bit-identical / within budget (see the tables)\n",
                 name.c_str());
  }
  return status;
}

}  // namespace sublinear::cli::bench

namespace sublinear::cli {

// bench::bench_main prints its own help and usage errors and returns these statuses.
static_assert(kExitOk == 0 && kExitFailure == 1 && kExitUsage == 2);

int bench_main(std::span<const std::string_view> args) { return bench::bench_main("sublinear bench", args); }

}  // namespace sublinear::cli
