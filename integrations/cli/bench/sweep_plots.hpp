// The sweeps' SVG plots: memory against depth and length (log-log), time against depth
// and budget, the Re-forwarding-style bars (Note [Plots] in sweep_plots.cpp).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "integrations/cli/bench/sweep_results.hpp"

namespace sublinear::cli::bench {

// SVG plots (one per sweep that has one) into `dir`, created if missing; returns the paths.
std::vector<std::string> write_plots(const std::string& dir, std::span<const sweep_result> sweeps);

}  // namespace sublinear::cli::bench
