// libFuzzer target for the report reader (runtime/report/report.hpp): any input must either
// parse into a report that every renderer of `sublinear report` turns into text, or be
// refused with a config_error. Never a crash, a sanitizer report, a hang or an absurd
// allocation.
//
// Build and run from the repository root with scripts/fuzz.sh (clang from Debian: packages
// clang-16 and libclang-rt-16-dev):
//   scripts/fuzz.sh report_reader -max_total_time=600
// Its corpus is tests/fuzz/corpus/report_reader/ (tests/runtime/report_test.cpp reads every
// file in it back).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/report/report.hpp"
#include "sublinear/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sublinear;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  runtime::run_report r;
  try {
    r = runtime::parse_report(text, "fuzz input");
  } catch (const config_error&) {
    return 0;  // refused with a message: the expected outcome for almost every input
  }
  // What the reader accepts, every renderer renders, and it writes back as a valid report.
  (void)runtime::render_text(r, 10);
  (void)runtime::render_chrome_trace(r);
  (void)runtime::render_memory_plot(r);
  try {
    (void)runtime::render_torch_snapshot(r);
  } catch (const config_error&) {
    // A report without per-block events has no snapshot; the message says so.
  }
  try {
    (void)runtime::parse_report(runtime::to_json(r), "round trip");
  } catch (const config_error&) {
    std::abort();  // what was read must write back as a report the reader accepts
  }
  return 0;
}
