// `sublinear report REPORT.json [--text] [--chrome-trace OUT] [--plot OUT.svg] [--snapshot
// OUT.pickle]`: renders a JSON report (SUBLINEAR_REPORT writes one) as text, a Chrome-trace
// timeline, a plot and a PyTorch memory snapshot.
#include <charconv>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "runtime/report/report.hpp"
#include "integrations/cli/args.hpp"
#include "integrations/cli/commands.hpp"
#include "sublinear/error.hpp"

namespace sublinear::cli {
namespace {

constexpr const char* kHelp =
    "usage: sublinear report REPORT.json [--text] [--top N] [--chrome-trace OUT.json]\n"
    "                        [--plot OUT.svg] [--snapshot OUT.pickle] [--title TEXT]\n"
    "\n"
    "Renders a JSON report written by a run (SUBLINEAR_REPORT=PATH or --report PATH of\n"
    "'sublinear run'). The report is checked against its schema (docs/report-schema.json)\n"
    "first. With no output option, prints the text summary.\n"
    "\n"
    "  --text                 print the summary, the per-iteration table and the top evicted\n"
    "                         buffers (size, producer kernel, times evicted and recomputed,\n"
    "                         recompute cost)\n"
    "  --top N                rows in the evicted-buffer table (default 10)\n"
    "  --chrome-trace OUT     write a timeline for chrome://tracing or ui.perfetto.dev: memory\n"
    "                         counters and eviction, replay, stall and iteration slices\n"
    "  --plot OUT.svg         write the memory-timeline plot (SVG): one iteration without and\n"
    "                         one with the budget, and the budget line\n"
    "  --snapshot OUT.pickle  write PyTorch's memory-snapshot format: every allocation, free,\n"
    "                         eviction and regeneration; open it in pytorch.org/memory_viz\n"
    "  --title TEXT           the plot's title (default: names the model)\n"
    "\n"
    "examples:\n"
    "  sublinear report run.json\n"
    "  sublinear report run.json --chrome-trace run.trace.json --plot run.svg\n"
    "  sublinear report run.json --snapshot run.pickle\n";

[[noreturn]] void bad(const std::string& what) { throw config_error(what + " (try 'sublinear report --help')"); }

struct report_options {
  std::string input;
  bool text = false;
  std::size_t top = 10;
  std::string chrome_trace;
  std::string plot;
  std::string snapshot;
  std::string title;
};

report_options parse(std::span<const std::string_view> args) {
  report_options o;
  for (arg_reader r(args, &bad); r.next();) {
    const std::string_view flag = r.flag();
    const auto next = [&] { return std::string(r.value()); };
    if (flag == "--text") {
      o.text = true;
    } else if (flag == "--top") {
      const std::string v = next();
      std::size_t n = 0;
      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || ptr != v.data() + v.size() || n == 0) {
        bad("--top needs a whole number >= 1, got '" + v + "'");
      }
      o.top = n;
    } else if (flag == "--chrome-trace") {
      o.chrome_trace = next();
      if (o.chrome_trace.empty()) bad("--chrome-trace needs a file path");
    } else if (flag == "--plot") {
      o.plot = next();
      if (o.plot.empty()) bad("--plot needs a file path");
    } else if (flag == "--snapshot") {
      o.snapshot = next();
      if (o.snapshot.empty()) bad("--snapshot needs a file path");
    } else if (flag == "--title") {
      o.title = next();
    } else if (flag.starts_with("-")) {
      bad("unknown option '" + std::string(r.raw()) + "'; the options are --text, --top, --chrome-trace, --plot, --snapshot, --title");
    } else if (o.input.empty()) {
      o.input = std::string(flag);
    } else {
      bad("one report at a time: got '" + o.input + "' and '" + std::string(flag) + "'");
    }
  }
  if (o.input.empty()) bad("which report? write: sublinear report REPORT.json");
  if (o.chrome_trace.empty() && o.plot.empty() && o.snapshot.empty()) o.text = true;
  return o;
}

}  // namespace

int report_main(std::span<const std::string_view> args) {
  if (wants_help(args)) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  const report_options o = parse(args);
  const runtime::run_report r = runtime::parse_report(runtime::read_text_file(o.input), o.input);
  if (o.text) std::fputs(runtime::render_text(r, o.top).c_str(), stdout);
  std::fflush(stdout);  // the text first, then the notes about files on stderr
  if (!o.chrome_trace.empty()) {
    runtime::write_text_file(o.chrome_trace, runtime::render_chrome_trace(r));
    std::fprintf(stderr, "wrote %s (open it in ui.perfetto.dev or chrome://tracing)\n", o.chrome_trace.c_str());
  }
  if (!o.plot.empty()) {
    runtime::plot_options po;
    po.title = o.title;
    runtime::write_text_file(o.plot, runtime::render_memory_plot(r, po));
    std::fprintf(stderr, "wrote %s\n", o.plot.c_str());
  }
  if (!o.snapshot.empty()) {
    runtime::write_text_file(o.snapshot, runtime::render_torch_snapshot(r));
    std::fprintf(stderr, "wrote %s (drop it on pytorch.org/memory_viz)\n", o.snapshot.c_str());
  }
  return kExitOk;
}

}  // namespace sublinear::cli
