// `sublinear demo`: trains a model on the host device and prints what memory and time an
// iteration takes.
//
// Note [Demo layout]
// Rationale: the demo is the first thing a newcomer runs, on a machine without a GPU, and
//   it will show the budgeted run beside the plain one (issue 6). So every figure is laid
//   out as a row with one column per run, and the JSON keys carry a per-run prefix.
// Approach: parse and validate every argument before anything runs (a bad argument is an
//   error saying what would be right, exit status 2); build the model from the shared
//   registry; train it in a host_session through the C entry points; print a header, the
//   per-iteration table and the summary, one column (group) per run; write the same
//   figures as JSON with write_figures_json. With a budget, the baseline trains beside
//   the budgeted run, the two taking turns one iteration each (Note [Paired timing] in
//   workloads/paired.hpp), and the time ratio is the median over the planned
//   iterations of each one's ratio to the baseline's same iteration: this machine's speed
//   drifts by up to 30% within minutes, which made two runs one after the other disagree
//   by more than the overhead they measured.
// Limitations: the host device is a CPU: times show how cost scales, not GPU speed.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <span>
#include <stdexcept>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/atomic_file.hpp"
#include "common/text.hpp"
#include "runtime/engine.hpp"
#include "runtime/host/host_runtime.hpp"
#include "workloads/host_session.hpp"
#include "workloads/paired.hpp"
#include "policy/budget.hpp"
#include "policy/planner.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"
#include "integrations/cli/args.hpp"
#include "integrations/cli/commands.hpp"
#include "sublinear/error.hpp"

