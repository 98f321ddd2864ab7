// The `sublinear` command line: the table of subcommands that main() dispatches on.
//
// Adding a command: write integrations/cli/<name>.cpp defining its entry point, declare it
// below and add one row to kCommands. An entry point receives the arguments after the
// command's name, prints its own --help, and returns one of the exit statuses below; a
// config_error escaping it is reported by main() as a usage error.
#pragma once

#include <span>
#include <string_view>

namespace sublinear::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed
inline constexpr int kExitUsage = 2;    // bad arguments: nothing ran

using command_fn = int (*)(std::span<const std::string_view> args);

struct command {
  std::string_view name;
  std::string_view summary;  // one line for `sublinear --help`
  command_fn run;
};

int demo_main(std::span<const std::string_view> args);
int run_main(std::span<const std::string_view> args);
int plan_main(std::span<const std::string_view> args);
int plan_model_main(std::span<const std::string_view> args);  // plan --model (plan_model.cpp)
int report_main(std::span<const std::string_view> args);
int bench_main(std::span<const std::string_view> args);

// In the order `sublinear --help` lists them.
inline constexpr command kCommands[] = {
    {"demo", "train a model on the host device (no GPU needed) and print its memory and time figures", &demo_main},
    {"run", "run a training command with sublinear loaded and its settings checked (sublinear run --budget 8GiB -- CMD)", &run_main},
    {"plan", "preview what a budget costs on a recorded trace: predicted peak, evictions, added compute", &plan_main},
    {"report", "render a JSON report as text, a Chrome/Perfetto timeline and a memory plot (SVG)", &report_main},
    {"bench", "measure what recomputation buys: memory against depth and length, overhead against budget", &bench_main},
};

// Whether the arguments ask for help (-h or --help anywhere).
[[nodiscard]] inline bool wants_help(std::span<const std::string_view> args) {
  for (auto a : args) {
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

}  // namespace sublinear::cli
