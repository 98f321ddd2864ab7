// Trace files: lossless round trips, and clear refusals of corrupt or truncated input.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "workloads/kernels/elementwise.hpp"
#include "tracer/trace_file.hpp"
#include "tracer_fixture.hpp"

namespace sublinear::tracer {
namespace {

// ---- a small trace with every kind of event ------------------------------------------------------

trace sample_trace() {
  trace t;
  t.device = "host";
  t.granularity = 65536;
  t.kernels.push_back({"gemm_nn_f32", 3, 24, {{0, 8}, {8, 8}, {16, 8}}, false});
  t.kernels.push_back({"ncclDevKernel_AllReduce", 9, 16, {{0, 16}}, true});
  t.streams = {0, 0x5555000};
  auto add = [&](event_kind k) -> event& {
    event& e = t.events.emplace_back();
    e.seq = 100 + t.events.size() * 3;  // increasing, not contiguous
    e.time_ns = 1000 * t.events.size();
    e.kind = k;
    return e;
  };
  event& a0 = add(event_kind::alloc);
  a0.address = 0x10000;
  a0.bytes = 4096;
  a0.flags = event_flags::preexisting;
  event& a1 = add(event_kind::alloc);
  a1.address = 0x20000;
  a1.bytes = 1000;
  a1.stream = 1;
  a1.flags = event_flags::evictable;
  add(event_kind::marker).address = 0;
  std::vector<std::byte> p0(24);
  const std::uint64_t ptrs[3] = {0x10000, 0x20000 + 8, 7};
  std::memcpy(p0.data(), ptrs, 24);
  t.arena = p0;
  event& l0 = add(event_kind::launch);
  l0.kernel = 0;
  l0.bytes = 24;
  l0.param_offset = 0;
  l0.grid = {4, 2, 1};
  l0.block = {256, 1, 1};
  l0.shared_mem = 128;
  l0.correlation = 77;
  l0.duration_ns = 5000;
  l0.flags = event_flags::timed | event_flags::writes_observed;
  t.arena.resize(40, std::byte{0xAB});
  event& l1 = add(event_kind::launch);
  l1.kernel = 1;
  l1.bytes = 16;
  l1.param_offset = 24;
  l1.flags = event_flags::never_replay;
  l1.stream = 1;
  event& cp = add(event_kind::memcpy);
  cp.address = 0x20000;
  cp.source = 0x10000;
  cp.bytes = 512;
  cp.copy = copy_kind::device_to_device;
  event& ms = add(event_kind::memset);
  ms.address = 0x10000;
  ms.source = 0xFF;
  ms.bytes = 64;
  ms.flags = event_flags::timed;
  ms.duration_ns = 10;
  add(event_kind::event_record).address = 0xE0;
  event& w = add(event_kind::event_wait);
  w.address = 0xE0;
  w.stream = 1;
  event& f = add(event_kind::free);
  f.address = 0x20000;
  f.bytes = 1000;
  add(event_kind::marker).address = 1;
  t.writes.push_back({t.events[3].seq, 0x20000});
  t.fresh.push_back({t.events[3].seq, 0x10000});
  namespace id = device::launch_attribute_id;
  t.launch_attributes.push_back({t.events[3].seq, device::make_launch_attribute(id::cluster_dimension, 2, 1, 1)});
  t.launch_attributes.push_back({t.events[3].seq, device::make_launch_attribute(id::priority, 7)});
  t.launch_attributes.push_back({t.events[4].seq, device::make_launch_attribute(id::programmatic_event, 0xE0)});
  return t;
}

// ---- byte-level helpers mirroring docs/trace-format.md --------------------------------------------

constexpr std::size_t header_size = 64;
constexpr std::size_t dir_entry_size = 32;
constexpr std::size_t event_size = 104;
enum : std::uint32_t { META = 1, KERNELS = 2, STREAMS = 3, EVENTS = 4, ARENA = 5, WRITES = 6, FRESH = 7, LATTRS = 8 };
constexpr std::size_t attribute_size = 80;

template <class T>
T get(const std::vector<std::byte>& b, std::size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <class T>
void put(std::vector<std::byte>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

std::uint32_t section_count(const std::vector<std::byte>& b) { return get<std::uint32_t>(b, 24); }
std::size_t dir_at(std::uint32_t i) { return header_size + i * dir_entry_size; }
std::size_t dir_of(const std::vector<std::byte>& b, std::uint32_t id) {
  for (std::uint32_t i = 0; i < section_count(b); ++i) {
    if (get<std::uint32_t>(b, dir_at(i)) == id) return dir_at(i);
  }
  ADD_FAILURE() << "no section " << id;
  return 0;
}
std::size_t section_offset(const std::vector<std::byte>& b, std::uint32_t id) {
  return get<std::uint64_t>(b, dir_of(b, id) + 8);
}

// Recomputes every checksum so that a mutation reaches the checks behind them.
void fix_checksums(std::vector<std::byte>& b) {
  const std::uint32_t n = std::min<std::uint32_t>(section_count(b), 64);
  for (std::uint32_t i = 0; i < n && dir_at(i + 1) <= b.size(); ++i) {
    const auto off = get<std::uint64_t>(b, dir_at(i) + 8);
    const auto size = get<std::uint64_t>(b, dir_at(i) + 16);
    if (off <= b.size() && size <= b.size() - off) {
      put<std::uint32_t>(b, dir_at(i) + 4, crc32(std::span<const std::byte>(b).subspan(off, size)));
    }
  }
  if (dir_at(n) <= b.size()) {
    put<std::uint32_t>(b, 40, crc32(std::span<const std::byte>(b).subspan(header_size, n * dir_entry_size)));
  }
  put<std::uint32_t>(b, 60, crc32(std::span<const std::byte>(b).first(60)));
}

std::string decode_error(const std::vector<std::byte>& b) {
  try {
    static_cast<void>(decode_trace(b, "sample.sltrace"));
  } catch (const trace_format_error& e) {
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_REJECTED(bytes, ...)                                             \
  do {                                                                          \
    const std::string msg_ = decode_error(bytes);                               \
    EXPECT_NE(msg_, "(accepted)");                                              \
    EXPECT_NE(msg_.find("sample.sltrace"), std::string::npos) << msg_;          \
    for (const char* part_ : {__VA_ARGS__}) {                                   \
      EXPECT_NE(msg_.find(part_), std::string::npos) << "'" << part_ << "' not in: " << msg_; \
    }                                                                           \
  } while (false)

// ---- round trips --------------------------------------------------------------------------------------

TEST(TraceFile, EncodeThenDecodeIsLossless) {
  const trace t = sample_trace();
  const std::vector<std::byte> bytes = encode_trace(t);
  EXPECT_EQ(decode_trace(bytes), t);
  // Deterministic: equal traces give equal files.
  EXPECT_EQ(encode_trace(decode_trace(bytes)), bytes);
}

TEST(TraceFile, ARecordedRunRoundTripsThroughAFile) {
  host_collector_options c;
  c.time_launches = true;
  c.observe_writes = true;
  testing::traced_session s(c);
  auto ctx = s.ctx();
  auto a = ctx.empty({64});
  auto b = ctx.empty({64});
  for (int it = 0; it < 3; ++it) {
    s.rec().mark_iteration();
    workloads::ops::fill(ctx, a, static_cast<float>(it));
    auto sum = workloads::ops::add(ctx, a, b);
    testing::launch(s.dev(), testing::scale_kernel(), testing::scale_params{a.data, b.data, 64});
    ctx.release(sum);
  }
  s.rec().mark_iteration();
  const trace t = s.take();
  ASSERT_GT(t.events.size(), 20u);
  ASSERT_FALSE(t.writes.empty());
  const std::string path = ::testing::TempDir() + "/tracer_roundtrip.sltrace";
  write_trace_file(t, path);
  EXPECT_EQ(read_trace_file(path), t);
  std::remove(path.c_str());
  ctx.release(a);
  ctx.release(b);
}

TEST(TraceFile, AnEmptyTraceRoundTrips) {
  trace t;
  t.streams = {0};
  EXPECT_EQ(decode_trace(encode_trace(t)), t);
}

TEST(TraceFile, TheWriterRefusesAnInvalidTrace) {
  trace t = sample_trace();
  t.events[3].kernel = 99;
  EXPECT_THROW(static_cast<void>(encode_trace(t)), trace_format_error);
}

TEST(TraceFile, ReadingAMissingFileNamesThePath) {
  try {
    static_cast<void>(read_trace_file("/nonexistent/dir/x.sltrace"));
    FAIL() << "no error";
  } catch (const trace_format_error&) {
    FAIL() << "an I/O failure is not a format error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.sltrace"), std::string::npos);
  }
}

// ---- framing errors ------------------------------------------------------------------------------------

TEST(TraceFileRejects, EveryTruncation) {
  const std::vector<std::byte> full = encode_trace(sample_trace());
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_REJECTED(cut, "truncated");
  }
}

TEST(TraceFileRejects, ABadMagic) {
  auto b = encode_trace(sample_trace());
  b[0] = std::byte{'X'};
  EXPECT_REJECTED(b, "bad magic", "byte offset 0");
}

TEST(TraceFileRejects, AnotherMajorVersion) {
  auto b = encode_trace(sample_trace());
  put<std::uint16_t>(b, 8, 2);
  put<std::uint16_t>(b, 10, 0);
  fix_checksums(b);
  EXPECT_REJECTED(b, "unsupported format version 2.0");
}

TEST(TraceFileRejects, AHeaderChecksumMismatch) {
  auto b = encode_trace(sample_trace());
  b[50] = std::byte{1};
  EXPECT_REJECTED(b, "header checksum mismatch");
}

TEST(TraceFileRejects, ADirectoryChecksumMismatch) {
  auto b = encode_trace(sample_trace());
  put<std::uint64_t>(b, dir_of(b, EVENTS) + 24, 3);
  put<std::uint32_t>(b, 60, crc32(std::span<const std::byte>(b).first(60)));
  EXPECT_REJECTED(b, "directory checksum mismatch");
}

TEST(TraceFileRejects, ASectionChecksumMismatchNamingTheSection) {
  auto b = encode_trace(sample_trace());
  b[section_offset(b, EVENTS) + event_size + 30] ^= std::byte{0x40};
  EXPECT_REJECTED(b, "EVENTS", "checksum mismatch");
}

TEST(TraceFileRejects, TrailingGarbage) {
  auto b = encode_trace(sample_trace());
  b.push_back(std::byte{0});
  EXPECT_REJECTED(b, "trailing garbage");
}

TEST(TraceFileRejects, ASizeFieldLargerThanTheInput) {
  auto b = encode_trace(sample_trace());
  put<std::uint64_t>(b, 16, b.size() + 1000);
  fix_checksums(b);
  EXPECT_REJECTED(b, "truncated", "header says");
}

TEST(TraceFileRejects, AnAbsurdSectionCount) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, 24, 1u << 30);
  put<std::uint32_t>(b, 60, crc32(std::span<const std::byte>(b).first(60)));
  EXPECT_REJECTED(b, "section count 1073741824 exceeds");
}

TEST(TraceFileRejects, ASectionOutsideTheFile) {
  auto b = encode_trace(sample_trace());
  put<std::uint64_t>(b, dir_of(b, ARENA) + 16, std::uint64_t{1} << 40);
  fix_checksums(b);
  EXPECT_REJECTED(b, "ARENA", "outside the file");
}

TEST(TraceFileRejects, ASectionOverlappingTheDirectory) {
  auto b = encode_trace(sample_trace());
  put<std::uint64_t>(b, dir_of(b, META) + 8, header_size);
  fix_checksums(b);
  EXPECT_REJECTED(b, "META", "overlap the header or directory");
}

TEST(TraceFileRejects, ADuplicatedSection) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, dir_of(b, WRITES), EVENTS);
  fix_checksums(b);
  EXPECT_REJECTED(b, "appears twice");
}