namespace sublinear::cli {
namespace {

namespace wl = sublinear::workloads;
namespace models = sublinear::workloads::models;

constexpr const char* kHelp =
    "usage: sublinear demo [--model mlp|resnet|densenet|lstm|transformer] [--depth N]\n"
    "                      [--seq-len T] [--batch B] [--iterations K] [--seed S]\n"
    "                      [--streams 1|2] [--budget B] [--policy P] [--json PATH]\n"
    "\n"
    "Trains a model on the host device (a CPU backend with CUDA's semantics) twice: as it\n"
    "is (baseline), then under sublinear with a memory budget. Prints side by side, per\n"
    "iteration and in summary: wall time, peak mapped memory (what a budget limits),\n"
    "feature-map memory (peak allocated bytes minus parameters, gradients, optimizer state\n"
    "and buffers; see docs/workloads.md), evictions, recomputed launches, and whether the\n"
    "parameters after training are bit-identical.\n"
    "\n"
    "  --model NAME      the workload (default resnet)\n"
    "  --depth N         mlp: linear layers (default 4); resnet: layers, 2 + 2 x blocks, even,\n"
    "                    >= 8 (default 218 here); densenet: 3L + 4 layers (default 22);\n"
    "                    transformer: encoder layers (default 2)\n"
    "  --seq-len T       lstm: unrolled steps (default 256); transformer: tokens (default 64)\n"
    "  --batch B         samples per iteration (default 32 for mlp, 16 for resnet, 8 otherwise)\n"
    "  --iterations K    training iterations (default 5)\n"
    "  --seed S          seed of the initial parameters and the synthetic data (default 1)\n"
    "  --streams 1|2     2 runs the upload and optimizer step on a second stream (default 1)\n"
    "  --budget B        the budget: bytes (8MiB), a share of device memory (60%), a\n"
    "                    multiple of the traced peak (0.5x), or 'none' for the baseline\n"
    "                    only (default 0.5x)\n"
    "  --policy P        the planner: none, sqrtn, chen, chain, tiered, reforward, greedy, dtr\n"
    "                    (default reforward)\n"
    "  --json PATH       also write the figures as JSON to PATH\n"
    "\n"
    "examples:\n"
    "  sublinear demo\n"
    "  sublinear demo --model resnet --depth 1202 --iterations 3\n"
    "  sublinear demo --model lstm --seq-len 2048 --json lstm.json\n";

struct demo_options {
  models::model_config model;
  std::int64_t iterations = 5;
  std::uint64_t seed = 1;
  int streams = 1;
  std::string json_path;
  std::optional<policy::budget_spec> budget = policy::parse_budget("0.5x");  // none: the baseline alone
  std::string policy = "reforward";
};

// A usage error: the message says what would be right.
[[noreturn]] void bad(const std::string& what) { throw config_error(what + " (try 'sublinear demo --help')"); }

std::int64_t parse_count(std::string_view flag, std::string_view value, std::int64_t min) {
  std::int64_t v = 0;
  const auto* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc() || ptr != end || v < min) {
    bad(std::string(flag) + " needs an integer >= " + std::to_string(min) + ", got '" + std::string(value) + "'");
  }
  return v;
}

demo_options parse(std::span<const std::string_view> args) {
  demo_options o;
  for (arg_reader r(args, &bad); r.next();) {
    const std::string_view flag = r.flag();
    const auto next = [&] { return r.value(); };
    if (flag == "--model") {
      const auto v = next();
      const auto kind = models::parse_model_kind(v);
      if (!kind) bad("--model must be one of " + std::string(models::model_kind_names()) + ", got '" + std::string(v) + "'");
      o.model.kind = *kind;
    } else if (flag == "--depth") {
      o.model.depth = parse_count(flag, next(), 1);
    } else if (flag == "--seq-len") {
      o.model.seq_len = parse_count(flag, next(), 1);
    } else if (flag == "--batch") {
      o.model.batch = parse_count(flag, next(), 1);
    } else if (flag == "--iterations") {
      o.iterations = parse_count(flag, next(), 1);
    } else if (flag == "--seed") {
      o.seed = static_cast<std::uint64_t>(parse_count(flag, next(), 0));
    } else if (flag == "--streams") {
      const auto v = next();
      if (v != "1" && v != "2") bad("--streams must be 1 or 2, got '" + std::string(v) + "'");
      o.streams = v == "1" ? 1 : 2;
    } else if (flag == "--budget") {
      const std::string_view v = next();
      o.budget.reset();
      if (v != "none") {
        try {
          o.budget = policy::parse_budget(v);
        } catch (const config_error& e) {
          bad(std::string("--budget: ") + e.what());
        }
      }
    } else if (flag == "--policy") {
      o.policy = std::string(next());
      const auto names = policy::planner_names();
      if (std::find(names.begin(), names.end(), std::string_view(o.policy)) == names.end()) {
        std::string all;
        for (auto n : names) all += (all.empty() ? "" : ", ") + std::string(n);
        bad("--policy must be one of " + all + ", got '" + o.policy + "'");
      }
    } else if (flag == "--json") {
      o.json_path = std::string(next());
      if (o.json_path.empty()) bad("--json needs a file path");
    } else {
      bad("unknown argument '" + std::string(r.raw()) + "'");
    }
  }
  return o;
}

// ---- printing --------------------------------------------------------------------------

struct run_column {
  std::string label;
  const wl::training_figures* figures;
};

std::string bytes(std::size_t n) { return format_bytes(n); }

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10.0 ? "%.3f s" : "%.1f s", s);
  return buf;
}

std::string loss_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", static_cast<double>(v));
  return buf;
}

void print_header(const demo_options& o, const wl::training_figures& f) {
  std::printf("sublinear demo: %s on the host device\n", f.model.c_str());
  std::printf("  model        %s\n", f.description.c_str());
  std::printf("  parameters   %lld (persistent state %s: parameters, gradients, optimizer state, buffers)\n",
              static_cast<long long>(f.parameter_count), bytes(f.persistent_bytes).c_str());
  std::printf("  run          %lld iterations, seed %llu, %d stream%s\n", static_cast<long long>(o.iterations),
              static_cast<unsigned long long>(o.seed), o.streams, o.streams == 1 ? "" : "s");
}

