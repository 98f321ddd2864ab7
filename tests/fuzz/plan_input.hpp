// How plan_fuzz.cpp reads its input: 8 bytes of options for `sublinear plan`, then the
// bytes of a trace file. Shared with tests/runtime/cli_test.cpp, which plans every input
// of the corpus (tests/fuzz/corpus/plan) the way the fuzzer did.
//   byte 0  bit 0-6: which planners (bit i: planner_names()[i]; none set: all of them,
//           the last, which no bit names, included); bit 7: no packs (--no-packs)
//   byte 1  the budget's form (its value mod 8): 0-4 a multiple of the traced peak,
//           (byte 2 + 1) / 64; 5 bytes, (byte 2 + 1) << (byte 3 % 64); 6 byte 2 % 100 + 1
//           percent of the device memory, which is the mapped peak's figure; 7 a large
//           multiple, byte 2 + 1 times the traced peak
//   byte 3  bit 7: bytes 4-7 (u32) shifted left by byte 3 % 64 are --mapped-peak
//           (the largest size_t where that overflows)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "policy/planner.hpp"
#include "runtime/report/report_plan.hpp"

namespace sublinear::fuzz {

inline constexpr std::size_t plan_options_bytes = 8;

struct plan_input {
  std::span<const std::byte> trace;    // the trace file's bytes
  runtime::plan_preview_options options;  // all but the budget, which needs parsing
  std::string budget;                  // as --budget takes it
};

// Precondition: size >= plan_options_bytes.
inline plan_input read_plan_input(const std::uint8_t* data, std::size_t size) {
  plan_input in;
  const std::uint8_t* o = data;
  in.trace = {reinterpret_cast<const std::byte*>(data + plan_options_bytes), size - plan_options_bytes};
  const auto names = policy::planner_names();
  for (std::size_t i = 0; i < names.size() && i < 7; ++i)
    if ((o[0] & (1U << i)) != 0) in.options.policies.emplace_back(names[i]);
  if (in.options.policies.empty())
    for (auto n : names) in.options.policies.emplace_back(n);
  in.options.packs = (o[0] & 0x80U) == 0;
  if ((o[3] & 0x80U) != 0) {
    std::uint32_t v = 0;
    std::memcpy(&v, o + 4, sizeof v);
    const unsigned shift = o[3] % 64;
    const std::uint64_t most = ~std::uint64_t{0};
    in.options.traced_mapped_peak = shift > 0 && v > (most >> shift) ? most : std::uint64_t{v} << shift;
  }
  in.options.device_capacity = in.options.traced_mapped_peak;
  char text[64];
  switch (o[1] % 8) {
    case 5:
      std::snprintf(text, sizeof text, "%llu", static_cast<unsigned long long>((std::uint64_t{o[2]} + 1) << (o[3] % 64)));
      break;
    case 6: std::snprintf(text, sizeof text, "%d%%", o[2] % 100 + 1); break;
    case 7: std::snprintf(text, sizeof text, "%dx", o[2] + 1); break;
    default: std::snprintf(text, sizeof text, "%.6fx", (o[2] + 1) / 64.0); break;
  }
  in.budget = text;
  return in;
}

}  // namespace sublinear::fuzz
