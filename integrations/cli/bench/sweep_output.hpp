// The sweeps' results for people and for programs: a table per sweep (stdout), one JSON
// document and one CSV row per run (the keys docs/benchmarks.md reads).
#pragma once

#include <cstdio>
#include <iosfwd>
#include <span>

#include "integrations/cli/bench/sweep_results.hpp"

namespace sublinear::cli::bench {

// A readable table of the sweep, its figures and notes.
void print_sweep(std::FILE* to, const sweep_result& s);
// One JSON document: {"schema_version", "device", "options", "sweeps": [...]}.
void write_json(std::ostream& out, std::span<const sweep_result> sweeps, const bench_options& options);
// One row per run: sweep, model, size, label, policy, budget, status and the figures.
void write_csv(std::ostream& out, std::span<const sweep_result> sweeps);

}  // namespace sublinear::cli::bench
