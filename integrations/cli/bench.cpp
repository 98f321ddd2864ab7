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
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "integrations/cli/args.hpp"
#include "integrations/cli/bench/measure.hpp"
#include "integrations/cli/bench/sweep_output.hpp"
#include "integrations/cli/bench/sweep_plots.hpp"
#include "integrations/cli/bench/sweeps.hpp"
#include "integrations/cli/commands.hpp"
#include "policy/planner.hpp"
#include "sublinear/error.hpp"

namespace sublinear::cli::bench {


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
         "  --quick         smaller models and fewer iterations: about a minute instead of ~10\n"
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
         "one group. Memory figures are exact.\n";
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
  // Opened first: an unwritable path fails now, not after the sweeps.
  std::ofstream json, csv;
  if (!o.json_path.empty()) {
    json.open(o.json_path);
    if (!json) {
      std::fprintf(stderr, "%s: cannot open %s for writing\n", name.c_str(), o.json_path.c_str());
      return 1;
    }
  }
  if (!o.csv_path.empty()) {
    csv.open(o.csv_path);
    if (!csv) {
      std::fprintf(stderr, "%s: cannot open %s for writing\n", name.c_str(), o.csv_path.c_str());
      return 1;
    }
  }
  const auto started = clock_type::now();
  progress_fn progress;
  if (o.progress) {
    progress = [&](const std::string& line) {
      const double t = seconds_since(started);
      std::fprintf(stderr, "[%2d:%02d] %s\n", static_cast<int>(t) / 60, static_cast<int>(t) % 60, line.c_str());
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
  int status = 0;
  try {
    for (const auto& id : o.sweeps) {
      results.push_back(run_sweep(id, o, progress));
      print_sweep(stdout, results.back());
      for (const auto& p : results.back().points)
        for (const auto& r : p.runs)
          if (r.status == "failed" || ((r.status == "ok" || r.status == "unsteady") && !r.policy.empty() &&
                                       (!r.params_bit_identical || !r.within_budget)))
            status = 1;
    }
  } catch (const config_error& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return 1;
  }
  if (json.is_open()) {
    write_json(json, results, o);
    json.close();
    if (!json) {
      std::fprintf(stderr, "%s: writing %s failed\n", name.c_str(), o.json_path.c_str());
      return 1;
    }
    std::printf("\nJSON written to %s\n", o.json_path.c_str());
  }
  if (csv.is_open()) {
    write_csv(csv, results);
    csv.close();
    if (!csv) {
      std::fprintf(stderr, "%s: writing %s failed\n", name.c_str(), o.csv_path.c_str());
      return 1;
    }
    std::printf("CSV written to %s\n", o.csv_path.c_str());
  }
  if (!o.plots_dir.empty()) {
    try {
      for (const auto& path : write_plots(o.plots_dir, results)) std::printf("plot written to %s\n", path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
      return 1;
    }
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
