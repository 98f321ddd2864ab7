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
#include "policy/budget.hpp"
#include "runtime/report/report_plan.hpp"
#include "sublinear/error.hpp"
#include "tracer/trace_file.hpp"

namespace {

template <class T>
T get(const std::uint8_t* b, std::size_t at) {
  T v;
  std::memcpy(&v, b + at, sizeof v);
  return v;
}
template <class T>
void put(std::uint8_t* b, std::size_t at, T v) {
  std::memcpy(b + at, &v, sizeof v);
}

std::span<const std::byte> bytes(const std::uint8_t* p, std::size_t n) {
  return {reinterpret_cast<const std::byte*>(p), n};
}

// As in trace_reader_fuzz.cpp: repairs the checksums of the trace behind the options, so
// that mutants reach the analysis and the planners instead of the checksum checks.
void repair_checksums(std::uint8_t* b, std::size_t size) {
  using sublinear::tracer::crc32;
  if (size < 64) return;
  std::uint32_t n = get<std::uint32_t>(b, 24);
  if (n > 64) n = 64;
  for (std::uint32_t i = 0; i < n && 64 + (i + 1) * 32 <= size; ++i) {
    const std::size_t at = 64 + i * 32;
    const auto off = get<std::uint64_t>(b, at + 8);
    const auto len = get<std::uint64_t>(b, at + 16);
    if (off <= size && len <= size - off) put<std::uint32_t>(b, at + 4, crc32(bytes(b + off, len)));
  }
  if (64 + std::size_t{n} * 32 <= size) put<std::uint32_t>(b, 40, crc32(bytes(b + 64, std::size_t{n} * 32)));
  put<std::uint64_t>(b, 16, size);  // file_bytes: the mutant's own size
  put<std::uint32_t>(b, 60, crc32(bytes(b, 60)));
}

}  // namespace

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  using sublinear::fuzz::plan_options_bytes;
  size = LLVMFuzzerMutate(data, size, max_size);
  if ((seed & 1U) != 0 && size > plan_options_bytes) repair_checksums(data + plan_options_bytes, size - plan_options_bytes);
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
