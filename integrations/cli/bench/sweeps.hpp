// The recomputation sweeps of issue 6: memory against depth, LSTM length, overhead against
// budget, a Re-forwarding-style table. What `sublinear bench` and the `remat_sweeps`
// figures program both run (their command line: integrations/cli/bench.hpp); Note [Remat
// sweeps] in measure.hpp says how they measure.
#pragma once

#include <span>
#include <string_view>

#include "integrations/cli/bench/sweep_results.hpp"

namespace sublinear::cli::bench {

// "depth", "lstm", "budget", "reforward", in the order `all` runs them.
[[nodiscard]] std::span<const std::string_view> sweep_names() noexcept;

// Runs one sweep. Throws config_error for an unknown name or planner.
[[nodiscard]] sweep_result run_sweep(std::string_view id, const bench_options& options, const progress_fn& progress);

}  // namespace sublinear::cli::bench
