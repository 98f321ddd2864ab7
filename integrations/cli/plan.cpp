// `sublinear plan --trace FILE --budget B [--policy P|all]`: what a budget would cost, per
// planner, on a recorded trace, before any training runs (Note [Plan preview] in
// runtime/report/report_plan.hpp).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/report/report.hpp"
#include "runtime/report/report_plan.hpp"
#include "runtime/settings.hpp"
#include "common/atomic_file.hpp"
#include "common/text.hpp"
#include "integrations/cli/args.hpp"
#include "integrations/cli/commands.hpp"
#include "policy/budget.hpp"
#include "policy/planner.hpp"
#include "sublinear/error.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::cli {
namespace {

std::string planner_list() {
  std::string names;
  for (auto n : policy::planner_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  return names;
}

std::string help_text() {
  return "usage: sublinear plan --trace FILE --budget B [--policy P|all] [--device-memory BYTES]\n"
         "                      [--mapped-peak BYTES] [--no-packs] [--no-offload-packs] [--evictions] [--json PATH]\n"
         "                      [--offload auto|off|only] [--link-bandwidth GBPS[,GBPS]] [--link-latency MS[,MS]]\n"
         "                      [--fetch-margin F] [--host-budget BYTES] [--threads N]\n"
         "       sublinear plan --model SPEC ... (a PyTorch model captured on the meta device, no GPU:\n"
         "                      `sublinear plan --model x --help`, docs/preview.md)\n"
         "\n"
         "Reads a trace file (SUBLINEAR_TRACE writes one), analyses its last iteration and runs\n"
         "the planners at the budget, exactly as the runtime would at the end of its traced\n"
         "iteration. Prints, per planner, the predicted peak, the buffers it would evict, the\n"
         "compute it adds per iteration and the launches it replays, or the smallest budget it\n"
         "could meet. Nothing runs on a device.\n"
         "\n"
         "  --trace FILE          the trace file (docs/trace-format.md)\n"
         "  --budget B            as SUBLINEAR_BUDGET: bytes with a unit (8GiB, 512MiB), a share\n"
         "                        of device memory (60%, needs --device-memory) or a multiple of\n"
         "                        the traced peak (0.5x)\n"
         "  --policy P|all        a planner, several separated by commas, or all (default all):\n"
         "                        " +
         planner_list() +
         "\n"
         "  --device-memory BYTES the device's memory, for budgets given as a percentage\n"
         "  --mapped-peak BYTES   the traced iteration's peak of mapped bytes, as the runtime logs\n"
         "                        it (SUBLINEAR_LOG=info) and its report keeps it\n"
         "                        (plan.traced_mapped_peak_bytes); predictions then include the\n"
         "                        allocator's cache, and 0.5x means half of it. Without it they\n"
         "                        count live buffers only. A planner that the whole cache leaves\n"
         "                        too little plans again with the cache scaled to the budget, as\n"
         "                        the runtime does (docs/runtime.md, \"Budget arithmetic\"); its\n"
         "                        row is marked *.\n"
         "  --no-packs            plan as SUBLINEAR_PACKS=0 does: every evicted buffer on pages\n"
         "                        of its own (docs/policy.md, \"Packs\")\n"
         "  --no-offload-packs    plan as SUBLINEAR_OFFLOAD_PACKS=0 does: every offloaded buffer\n"
         "                        copied on its own (docs/offload.md, \"Offload packs\")\n"

         "  --evictions           also list each plan's evictions: the buffer, the launches it is\n"
         "                        out between, and the launches replayed to bring it back; and\n"
         "                        its offloads: when each buffer is copied out and fetched back\n"
         "  --offload MODE        as SUBLINEAR_OFFLOAD: auto (default: the planner chooses keep,\n"
         "                        recompute or offload to host memory), off (recompute only) or\n"
         "                        only (no recompute); offloading needs --link-bandwidth\n"
         "  --link-bandwidth GBPS the device-host link in GB/s (10^9 bytes/s): one figure for both\n"
         "                        directions, or two separated by a comma (to host, to the device);\n"
         "                        a trace does not record it (docs/offload.md)\n"
         "  --link-latency MS     fixed cost of each copy in milliseconds (default 0), one figure\n"
         "                        or two as above; the host device's own link takes 4.5 ms\n"
         "  --fetch-margin F      as SUBLINEAR_FETCH_MARGIN: plan each copy back as if it took 1 + F\n"
         "                        times its modelled time, where the budget has room (default 0.25)\n"
         "  --host-budget BYTES   pinned host pool the offloads may take (default: no bound)\n"
         "  --threads N           as SUBLINEAR_PLANNING_THREADS: threads the offload search runs its\n"
         "                        recompute searches and starts on, 1 to 64 (default: the CPUs it may\n"
         "                        run on, at most 8); the plans are the same for every count, the\n"
         "                        planning time is not\n"
         "  --json PATH           also write the figures as JSON (evictions included)\n"
         "\n"
         "examples:\n"
         "  sublinear plan --trace run.sltrace --budget 0.5x\n"
         "  sublinear plan --trace run.sltrace --budget 6GiB --policy chen,chain --mapped-peak 11.2GiB\n"
         "  sublinear plan --trace run.sltrace --budget 0.5x --policy greedy --link-bandwidth 50,45\n";
}

[[noreturn]] void bad(const std::string& what) { throw config_error(what + " (try 'sublinear plan --help')"); }

std::size_t parse_bytes(std::string_view flag, std::string_view text) {
  policy::budget_spec spec;
  try {
    spec = policy::parse_budget(text);
  } catch (const config_error&) {
    bad(std::string(flag) + " needs a byte count with an optional unit (16GiB, 80GB, 1048576), got " +
        quote_bounded(text));
  }
  if (spec.form != policy::budget_spec::kind::bytes) {
    bad(std::string(flag) + " needs bytes (16GiB, 80GB), not a share, got " + quote_bounded(text));
  }
  return spec.bytes;
}

// "A" or "A,B" (to host, to the device): each a finite number, in (0, 1e6] for a
// bandwidth or [0, 1e6] for a latency; returns them times `scale`.
std::pair<double, double> parse_link_pair(std::string_view flag, std::string_view text, bool zero_ok, double scale,
                                          std::string_view what, std::string_view example) {
  const auto fail = [&]() {
    bad(std::string(flag) + " needs " + std::string(what) + ", or two separated by a comma (to host, to the device), " +
        "for example " + std::string(example) + "; got " + quote_bounded(text));
  };
  const auto one = [&](std::string_view part) -> double {
    if (part.empty() || part.size() > 32) fail();
    for (char c : part)
      if (!((c >= '0' && c <= '9') || c == '.')) fail();
    const std::string s(part);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v) || v > 1e6 || v < 0.0 || (v == 0.0 && !zero_ok)) fail();
    return v * scale;
  };
  const std::size_t comma = text.find(',');
  const double first = one(text.substr(0, comma));
  return {first, comma == std::string_view::npos ? first : one(text.substr(comma + 1))};
}

