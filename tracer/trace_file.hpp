// Trace files: a versioned binary format for one or more recorded iterations.
//
// Note [Trace file]
// Rationale: traces are written by a live run and read back by the planner CLI, the
//   benchmarks and regression tests, possibly by another build; a corrupt or truncated
//   file must be refused with a message that says what is wrong and where, never crash
//   the reader or make it allocate what the file merely claims.
// Approach: docs/trace-format.md is the specification. A fixed header (magic, version,
//   total size, CRC) points at a directory of sections (metadata, kernels, streams,
//   events, parameter arena, writes), each with its own size, record count and CRC-32.
//   The reader checks the framing first (sizes, bounds, checksums), then decodes each
//   section with every length checked against the bytes that remain, then checks the
//   cross-references (kernel and stream indices, arena offsets, sequence order) with
//   validate(). Every container it fills is sized from bytes actually present.
// Limitations: little-endian hosts only (every machine we target); the whole file is
//   read into memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sublinear/error.hpp"
#include "tracer/events.hpp"

namespace sublinear::tracer {

inline constexpr std::uint16_t trace_version_major = 1;
inline constexpr std::uint16_t trace_version_minor = 2;

// What a trace may hold (docs/trace-format.md, "Limits"). Every byte figure the analysis
// and the planners derive (sums of buffer sizes, each rounded up to a page) then stays far
// inside 63 bits, and no figure makes the reader or the planners work for what the file
// merely claims.
inline constexpr std::uint64_t max_trace_file_bytes = std::uint64_t{1} << 30;  // read_trace_file
inline constexpr std::uint64_t max_granularity = std::uint64_t{1} << 30;       // META granularity
inline constexpr std::uint64_t max_event_bytes = std::uint64_t{1} << 48;       // one event's byte count
inline constexpr std::uint64_t max_allocated_bytes = std::uint64_t{1} << 56;   // all allocs together

// A trace file or trace value that cannot be used. what() names the source, the section
// and record where it applies, the byte offset, and what was expected.
class trace_format_error : public config_error {
 public:
  using config_error::config_error;
};

// Throws trace_format_error if `t` breaks an invariant of the event model (a launch's
// kernel or stream index out of range, parameter bytes outside the arena, sequence
// numbers not increasing, a write for a launch that was not observed, ...).
void validate(const trace& t);

// Serializes a valid trace (validate() first: an invalid one is refused).
[[nodiscard]] std::vector<std::byte> encode_trace(const trace& t);
// Parses and validates. `source` names the input in error messages.
[[nodiscard]] trace decode_trace(std::span<const std::byte> bytes, std::string_view source = "<memory>");

// Writes atomically (write_file_atomically, Note [Atomic file writes]); throws
// sublinear::error with the path and errno text on I/O failure.
void write_trace_file(const trace& t, const std::string& path);
// Reads and decodes; throws trace_format_error (bad content, a path that is not a regular
// file, a file over max_trace_file_bytes) or sublinear::error (I/O).
[[nodiscard]] trace read_trace_file(const std::string& path);

// CRC-32 (IEEE 802.3, reflected, as zlib computes it).
[[nodiscard]] std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t seed = 0) noexcept;

}  // namespace sublinear::tracer
