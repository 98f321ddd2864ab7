// `sublinear bench`: the recomputation sweeps of issue 6 (memory against depth, LSTM
// length, overhead against budget, a Re-forwarding-style table) on the host device.
//
// The sweeps live in integrations/cli/bench/sweeps.{hpp,cpp} (Note [Remat sweeps]),
// shared with the `remat_sweeps` figures program, so the command and the program print
// and write the same figures; docs/benchmarks.md shows what they measured.
#include <span>
#include <string_view>

#include "integrations/cli/bench/sweeps.hpp"
#include "integrations/cli/commands.hpp"

namespace sublinear::cli {

// figures::bench_main prints its own help and usage errors and returns these statuses.
static_assert(kExitOk == 0 && kExitFailure == 1 && kExitUsage == 2);

int bench_main(std::span<const std::string_view> args) { return figures::bench_main("sublinear bench", args); }

}  // namespace sublinear::cli