TEST(TraceFileRejects, AMissingSectionButSkipsUnknownOnes) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, dir_of(b, WRITES), 99);
  fix_checksums(b);
  EXPECT_REJECTED(b, "missing required section WRITES");
}

TEST(TraceFileRejects, ARecordCountThatDisagreesWithTheSectionSize) {
  auto b = encode_trace(sample_trace());
  put<std::uint64_t>(b, dir_of(b, EVENTS) + 24, 1000);
  fix_checksums(b);
  EXPECT_REJECTED(b, "EVENTS section", "1000 events need 104000 bytes");
  b = encode_trace(sample_trace());
  put<std::uint64_t>(b, dir_of(b, KERNELS) + 24, std::uint64_t{1} << 60);
  fix_checksums(b);
  EXPECT_REJECTED(b, "KERNELS section", "cannot fit");
}

// ---- content errors (checksums made valid, so the decoder's own checks are reached) ----------------

TEST(TraceFileRejects, AKernelNameRunningPastTheSection) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, section_offset(b, KERNELS) + 12, 100000);
  fix_checksums(b);
  EXPECT_REJECTED(b, "KERNELS section", "truncated kernel name", "byte offset");
}

TEST(TraceFileRejects, AParameterCountThatCannotFit) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, section_offset(b, KERNELS) + 16, 0xFFFFFFFFu);
  fix_checksums(b);
  EXPECT_REJECTED(b, "KERNELS section", "4294967295 parameters cannot fit");
}