struct plan_options {
  std::string trace;
  std::string json_path;
  bool evictions = false;
  runtime::plan_preview_options preview;
};

plan_options parse(std::span<const std::string_view> args) {
  plan_options o;
  std::string policies = "all";
  std::optional<std::string> budget;
  bool offload_given = false;
  bool latency_given = false;
  for (arg_reader r(args, &bad); r.next();) {
    const std::string_view flag = r.flag();
    const auto next = [&] { return r.value(); };
    if (flag == "--trace") {
      o.trace = std::string(next());
    } else if (flag == "--budget") {
      budget = std::string(next());
    } else if (flag == "--policy") {
      policies = std::string(next());
    } else if (flag == "--device-memory") {
      o.preview.device_capacity = parse_bytes(flag, next());
    } else if (flag == "--mapped-peak") {
      o.preview.traced_mapped_peak = parse_bytes(flag, next());
    } else if (flag == "--no-packs") {
      o.preview.packs = false;
    } else if (flag == "--no-offload-packs") {
      o.preview.offload_packs = false;

    } else if (flag == "--evictions") {
      o.evictions = true;
    } else if (flag == "--offload") {
      const std::string_view mode = next();
      if (mode == "auto") {
        o.preview.offload = policy::offload_mode::on;
      } else if (mode == "off") {
        o.preview.offload = policy::offload_mode::off;
      } else if (mode == "only") {
        o.preview.offload = policy::offload_mode::only;
      } else {
        bad("--offload must be auto, off or only, got " + quote_bounded(mode));
      }
      offload_given = true;
    } else if (flag == "--link-bandwidth") {
      std::tie(o.preview.link.to_host.bytes_per_s, o.preview.link.to_device.bytes_per_s) =
          parse_link_pair(flag, next(), false, 1e9, "GB/s as a positive number", "32 or 50,45");
    } else if (flag == "--link-latency") {
      std::tie(o.preview.link.to_host.latency_s, o.preview.link.to_device.latency_s) =
          parse_link_pair(flag, next(), true, 1e-3, "milliseconds per copy, 0 or more", "0.01 or 4.5,4");
      latency_given = true;
    } else if (flag == "--fetch-margin") {
      try {
        o.preview.fetch_margin = runtime::parse_fetch_margin("--fetch-margin", std::string(next()));
      } catch (const config_error& e) {
        bad(e.what());
      }
    } else if (flag == "--host-budget") {
      o.preview.host_budget = parse_bytes(flag, next());
    } else if (flag == "--threads") {
      try {
        o.preview.threads = runtime::parse_planning_threads("--threads", std::string(next()));
      } catch (const config_error& e) {
        bad(e.what());
      }
    } else if (flag == "--json") {
      o.json_path = std::string(next());
      if (o.json_path.empty()) bad("--json needs a file path");
    } else {
      bad("unknown argument " + quote_bounded(r.raw()) +
          "; the options are --trace, --budget, --policy, --device-memory, --mapped-peak, --no-packs, --no-offload-packs, "
          "--evictions, --json, --offload, --link-bandwidth, --link-latency, --fetch-margin, --host-budget, --threads");
    }
  }
  if (latency_given && !o.preview.link.usable()) {
    bad("--link-latency needs --link-bandwidth GB/s too: a link is its bandwidth and its latency per copy");
  }
  if (o.preview.offload == policy::offload_mode::only && !o.preview.link.usable()) {
    bad("--offload only needs --link-bandwidth GB/s: a trace does not record the link (or use --offload auto or off)");
  }
  if (offload_given && o.preview.offload == policy::offload_mode::on && !o.preview.link.usable()) {
    bad("--offload auto plans offloads only with a link: give --link-bandwidth GB/s");
  }
  if (o.trace.empty()) bad("--trace FILE is required");
  if (!budget) bad("--budget is required (for example --budget 0.5x or --budget 8GiB)");
  try {
    o.preview.budget = policy::parse_budget(*budget);
  } catch (const config_error& e) {
    std::string why = e.what();
    if (why.rfind("sublinear: ", 0) == 0) why = why.substr(11);
    bad("--budget: " + why);
  }
  if (o.preview.budget.form == policy::budget_spec::kind::device_fraction && o.preview.device_capacity == 0) {
    bad("--budget " + quote_bounded(*budget) + " is a share of device memory: give the device's memory with --device-memory "
        "BYTES (for example --device-memory 80GB), or a budget in bytes");
  }
  // A comma-separated list; "all" in it stands for every planner; each planner once, in
  // the order first named.
  const auto add = [&](std::string_view name) {
    for (const auto& p : o.preview.policies)
      if (p == name) return;
    o.preview.policies.emplace_back(name);
  };
  std::string item;
  const auto take = [&] {
    if (item.empty()) bad("--policy has an empty name in " + quote_bounded(policies));
    if (item == "all") {
      for (auto n : policy::planner_names()) add(n);
    } else {
      bool known = false;
      for (auto n : policy::planner_names()) known = known || n == item;
      if (!known) {
        bad("--policy " + quote_bounded(item) + " is not a planner; give planners from " + planner_list() +
            " separated by commas, or all");
      }
      add(item);
    }
    item.clear();
  };
  for (char c : policies) {
    if (c == ',') {
      take();
    } else {
      item += c;
    }
  }
  take();
  return o;
}

}  // namespace

