// libFuzzer target for the trace reader (tracer/trace_file.hpp): any input must either
// decode into a valid trace that re-encodes to the same trace, or be refused with a
// trace_format_error. Never a crash, a sanitizer report, a hang or an absurd allocation.
//
// Build (clang from Debian: packages clang-16 and libclang-rt-16-dev) and run, from the
// repository root, with scripts/fuzz.sh (scripts/fuzz.sh trace_reader -max_total_time=600),
// or by hand:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -I. \
//     tests/fuzz/trace_reader_fuzz.cpp tracer/trace_file.cpp tracer/events.cpp -o trace_reader_fuzz
//   ./trace_reader_fuzz -max_total_time=600 -rss_limit_mb=2048 tests/fuzz/corpus/trace_reader
//
// Every section carries a CRC-32, so most random mutations would only ever exercise the
// checksum checks. The custom mutator below repairs the checksums of half the mutants, so
// the structural and semantic checks behind them are fuzzed too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "tracer/trace_file.hpp"

namespace {

using sublinear::tracer::crc32;

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

// Layout from docs/trace-format.md: 64-byte header, 32-byte directory entries at offset 64.
void repair_checksums(std::uint8_t* b, std::size_t size) {
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
  put<std::uint32_t>(b, 60, crc32(bytes(b, 60)));
}

}  // namespace

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if ((seed & 1U) != 0) repair_checksums(data, size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sublinear::tracer;
  try {
    const trace t = decode_trace(bytes(data, size), "fuzz input");
    // What the reader accepts is valid and survives a round trip unchanged.
    const std::vector<std::byte> again = encode_trace(t);
    if (!(decode_trace(again) == t)) std::abort();
  } catch (const trace_format_error&) {
    // Refused with a message: the expected outcome for almost every input.
  }
  return 0;
}
