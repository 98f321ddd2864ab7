// libFuzzer target for the trace reader (tracer/trace_file.hpp): any input must either
// decode into a valid trace that re-encodes to the same trace, or be refused with a
// trace_format_error. Never a crash, a sanitizer report, a hang or an absurd allocation.
//
// Build (clang from Debian: packages clang-16 and libclang-rt-16-dev) and run, from the
// repository root, with scripts/fuzz.sh (scripts/fuzz.sh trace_reader -max_total_time=600),
// or by hand:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -I. -Itests \
//     tests/fuzz/trace_reader_fuzz.cpp tracer/trace_file.cpp tracer/events.cpp -o trace_reader_fuzz
//   ./trace_reader_fuzz -max_total_time=600 -rss_limit_mb=2048 tests/fuzz/corpus/trace_reader
//
// The custom mutator repairs the checksums of half the mutants (fuzz/trace_checksums.hpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "fuzz/trace_checksums.hpp"
#include "tracer/trace_file.hpp"

namespace {

using sublinear::fuzz::as_bytes;

}  // namespace

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if ((seed & 1U) != 0) sublinear::fuzz::repair_trace_checksums(data, size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sublinear::tracer;
  try {
    const trace t = decode_trace(as_bytes(data, size), "fuzz input");
    // What the reader accepts is valid and survives a round trip unchanged.
    const std::vector<std::byte> again = encode_trace(t);
    if (!(decode_trace(again) == t)) std::abort();
  } catch (const trace_format_error&) {
    // Refused with a message: the expected outcome for almost every input.
  }
  return 0;
}