TEST(TraceFileRejects, OverlappingParametersInAKernelLayout) {
  auto b = encode_trace(sample_trace());
  // Kernel 0 ("gemm_nn_f32", 11 bytes of name): its second parameter starts at offset 4.
  put<std::uint32_t>(b, section_offset(b, KERNELS) + 24 + 11 + 8, 4);
  fix_checksums(b);
  EXPECT_REJECTED(b, "kernel 0 ('gemm_nn_f32') parameter 1", "overlaps");
}

TEST(TraceFileRejects, ADeviceNameLengthThatDisagreesWithTheSection) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, section_offset(b, META) + 8, 3);
  fix_checksums(b);
  EXPECT_REJECTED(b, "META section", "device name of 3 bytes");
}

struct event_mutation {
  const char* name;
  std::size_t event;
  std::size_t field;
  std::uint64_t value;
  std::size_t width;
  const char* expected;
};

class TraceFileRejectsEvent : public ::testing::TestWithParam<event_mutation> {};

TEST_P(TraceFileRejectsEvent, WithTheEventIndexAndItsByteOffset) {
  const event_mutation& m = GetParam();
  auto b = encode_trace(sample_trace());
  const std::size_t at = section_offset(b, EVENTS) + m.event * event_size;
  switch (m.width) {
    case 1: put<std::uint8_t>(b, at + m.field, static_cast<std::uint8_t>(m.value)); break;
    case 4: put<std::uint32_t>(b, at + m.field, static_cast<std::uint32_t>(m.value)); break;
    default: put<std::uint64_t>(b, at + m.field, m.value); break;
  }
  fix_checksums(b);
  const std::string which = "event " + std::to_string(m.event);
  const std::string where = "byte offset " + std::to_string(at);
  EXPECT_REJECTED(b, "EVENTS section", m.expected, which.c_str(), where.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Fields, TraceFileRejectsEvent,
    ::testing::Values(event_mutation{"kernel", 3, 72, 5, 4, "kernel index 5 out of range (2 kernels)"},
                      event_mutation{"stream", 4, 20, 2, 4, "stream index 2 out of range (2 streams)"},
                      event_mutation{"arena_end", 4, 48, 32, 8, "outside the arena of 40 bytes"},
                      event_mutation{"arena_huge", 3, 40, ~std::uint64_t{0} - 4, 8, "outside the arena"},
                      event_mutation{"misaligned", 4, 48, 4, 8, "not 8-aligned"},
                      event_mutation{"sequence", 5, 0, 0, 8, "sequence number not above"},
                      event_mutation{"kind", 6, 16, 42, 1, "unknown kind 42"},
                      event_mutation{"flags", 0, 17, event_flags::never_replay, 1, "flags 4 not allowed"},
                      event_mutation{"copy", 6, 18, 3, 1, "invalid copy kind 3"},
                      event_mutation{"copy_range", 5, 18, 9, 1, "invalid copy kind 9"},
                      event_mutation{"stray_kernel", 0, 72, 1, 4, "kernel/parameter fields set on a non-launch"},
                      // docs/trace-format.md: fields a kind does not use are zero (grid and block 1, 1, 1).
                      event_mutation{"reserved", 0, 19, 1, 1, "field reserved is set"},
                      event_mutation{"launch_address", 3, 24, 0x10000, 8, "field address is set"},
                      event_mutation{"alloc_source", 0, 32, 5, 8, "field source is set"},
                      event_mutation{"marker_bytes", 2, 40, 8, 8, "field bytes is set"},
                      event_mutation{"record_bytes", 7, 40, 8, 8, "field bytes is set"},
                      event_mutation{"alloc_correlation", 0, 56, 9, 8, "field correlation is set"},
                      event_mutation{"untimed_duration", 4, 64, 100, 8, "field duration_ns (the event is not timed)"},
                      event_mutation{"free_duration", 9, 64, 100, 8, "field duration_ns"},
                      event_mutation{"memcpy_shared_mem", 5, 76, 64, 4, "field shared_mem is set"},
                      event_mutation{"alloc_grid", 0, 80, 2, 4, "field grid/block"},
                      event_mutation{"wait_block", 8, 100, 0, 4, "field grid/block"},
                      event_mutation{"memset_value", 6, 32, 256, 8, "byte value 256 above 255"},
                      // Byte counts are bounded (docs/trace-format.md, "Limits").
                      event_mutation{"alloc_bytes", 1, 40, ~std::uint64_t{0}, 8,
                                     "18446744073709551615 bytes exceed the limit of 281474976710656"},
                      event_mutation{"copy_bytes", 5, 40, std::uint64_t{1} << 49, 8, "exceed the limit"},
                      event_mutation{"past_the_address_space", 1, 24, ~std::uint64_t{0} - 100, 8,
                                     "ends past the 64-bit address space"}),
    [](const ::testing::TestParamInfo<event_mutation>& p) { return std::string(p.param.name); });

// A granularity of 2^63 overflowed the simulator's page arithmetic (UBSan: signed
// overflow) and sent the budget arithmetic into an endless loop.
TEST(TraceFileRejects, AGranularityAboveTheLimit) {
  auto b = encode_trace(sample_trace());
  put<std::uint64_t>(b, section_offset(b, META), std::uint64_t{1} << 63);
  fix_checksums(b);
  EXPECT_REJECTED(b, "META section", "granularity 9223372036854775808 exceeds the limit of 1073741824 bytes");
  put<std::uint64_t>(b, section_offset(b, META), std::uint64_t{1} << 30);
  fix_checksums(b);
  EXPECT_EQ(decode_error(b), "(accepted)") << "the limit itself is a granularity";
}

// Allocations add up to at most 2^56 bytes, so that no sum of buffer sizes, each rounded
// up to a page, overflows in the analysis or the planners.
TEST(TraceFileRejects, AllocationsAddingUpBeyondTheLimit) {
  trace t;
  t.streams = {0};
  constexpr std::uint64_t most = max_event_bytes;
  for (std::uint64_t k = 0; k < max_allocated_bytes / most; ++k) {
    event& e = t.events.emplace_back();
    e.seq = k;
    e.kind = event_kind::alloc;
    e.address = k * most;
    e.bytes = most;
  }
  event& last = t.events.emplace_back();
  last.seq = t.events.size();
  last.kind = event_kind::alloc;
  last.address = max_allocated_bytes;
  auto b = encode_trace(t);  // exactly the limit, and an empty block: valid
  const std::size_t at = section_offset(b, EVENTS) + (t.events.size() - 1) * event_size;
  put<std::uint64_t>(b, at + 40, 1);
  fix_checksums(b);
  const std::string which = "event " + std::to_string(t.events.size() - 1);
  const std::string where = "byte offset " + std::to_string(at);
  EXPECT_REJECTED(b, "EVENTS section", which.c_str(), "allocations add up to more than the limit of 72057594037927936",
                  where.c_str());
}

TEST(TraceFileRejects, APathThatIsNotARegularFileWithoutReadingIt) {
  for (const std::string& path : std::vector<std::string>{"/dev/zero", ::testing::TempDir()}) {
    try {
      static_cast<void>(read_trace_file(path));
      FAIL() << path << " was read";
    } catch (const trace_format_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("trace file " + path + ": not a regular file"), std::string::npos) << msg;
      EXPECT_NE(msg.find("save the trace to a file"), std::string::npos) << msg;
    }
  }
}

