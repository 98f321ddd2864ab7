// libFuzzer target for the planning path of `sublinear plan` (integrations/cli/plan.cpp):
// a trace the reader accepts goes through the analysis, every planner, the simulator and
// the recompute floor (runtime::preview_plans), and the preview is rendered as text and
// JSON. Any input must end in a preview or a config_error, within the fuzzer's time and
// memory limits; a planner's internal error (a row marked internal_error) is a finding.
//
// Input: 8 bytes of options, then the trace file's bytes (plan_input.hpp).
//
// Build and run from the repository root with scripts/fuzz.sh:
//   scripts/fuzz.sh plan -max_total_time=600
// Its corpus is tests/fuzz/corpus/plan/ (tests/runtime/cli_test.cpp plans every file in it).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "fuzz/plan_input.hpp"
#include "fuzz/trace_checksums.hpp"
#include "policy/budget.hpp"
#include "runtime/report/report_plan.hpp"
#include "sublinear/error.hpp"
#include "tracer/trace_file.hpp"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  using sublinear::fuzz::plan_options_bytes;
  size = LLVMFuzzerMutate(data, size, max_size);
  if ((seed & 1U) != 0 && size > plan_options_bytes) sublinear::fuzz::repair_trace_checksums(data + plan_options_bytes, size - plan_options_bytes);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sublinear;
  if (size < fuzz::plan_options_bytes) return 0;
  const fuzz::plan_input in = fuzz::read_plan_input(data, size);
  tracer::trace t;
  try {
    t = tracer::decode_trace(in.trace, "fuzz input");
  } catch (const tracer::trace_format_error&) {
    return 0;
  }
  runtime::plan_preview_options po = in.options;
  try {
    po.budget = policy::parse_budget(in.budget);
    const runtime::plan_preview p = runtime::preview_plans(t, po);
    for (const auto& row : p.rows) {
      if (row.internal_error) {
        std::fprintf(stderr, "planner %s failed: %s\n", row.planner.c_str(), row.error.c_str());
        std::abort();
      }
    }
    (void)runtime::render_plan_preview(p, true);
    (void)runtime::plan_preview_json(p);
  } catch (const config_error&) {
    // A budget or trace the preview refuses, with a message: expected for many inputs.
  }
  return 0;
}