int plan_main(std::span<const std::string_view> args) {
  for (std::string_view a : args)
    if (a == "--model" || a.rfind("--model=", 0) == 0) return plan_model_main(args);  // docs/preview.md
  if (wants_help(args)) {
    std::fputs(help_text().c_str(), stdout);
    return kExitOk;
  }
  const plan_options o = parse(args);
  if (!o.json_path.empty()) check_file_writable(o.json_path);  // before planning, which may take a while
  const tracer::trace t = tracer::read_trace_file(o.trace);
  const runtime::plan_preview p = runtime::preview_plans(t, o.preview);
  std::printf("sublinear plan: %s\n", o.trace.c_str());
  if (t.planning) {
    std::printf("a planning trace (captured on the meta device, docs/preview.md): every duration and added "
                "compute below is an ESTIMATE, not a measurement\n");
  }
  if (!o.preview.link.usable() && o.preview.offload != policy::offload_mode::off) {
    // The runtime offloads by default; a trace does not say over what link.
    std::printf("offload: not previewed, a trace does not record the device-host link: --link-bandwidth GB/s "
                "previews it (the host device's own link: --link-bandwidth 0.06 --link-latency 4.5)\n");
  }
  std::fputs(runtime::render_plan_preview(p, o.evictions).c_str(), stdout);
  if (!o.json_path.empty()) runtime::write_text_file(o.json_path, runtime::plan_preview_json(p));
  bool any = false;
  for (const auto& r : p.rows) any = any || r.feasible;
  return any ? kExitOk : kExitFailure;
}

}  // namespace sublinear::cli