// Per iteration: one group of columns per run, its label above it.
void print_iterations(std::span<const run_column> runs) {
  std::printf("\nper iteration\n      ");
  for (std::size_t g = 0; g < runs.size(); ++g) {
    std::printf(g + 1 < runs.size() ? "   %-46s" : "   %s", runs[g].label.c_str());
  }
  std::printf("\n  iter");
  for (std::size_t g = 0; g < runs.size(); ++g) std::printf("   %9s %12s %12s %10s", "time", "peak mapped", "feature maps", "loss");
  std::printf("\n");
  const std::size_t n = runs.front().figures->iterations.size();
  for (std::size_t i = 0; i < n; ++i) {
    std::printf("  %4zu", i + 1);
    for (const auto& r : runs) {
      const auto& it = r.figures->iterations[i];
      std::printf("   %9s %12s %12s %10s", seconds(it.seconds).c_str(), bytes(it.peak_mapped_bytes).c_str(),
                  bytes(it.feature_map_bytes).c_str(), loss_text(it.loss).c_str());
    }
    std::printf("\n");
  }
}

// Summary: one row per figure, one column per run.
void print_summary(std::span<const run_column> runs) {
  const auto row = [&](const char* label, auto value_of) {
    std::printf("  %-28s", label);
    for (const auto& r : runs) std::printf(" %14s", value_of(*r.figures).c_str());
    std::printf("\n");
  };
  std::printf("\nsummary%23s", "");
  for (const auto& r : runs) std::printf(" %14s", r.label.c_str());
  std::printf("\n");
  row("peak mapped memory", [](const wl::training_figures& f) { return bytes(f.peak_mapped_bytes()); });
  row("feature-map memory", [](const wl::training_figures& f) { return bytes(f.feature_map_bytes()); });
  row("peak allocated, any state", [](const wl::training_figures& f) { return bytes(f.peak_allocated_bytes()); });
  row("persistent memory", [](const wl::training_figures& f) { return bytes(f.persistent_bytes); });
  row("iteration time (median)", [](const wl::training_figures& f) { return seconds(f.iteration_seconds()); });
  row("final loss", [](const wl::training_figures& f) { return loss_text(f.iterations.back().loss); });
  std::printf(
      "\nfeature-map memory = peak resident (allocated and not evicted) - persistent memory:\n"
      "activations, activation gradients, the batch and temporaries (docs/workloads.md).\n"
      "Peak allocated counts every live block at its rounded size, evicted ones too (an\n"
      "evicted block keeps its address range, in whole pages): address space, not memory.\n"
      "The median leaves out iteration 1, which maps the allocator's first segments; the\n"
      "sublinear column counts its traced iterations too (planned figures are below).\n");
}

// ---- the budgeted run (the replay engine on the host device) ------------------------------

struct budgeted_run {
  wl::training_figures figures;
  std::vector<runtime::iteration_report> reports;
  std::size_t budget = 0;
  std::size_t predicted_peak = 0;
  runtime::engine::plan_compute plan_cost;  // the plan's recompute and the recompute floor
  std::size_t peak = 0;   // over the planned iterations
  double iter_s = 0.0;    // median over the steady planned iterations (0: none ran)
  double validate_iter_s = 0.0;  // median over the validating ones (the first planned, by default)
  double time_ratio = 0.0;  // median over the steady iterations of this run's / the baseline's same iteration
  std::vector<std::vector<float>> params;
  std::size_t evictions = 0;
  std::size_t recomputed = 0;
  std::size_t retained = 0;  // frees deferred so that recipes read the block in place
  std::size_t packed = 0;    // planned iterations: evicted buffers placed in shared pages (Note [Packs])
  std::size_t allocator_waits = 0;  // planned iterations: the allocator waited for a stream
  std::size_t handoffs = 0;         // planned iterations: chunks taken from queued work instead
  std::uint64_t segment_trims = 0;  // the allocator's last resort (Note [Segment trim])
  std::size_t trimmed_bytes = 0;
  bool bit_identical = false;
  std::string plan_error;
  std::string cache_allowance = "traced";  // Note [Scaled cache allowance] in policy/planning_overhead.hpp
  std::size_t budget_lifted = 0;           // iterations that ran out of room and finished without the budget
  std::string report_error;                // SUBLINEAR_REPORT could not be written
  // Offload (docs/runtime.md, "Offload execution"): per planned iteration, medians.
  runtime::engine::plan_link link;  // the plan's offloads and the link it was made for
  runtime::engine::plan_time time;  // the plan's predicted iteration time (Note [Predicted iteration time])
  double predicted_s = 0.0;         // steady iterations: median of each one's prediction, made before it
  double predicted_ratio = 0.0;     // steady iterations: median of each one's prediction over its time
  double offloaded_bytes = 0.0, fetched_bytes = 0.0, link_copies = 0.0;
  double link_busy_s = 0.0, copy_stall_s = 0.0, release_wait_s = 0.0;
};

