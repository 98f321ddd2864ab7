// The recomputation sweeps of issue 6: memory against depth, LSTM length, overhead against
// budget, a Re-forwarding-style table. What `sublinear bench` and the `remat_sweeps`
// figures program both run (their command line: integrations/cli/bench.hpp); Note [Remat
// sweeps] in measure.hpp says how they measure.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "integrations/cli/bench/sweep_results.hpp"
#include "workloads/models/registry.hpp"

namespace sublinear::cli::bench {

// "depth", "lstm", "budget", "reforward", in the order `all` runs them.
[[nodiscard]] std::span<const std::string_view> sweep_names() noexcept;

// One model a sweep measures, and how much it trains there: for progress and the time left.
struct sweep_point {
  workloads::models::model_config config;
  std::size_t runs = 0;        // configurations side by side (the baseline one of them)
  std::size_t iterations = 0;  // iterations each trains, over every round
};

// The points of a sweep, in the order run_sweep measures them. Throws config_error for an
// unknown name.
[[nodiscard]] std::vector<sweep_point> sweep_points(std::string_view id, const bench_options& options);

// Runs one sweep; `started` (if set) is told each point's index in sweep_points() as the
// point starts. Throws config_error for an unknown name or planner.
[[nodiscard]] sweep_result run_sweep(std::string_view id, const bench_options& options, const progress_fn& progress,
                                     const point_fn& started = {});

}  // namespace sublinear::cli::bench
