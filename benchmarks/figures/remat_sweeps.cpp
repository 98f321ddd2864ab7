// remat_sweeps: the recomputation sweeps of issue 6 (memory against depth, LSTM length,
// overhead against budget, a Re-forwarding-style table) as a figures program. The same
// code runs as `sublinear bench` (integrations/cli/bench.cpp); Note [Remat sweeps] in
// integrations/cli/bench/measure.hpp says how it measures.
//
//   remat_sweeps [--sweep depth|lstm|budget|reforward|all] [--quick] [--json PATH]
//                [--csv PATH] [--plots DIR] ...   (--help lists every option)
#include <string_view>
#include <vector>

#include "integrations/cli/bench.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  return sublinear::cli::bench::bench_main("remat_sweeps", args);
}