// 0 when empty.
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The baseline: through the C entry points when it runs alone; beside the budgeted run
// (`pace`), in a session of its own that leaves the process default to the budgeted run.
struct baseline_run {
  wl::training_figures figures;
  std::vector<std::vector<float>> params;
};

baseline_run run_baseline(const demo_options& o, wl::pacer* pace) {
  wl::pacer::turns turns(pace, 1);  // Note [Paired timing]
  baseline_run out;
  wl::host_session_options so;
  so.install_default = pace == nullptr;
  wl::host_session session(so);
  wl::context ctx = session.make_context();
  auto m = models::make_model(o.model);
  wl::training_options t;
  t.iterations = o.iterations;
  t.seed = o.seed;
  t.streams = o.streams;
  t.on_iteration_end = [&](const wl::iteration_figures& f) { turns.after_iteration(f.index, o.iterations); };
  out.figures = wl::train(ctx, *m, t);
  out.params = wl::download_parameters(ctx, *m);
  return out;
}

budgeted_run run_budgeted(const demo_options& o, wl::pacer& pace) {
  wl::pacer::turns turns(&pace, 0);  // Note [Paired timing]
  budgeted_run out;
  wl::host_session session;
  // As sublinear's allocator is from its first allocation in a real process: without this
  // the Transformer and LSTM demos ran out of memory at 0.5x-0.65x (their parameters sat
  // in a 2 MiB small segment).
  runtime::use_engine_allocator_settings(session.allocator());
  wl::context ctx = session.make_context();
  auto m = models::make_model(o.model);
  m->init(ctx, o.seed);  // the engine starts once the model exists, as in a framework
  runtime::engine_options eo;
  eo.config = runtime::read_settings_from_environment();
  eo.config.budget = o.budget;
  eo.config.policy = o.policy;
  eo.device_capacity = session.vmm().physical_capacity();
  runtime::host_runtime rt(session.device(), session.allocator(), eo);
  rt.set_model_name(m->name());  // names the run in its report (SUBLINEAR_REPORT)
  wl::training_options t;
  t.iterations = o.iterations;
  t.seed = o.seed;
  t.streams = o.streams;
  t.on_iteration_end = [&](const wl::iteration_figures& f) {
    rt.mark_iteration();
    turns.after_iteration(f.index, o.iterations);
  };
  out.figures = wl::train(ctx, *m, t);
  out.params = wl::download_parameters(ctx, *m);
  try {
    rt.write_report();  // here, so that a failure fails the demo
  } catch (const std::exception& e) {
    out.report_error = e.what();
  }
  out.reports = rt.get().iterations();
  out.budget = rt.get().budget();
  out.predicted_peak = rt.get().predicted_peak();
  out.plan_cost = rt.get().planned_compute();
  out.plan_error = rt.get().plan_error();
  out.cache_allowance = policy::to_string(rt.get().plan_allowance());
  out.link = rt.get().planned_link();
  out.time = rt.get().predicted_time();
  std::vector<double> offloaded, fetched, copies, busy, stall, waited;
  const allocator::stats st = session.allocator().get_stats();
  out.segment_trims = st.segment_trims;
  out.trimmed_bytes = st.trimmed_bytes;
  // Steady and validating iterations apart: validation hashes every regenerated buffer, so
  // its iteration can take longer than a steady one (1.0-1.7x on the host demos).
  std::vector<double> times, validate_times, predicted, predicted_ratio;
  for (std::size_t i = 0; i < out.reports.size(); ++i) {
    const auto& r = out.reports[i];
    out.evictions += r.evictions;
    out.recomputed += r.recomputed_launches;
    out.retained += r.retained;
    out.budget_lifted += r.budget_lifted ? 1 : 0;
    if (r.state == runtime::engine_state::trace) continue;
    out.allocator_waits += r.allocator_waits;
    out.handoffs += r.handoffs;
    out.packed += r.packed;
    out.peak = std::max(out.peak, r.peak_mapped);
    if (!r.diverged) {
      offloaded.push_back(static_cast<double>(r.offloaded_bytes));
      fetched.push_back(static_cast<double>(r.fetched_bytes));
      copies.push_back(static_cast<double>(r.link_copies));
      busy.push_back(r.link_busy_s);
      stall.push_back(r.copy_stall_s);
      waited.push_back(r.release_wait_s);
    }
    if (i < out.figures.iterations.size()) {
      const double s = out.figures.iterations[i].seconds;
      if (r.state == runtime::engine_state::steady) times.push_back(s);
      if (r.state == runtime::engine_state::validate) validate_times.push_back(s);
    }
    if (r.state != runtime::engine_state::steady) continue;
    if (r.predicted_s > 0.0) predicted.push_back(r.predicted_s);
    if (r.predicted_s > 0.0 && i < out.figures.iterations.size() && out.figures.iterations[i].seconds > 0.0)
      predicted_ratio.push_back(r.predicted_s / out.figures.iterations[i].seconds);
  }
  out.iter_s = median(std::move(times));
  out.validate_iter_s = median(std::move(validate_times));
  out.predicted_s = median(std::move(predicted));
  out.predicted_ratio = median(std::move(predicted_ratio));
  out.offloaded_bytes = median(std::move(offloaded));
  out.fetched_bytes = median(std::move(fetched));
  out.link_copies = median(std::move(copies));
  out.link_busy_s = median(std::move(busy));
  out.copy_stall_s = median(std::move(stall));
  out.release_wait_s = median(std::move(waited));
  return out;
}

