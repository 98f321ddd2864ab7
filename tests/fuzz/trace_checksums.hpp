// For the fuzzers that take trace files (trace_reader_fuzz.cpp, plan_fuzz.cpp): every
// section of a trace carries a CRC-32, so most random mutants would only ever reach the
// checksum checks. A custom mutator repairs the checksums (and the recorded file size) of
// half its mutants, so that the structural and semantic checks behind them, and what
// comes after the reader, are fuzzed too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "tracer/trace_file.hpp"

namespace sublinear::fuzz {

template <class T>
T get_at(const std::uint8_t* b, std::size_t at) {
  T v;
  std::memcpy(&v, b + at, sizeof v);
  return v;
}
template <class T>
void put_at(std::uint8_t* b, std::size_t at, T v) {
  std::memcpy(b + at, &v, sizeof v);
}

inline std::span<const std::byte> as_bytes(const std::uint8_t* p, std::size_t n) {
  return {reinterpret_cast<const std::byte*>(p), n};
}

// Layout from docs/trace-format.md: a 64-byte header, 32-byte directory entries at 64.
inline void repair_trace_checksums(std::uint8_t* b, std::size_t size) {
  using tracer::crc32;
  if (size < 64) return;
  std::uint32_t n = get_at<std::uint32_t>(b, 24);
  if (n > 64) n = 64;
  for (std::uint32_t i = 0; i < n && 64 + (i + 1) * 32 <= size; ++i) {
    const std::size_t at = 64 + i * 32;
    const auto off = get_at<std::uint64_t>(b, at + 8);
    const auto len = get_at<std::uint64_t>(b, at + 16);
    if (off <= size && len <= size - off) put_at<std::uint32_t>(b, at + 4, crc32(as_bytes(b + off, len)));
  }
  if (64 + std::size_t{n} * 32 <= size) put_at<std::uint32_t>(b, 40, crc32(as_bytes(b + 64, std::size_t{n} * 32)));
  put_at<std::uint64_t>(b, 16, size);  // file_bytes: the mutant's own size
  put_at<std::uint32_t>(b, 60, crc32(as_bytes(b, 60)));
}

}  // namespace sublinear::fuzz
