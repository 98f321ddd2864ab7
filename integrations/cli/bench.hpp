// The command line of the recomputation sweeps, shared by `sublinear bench` (bench.cpp's
// cli::bench_main) and the `remat_sweeps` figures program, which compiles bench.cpp too.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "integrations/cli/bench/sweep_results.hpp"

namespace sublinear::cli::bench {

// `prog` names the command in messages ("sublinear bench", "remat_sweeps"). Throws
// config_error with what would be right.
[[nodiscard]] bench_options parse_bench_args(std::span<const std::string_view> args, std::string_view prog);
[[nodiscard]] std::string bench_help(std::string_view prog);
// Parses, runs, prints, writes; returns 0, 1 (a run failed or a file could not be
// written) or 2 (bad arguments, nothing ran).
int bench_main(std::string_view prog, std::span<const std::string_view> args);

}  // namespace sublinear::cli::bench