void print_budgeted(const budgeted_run& b, const wl::training_figures& baseline, const demo_options& o) {
  std::printf("\nsublinear\n");
  if (!b.plan_error.empty()) {
    if (b.budget_lifted > 0) {
      std::printf("  %zu planned iteration%s ran out of room with the allocator's cache scaled to the budget and\n"
                  "  finished without it (Note [Scaled cache allowance]); then ",
                  b.budget_lifted, b.budget_lifted == 1 ? "" : "s");
    } else {
      std::printf("  ");
    }
    std::printf("no plan, so no eviction: %s\n", b.plan_error.c_str());
    return;
  }
  const auto row = [](const char* label, const std::string& value) {
    std::printf("  %-32s %14s\n", label, value.c_str());
  };
  const auto ratio = [](double x, double y) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fx", y == 0.0 ? 0.0 : x / y);
    return std::string(buf);
  };
  row("budget", bytes(b.budget));
  row("predicted peak (the plan)", bytes(b.predicted_peak));
  if (b.plan_cost.traced_s > 0) {
    const auto share = [&](double s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "+%.1f%%", 100.0 * s / b.plan_cost.traced_s);
      return std::string(buf);
    };
    row("planned recompute (traced time)", share(b.plan_cost.added_s));
    // The offload floor bounds recompute and stalls together.
    if (b.plan_cost.floor_with_offload) row("  predicted stalls (the plan)", share(b.link.predicted_stall_s));
    row(b.plan_cost.floor_with_offload ? "  offload floor (no plan less)" : "  recompute floor (no plan less)",
        share(b.plan_cost.floor_s));
  }
  if (b.plan_cost.planning_s > 0) row("planning (pause at the marker)", seconds(b.plan_cost.planning_s));
  if (b.cache_allowance == "scaled") row("allocator's cache allowance", "scaled");
  if (b.budget_lifted > 0) row("iterations that ran over (lifted)", std::to_string(b.budget_lifted));
  row("peak mapped (planned iterations)", bytes(b.peak));
  row("  against the baseline peak", ratio(static_cast<double>(b.peak), static_cast<double>(baseline.peak_mapped_bytes())));
  row("iteration time (steady, median)", b.iter_s > 0.0 ? seconds(b.iter_s) : std::string("none ran"));
  if (b.predicted_s > 0.0) {
    row("  predicted (before each ran)", seconds(b.predicted_s));
    row("  predicted by the plan (traced)", seconds(b.time.at_plan.predicted_s));
  }
  row("  against the baseline time", b.time_ratio > 0.0 ? ratio(b.time_ratio, 1.0) : std::string("none ran"));
  if (b.validate_iter_s > 0.0) row("  validating iteration (median)", seconds(b.validate_iter_s));
  if (b.link.offloads > 0 || b.offloaded_bytes > 0) {
    row("offloaded buffers (the plan)", std::to_string(b.link.offloads));
    row("  over the link each way (median)", bytes(static_cast<std::size_t>(b.offloaded_bytes)));
    row("  copies over the link (median)", std::to_string(static_cast<std::size_t>(b.link_copies)));
    row("  link busy per iteration", seconds(b.link_busy_s));
    row("  compute waited for fetches", seconds(b.copy_stall_s));
    char gbs[64];
    std::snprintf(gbs, sizeof gbs, "%.3g/%.3g GB/s", b.link.to_host_bytes_per_s / 1e9,
                  b.link.to_device_bytes_per_s / 1e9);
    row(("  link (" + b.link.source + ")").c_str(), gbs);
  }
  if (!b.link.refused.empty()) std::printf("  offload off: %s\n", b.link.refused.c_str());
  row("evictions (all iterations)", std::to_string(b.evictions));
  row("recomputed launches", std::to_string(b.recomputed));
  if (b.retained > 0) row("frees deferred (retained)", std::to_string(b.retained));
  if (b.packed > 0) row("evictions packed (shared pages)", std::to_string(b.packed));
  if (b.allocator_waits > 0 || b.handoffs > 0)
    row("allocator waits / handoffs (planned)", std::to_string(b.allocator_waits) + " / " + std::to_string(b.handoffs));
  if (b.segment_trims > 0)
    row("segments trimmed (last resort)", std::to_string(b.segment_trims) + ", " + bytes(b.trimmed_bytes));
  row("parameters bit-identical", b.bit_identical ? "yes" : "NO");
  std::printf(
      "\nThe two runs take turns, one iteration each, so that both meet the same machine; the\n"
      "time ratio is the median over the steady iterations of each one's time over the\n"
      "baseline's same iteration (Note [Paired timing]). The iteration time is the median over\n"
      "the steady planned iterations; the validating one is shown apart.\n");
  if (o.budget && o.budget->form == policy::budget_spec::kind::peak_fraction) {
    std::printf(
        "\nThe traced iterations run without a budget (a multiple of the traced peak is known only\n"
        "after them); the budget holds from the first planned iteration on, which also validates\n"
        "every regenerated buffer (docs/runtime.md).\n");
  } else {
    std::printf(
        "\nThe traced iterations hold the budget by offloading blocks to host memory; the planned\n"
        "iterations evict and recompute, and the first of them validates every regenerated\n"
        "buffer (docs/runtime.md).\n");
  }
}