TEST(TraceFileRejects, AFileOverTheSizeLimitWithoutReadingIt) {
  const std::string path = ::testing::TempDir() + "/tracer_too_large.sltrace";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  // Sparse: the size without the disk space.
  ASSERT_EQ(std::fseek(f, static_cast<long>(max_trace_file_bytes), SEEK_SET), 0);
  ASSERT_EQ(std::fputc(0, f), 0);
  std::fclose(f);
  try {
    static_cast<void>(read_trace_file(path));
    ADD_FAILURE() << "read";
  } catch (const trace_format_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("trace file " + path + ": 1073741825 bytes, more than the limit of 1073741824 bytes"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("check that this is the trace you meant"), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

TEST(TraceFileRejects, AWriteForALaunchThatWasNotObserved) {
  auto b = encode_trace(sample_trace());
  const trace t = sample_trace();
  put<std::uint64_t>(b, section_offset(b, WRITES), t.events[4].seq);
  fix_checksums(b);
  EXPECT_REJECTED(b, "WRITES section", "is not an observed launch");
}

TEST(TraceFileRejects, AFreshRecordForALaunchThatWasNotObserved) {
  auto b = encode_trace(sample_trace());
  const trace t = sample_trace();
  put<std::uint64_t>(b, section_offset(b, FRESH), t.events[4].seq);
  fix_checksums(b);
  EXPECT_REJECTED(b, "FRESH section", "is not an observed launch");
}

// A 1.0 file has no FRESH section (Note [Filled fresh blocks]): it reads with none.
TEST(TraceFile, AFileWithoutFreshRecordsReadsAsHavingNone) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, dir_of(b, FRESH), 99);  // a section this reader does not know
  put<std::uint16_t>(b, 10, 0);                 // minor version 0
  fix_checksums(b);
  trace expected = sample_trace();
  expected.fresh.clear();
  EXPECT_EQ(decode_trace(b), expected);
}

// Launch attributes (1.2, Note [Launch attributes]): kept per launch, in order.
TEST(TraceFile, LaunchAttributesRoundTripAndTheVersionIsOneTwo) {
  const trace t = sample_trace();
  const auto b = encode_trace(t);
  EXPECT_EQ(get<std::uint16_t>(b, 8), 1);
  EXPECT_EQ(get<std::uint16_t>(b, 10), 2);
  EXPECT_EQ(get<std::uint64_t>(b, dir_of(b, LATTRS) + 16), 3 * attribute_size);
  const trace back = decode_trace(b);
  ASSERT_EQ(back.attributes_of(t.events[3].seq).size(), 2U);
  EXPECT_EQ(back.attributes_of(t.events[3].seq)[0].attribute.word(0), 2U);
  EXPECT_EQ(back.attributes_of(t.events[4].seq)[0].attribute.id, device::launch_attribute_id::programmatic_event);
  EXPECT_TRUE(back.attributes_of(t.events[5].seq).empty());
}

// A 1.1 file has no LATTRS section: it reads as plain launches.
TEST(TraceFile, AFileWithoutLaunchAttributesReadsAsHavingNone) {
  auto b = encode_trace(sample_trace());
  put<std::uint32_t>(b, dir_of(b, LATTRS), 98);  // a section this reader does not know
  put<std::uint16_t>(b, 10, 1);
  fix_checksums(b);
  trace expected = sample_trace();
  expected.launch_attributes.clear();
  EXPECT_EQ(decode_trace(b), expected);
}

TEST(TraceFileRejects, ALaunchAttributeOfAnEventThatIsNotALaunch) {
  auto b = encode_trace(sample_trace());
  const trace t = sample_trace();
  put<std::uint64_t>(b, section_offset(b, LATTRS) + 2 * attribute_size, t.events[5].seq);  // the memcpy
  fix_checksums(b);
  EXPECT_REJECTED(b, "LATTRS section", "launch attribute 2", "is not a launch");
}

TEST(TraceFileRejects, LaunchAttributesOutOfOrderOrMalformed) {
  const trace t = sample_trace();
  auto b = encode_trace(t);
  put<std::uint64_t>(b, section_offset(b, LATTRS), t.events[4].seq);  // after the next record's seq
  fix_checksums(b);
  EXPECT_REJECTED(b, "LATTRS section", "not in increasing seq order");
  b = encode_trace(t);
  put<std::uint32_t>(b, section_offset(b, LATTRS) + 12, 1);
  fix_checksums(b);
  EXPECT_REJECTED(b, "LATTRS", "reserved field of a launch attribute is not zero");
  b = encode_trace(t);
  put<std::uint32_t>(b, section_offset(b, LATTRS) + 8, 0);
  fix_checksums(b);
  EXPECT_REJECTED(b, "LATTRS section", "id 0");
  b = encode_trace(t);
  put<std::uint64_t>(b, dir_of(b, LATTRS) + 24, 4);  // four records in the bytes of three
  fix_checksums(b);
  EXPECT_REJECTED(b, "LATTRS", "4 launch attributes need 320 bytes, the section has 240");
}

TEST(TraceFileRejects, RandomCorruptionWithoutCrashing) {
  // Every outcome is a decoded trace or a trace_format_error; with valid checksums most
  // flips reach the content checks.
  const std::vector<std::byte> full = encode_trace(sample_trace());
  std::mt19937_64 rng(7);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::byte> b = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<std::byte>(1U << (rng() % 8));
    if (i % 2 == 0) fix_checksums(b);
    try {
      const trace t = decode_trace(b);
      validate(t);  // anything accepted is consistent
    } catch (const trace_format_error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1500);
}

}  // namespace
}  // namespace sublinear::tracer