std::vector<std::pair<std::string, std::string>> budgeted_json(const budgeted_run& b, const demo_options& o) {
  const auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  // The steady iterations' VMM calls and hook time (medians), beside the plan's prediction.
  std::vector<double> vmm_calls, hooks_s, hashed, waits, settles;
  for (const auto& r : b.reports) {
    if (r.state != runtime::engine_state::steady || r.diverged) continue;
    vmm_calls.push_back(static_cast<double>(r.vmm_calls));
    hooks_s.push_back(r.launch_hooks_s);
    hashed.push_back(static_cast<double>(r.hashed_bytes));
    waits.push_back(static_cast<double>(r.check_waits));
    settles.push_back(static_cast<double>(r.settle_waits));
  }
  const runtime::write_check_work& checks = b.time.at_plan.checks;
  return {
      {"policy", wl::json_string(o.policy)},
      {"budget", wl::json_string(o.budget ? o.budget->text : "none")},
      {"budget_bytes", std::to_string(b.budget)},
      {"predicted_peak_bytes", std::to_string(b.predicted_peak)},
      {"planned_recompute_s", num(b.plan_cost.added_s)},
      {"recompute_floor_s", num(b.plan_cost.floor_s)},
      {"floor_with_offload", b.plan_cost.floor_with_offload ? "true" : "false"},
      {"traced_compute_s", num(b.plan_cost.traced_s)},
      {"planning_s", num(b.plan_cost.planning_s)},
      {"peak_bytes", std::to_string(b.peak)},
      {"iter_s", num(b.iter_s)},
      {"validate_iter_s", num(b.validate_iter_s)},
      {"time_ratio", num(b.time_ratio)},
      {"evictions", std::to_string(b.evictions)},
      {"recomputed_launches", std::to_string(b.recomputed)},
      {"packed", std::to_string(b.packed)},
      {"allocator_waits", std::to_string(b.allocator_waits)},
      {"handoffs", std::to_string(b.handoffs)},
      {"segment_trims", std::to_string(b.segment_trims)},
      {"trimmed_bytes", std::to_string(b.trimmed_bytes)},
      {"params_bit_identical", b.bit_identical ? "true" : "false"},
      {"plan_error", wl::json_string(b.plan_error)},
      {"cache_allowance", wl::json_string(b.cache_allowance)},
      {"budget_lifted_iterations", std::to_string(b.budget_lifted)},
      {"offloaded_buffers", std::to_string(b.link.offloads)},
      {"offloaded_bytes", num(b.offloaded_bytes)},
      {"fetched_bytes", num(b.fetched_bytes)},
      {"link_copies", num(b.link_copies)},
      {"link_busy_s", num(b.link_busy_s)},
      {"copy_stall_s", num(b.copy_stall_s)},
      {"release_wait_s", num(b.release_wait_s)},
      {"predicted_link_busy_s", num(b.link.link_busy_s)},
      {"predicted_stall_s", num(b.link.predicted_stall_s)},
      // Each planned iteration's predicted time (median; Note [Predicted iteration time]), the
      // plan's own from the traced iteration, and the simulator's device time alone.
      {"predicted_iter_s", num(b.predicted_s)},
      {"predicted_over_measured", num(b.predicted_ratio)},
      {"predicted_iter_at_plan_s", num(b.time.at_plan.predicted_s)},
      {"predicted_device_iter_s", num(b.link.predicted_device_s)},
      {"host_s_per_launch", num(b.time.next.host_s_per_launch)},
      {"traced_host_s_per_launch", num(b.time.at_plan.host_s_per_launch)},
      {"predicted_launches", std::to_string(b.time.next.launches)},
      {"traced_recording_s", num(b.time.traced.recording_s)},
      {"predicted_map_backs", std::to_string(b.time.at_plan.remaps.map_backs)},
      {"predicted_vmm_calls", std::to_string(b.time.at_plan.vmm_calls)},
      {"predicted_vmm_s", num(b.time.at_plan.vmm_s)},
      {"vmm_cycle_s", num(b.time.vmm_cycle.cycle_s)},
      {"vmm_byte_s", num(b.time.vmm_cycle.byte_s)},
      {"steady_vmm_calls", num(median(vmm_calls))},
      {"steady_launch_hooks_s", num(median(hooks_s))},
      // The plan's write checks (Note [Write check work]) against a steady iteration's.
      {"predicted_hashes", std::to_string(checks.hashes)},
      {"predicted_hashed_bytes", std::to_string(checks.hashed_bytes)},
      {"predicted_check_waits", std::to_string(checks.waits)},
      {"predicted_input_copy_bytes", std::to_string(checks.copied_bytes)},
      {"predicted_check_s", num(b.time.at_plan.check_s)},
      {"hash_issue_s", num(b.time.hash.issue_s)},
      {"hash_wait_s", num(b.time.hash.wait_s)},
      {"hash_byte_s", num(b.time.hash.byte_s)},
      {"steady_hashed_bytes", num(median(hashed))},
      {"steady_check_waits", num(median(waits))},
      {"steady_settle_waits", num(median(settles))},
      {"link_to_host_bytes_per_s", num(b.link.to_host_bytes_per_s)},
      {"link_to_device_bytes_per_s", num(b.link.to_device_bytes_per_s)},
      {"link_source", wl::json_string(b.link.source)},
      {"offload_error", wl::json_string(b.link.refused)},
  };
}

}  // namespace

int demo_main(std::span<const std::string_view> args) {
  if (wants_help(args)) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  demo_options o;
  try {
    o = parse(args);
    // The demo's ResNet is deep enough that feature maps dominate, so a 0.5x budget is met.
    if (o.model.kind == models::model_kind::resnet && o.model.depth == 0) o.model.depth = 218;
    (void)models::make_model(o.model);  // every size is checked before anything runs
  } catch (const config_error& e) {
    std::fprintf(stderr, "sublinear demo: %s\n", e.what());
    return kExitUsage;
  }

  // Checked before training, so an unwritable path fails in a second, not after the run.
  if (!o.json_path.empty()) check_file_writable(o.json_path);

  // With a budget, the baseline trains beside the budgeted run, one iteration each in
  // turn, so that iteration i of both meets the same machine (Note [Paired timing]).
  baseline_run base;
  budgeted_run budgeted;
  const bool with_budget = o.budget.has_value();
  if (with_budget) {
    wl::pacer pace;
    std::string baseline_failure;
    std::thread beside([&] {
      try {
        base = run_baseline(o, &pace);
      } catch (const std::exception& e) {
        baseline_failure = e.what();
      }
    });
    try {
      budgeted = run_budgeted(o, pace);  // its turns end when it returns or throws
    } catch (...) {
      beside.join();
      throw;
    }
    beside.join();
    if (!baseline_failure.empty()) throw std::runtime_error("the baseline run failed: " + baseline_failure);
    budgeted.bit_identical = budgeted.params == base.params;
    std::vector<double> ratios;
    for (std::size_t i = 0; i < budgeted.reports.size(); ++i) {
      if (budgeted.reports[i].state != runtime::engine_state::steady) continue;  // as iter_s
      const auto& b = base.figures.iterations;
      const auto& s = budgeted.figures.iterations;
      if (i < b.size() && i < s.size() && b[i].seconds > 0.0) ratios.push_back(s[i].seconds / b[i].seconds);
    }
    budgeted.time_ratio = median(std::move(ratios));
  } else {
    if (const char* report = std::getenv("SUBLINEAR_REPORT"); report != nullptr && *report != '\0') {
      std::fprintf(stderr, "sublinear demo: SUBLINEAR_REPORT=%s is not written: without --budget the demo runs no "
                   "engine (add --budget, for example --budget 0.5x)\n", report);
    }
    base = run_baseline(o, nullptr);
  }
  const wl::training_figures& baseline = base.figures;

  std::vector<run_column> columns{{"baseline", &baseline}};
  if (with_budget) columns.push_back({"sublinear " + o.budget->text + " " + o.policy, &budgeted.figures});
  print_header(o, baseline);
  print_iterations(columns);
  print_summary(columns);
  if (with_budget) print_budgeted(budgeted, baseline, o);
  if (!o.json_path.empty()) {
    std::vector<wl::report_run> runs{{"baseline_", &baseline, {}}};
    std::vector<std::pair<std::string, std::string>> extra;
    if (with_budget) {
      runs.push_back({"sublinear_", &budgeted.figures, {}});
      extra = budgeted_json(budgeted, o);
    }
    std::ostringstream json;
    wl::write_figures_json(json, o.model, runs, extra);
    write_file_atomically(o.json_path, json.str());
    std::printf("\nfigures written to %s\n", o.json_path.c_str());
  }
  if (!budgeted.report_error.empty()) {
    std::fprintf(stderr, "sublinear demo: %s\n", budgeted.report_error.c_str());
    return kExitFailure;
  }
  if (with_budget && !budgeted.bit_identical) return kExitFailure;
  return kExitOk;
}

}  // namespace sublinear::cli
