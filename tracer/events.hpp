// The tracer's event model: what one recorded run is made of.
//
// Note [Event model]
// Rationale: everything the planner and the replay engine know about a training iteration
//   comes from this record: which blocks existed, which launches ran in which order with
//   which parameter bytes, and what synchronized them. It must be exact (a replay
//   re-launches these bytes verbatim), device-agnostic (host device and CUPTI produce the
//   same events) and compact (a ResNet-1000 iteration has ~10^5 launches).
// Approach: a trace is a flat vector of fixed-size events in sequence order plus side
//   tables: the kernel table (name and parameter layout per kernel, referenced by index),
//   the stream table (dense index -> device handle value), one parameter arena holding
//   every launch's packed parameter bytes at 8-aligned offsets, and the observed write
//   sets. An event names its kind, its sequence number (global and increasing), a steady
//   clock timestamp, a dense stream index and kind-specific fields; fields a kind does
//   not use are zero, so two traces compare equal field by field.
// Limitations: addresses are raw values from the recorded process; they identify blocks
//   only within one trace. Kernel handles likewise; the name is what is stable across
//   processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "device/launch_attributes.hpp"

namespace sublinear::tracer {

inline constexpr std::uint64_t no_seq = std::numeric_limits<std::uint64_t>::max();

enum class event_kind : std::uint8_t {
  alloc = 1,         // a block was allocated
  free = 2,          // a block was freed
  launch = 3,        // a kernel was launched
  memcpy = 4,        // an asynchronous copy was queued
  memset = 5,        // an asynchronous memset was queued
  event_record = 6,  // a device event was recorded on a stream
  event_wait = 7,    // a stream was made to wait for a device event
  marker = 8,        // an iteration boundary (explicit marker)
};
inline constexpr std::uint8_t event_kind_max = 8;

[[nodiscard]] const char* to_string(event_kind kind) noexcept;

enum class copy_kind : std::uint8_t {
  unknown = 0,
  host_to_device = 1,
  device_to_host = 2,
  device_to_device = 3,
  host_to_host = 4,
};
inline constexpr std::uint8_t copy_kind_max = 4;

[[nodiscard]] const char* to_string(copy_kind kind) noexcept;

// Bits of event::flags.
namespace event_flags {
inline constexpr std::uint8_t evictable = 1U << 0;        // alloc: placed as evictable
inline constexpr std::uint8_t preexisting = 1U << 1;      // alloc: live before recording began
inline constexpr std::uint8_t never_replay = 1U << 2;     // launch: on the never-replay list
inline constexpr std::uint8_t names_event = 1U << 3;      // launch: its attributes name an event, or need
                                                          // more than a plain launch (clusters, cooperative)
inline constexpr std::uint8_t writes_observed = 1U << 4;  // launch: trace::writes lists its writes
inline constexpr std::uint8_t timed = 1U << 5;            // duration_ns is a measurement
inline constexpr std::uint8_t all = 0x3F;
}  // namespace event_flags

struct dims {
  std::uint32_t x = 1, y = 1, z = 1;
  bool operator==(const dims&) const = default;
};

struct event {
  std::uint64_t seq = 0;          // global sequence number, strictly increasing in a trace
  std::uint64_t time_ns = 0;      // steady clock when recorded
  event_kind kind = event_kind::launch;
  std::uint8_t flags = 0;         // event_flags
  copy_kind copy = copy_kind::unknown;  // memcpy only
  std::uint8_t reserved = 0;
  std::uint32_t stream = 0;       // index into trace::streams
  // alloc/free: block base; memcpy/memset: destination; event_record/event_wait: the
  // device event's handle value; marker: the iteration number.
  std::uint64_t address = 0;
  std::uint64_t source = 0;       // memcpy: source address; memset: the byte value
  std::uint64_t bytes = 0;        // alloc/free: requested size; memcpy/memset: byte count;
                                  // launch: parameter bytes
  std::uint64_t param_offset = 0; // launch: offset of its parameter bytes in trace::arena
  std::uint64_t correlation = 0;  // launch: the device's correlation id
  std::uint64_t duration_ns = 0;  // launch/memcpy/memset: execution time when timed
  std::uint32_t kernel = 0;       // launch: index into trace::kernels
  std::uint32_t shared_mem = 0;   // launch: dynamic shared memory bytes
  dims grid, block;               // launch

  bool operator==(const event&) const = default;
};

// One parameter of a kernel: what cuFuncGetParamInfo reports.
struct param_slot {
  std::uint32_t offset = 0;
  std::uint32_t size = 0;
  bool operator==(const param_slot&) const = default;
};

struct kernel_info {
  std::string name;
  std::uint64_t handle = 0;        // the device's handle (host: kernel id; CUDA: CUfunction)
  std::uint32_t param_bytes = 0;   // size of the packed block
  std::vector<param_slot> params;  // in declaration order
  bool never_replay = false;       // matched the never-replay list when first seen
  bool operator==(const kernel_info&) const = default;
};

// A block a launch was seen to write (Note [Write observation] in host/host_collector.hpp).
struct write_record {
  std::uint64_t seq = 0;      // the launch's sequence number
  std::uint64_t address = 0;  // base of the block written
  bool operator==(const write_record&) const = default;
  auto operator<=>(const write_record&) const = default;
};

// One attribute of a launch made with cuLaunchKernelEx (Note [Launch attributes] in
// device/launch_attributes.hpp); a launch's attributes are consecutive, in the order given.
struct launch_attribute_record {
  std::uint64_t seq = 0;  // the launch's sequence number
  device::launch_attribute attribute;
  bool operator==(const launch_attribute_record&) const = default;
};

// The kernel name a CUDA graph launch is recorded under (the CUPTI collector; a host
// test may register a kernel of that name to stand for one). Its nodes are not seen: the
// analysis takes it to touch every block live when it is launched (Note [Graph
// launches] in analysis.cpp).
inline constexpr const char* graph_launch_kernel_name = "[cuGraphLaunch]";

// Events [begin, end) of trace::events: one iteration, markers excluded.
struct event_range {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] std::size_t size() const { return end - begin; }
  bool operator==(const event_range&) const = default;
};

struct trace {
  std::string device;                 // "host", "cuda"
  std::uint64_t granularity = 0;      // the allocator's page granularity (0: unknown)
  std::vector<kernel_info> kernels;
  std::vector<std::uint64_t> streams; // dense index -> device handle value; 0 is the default
  std::vector<event> events;          // in sequence order
  std::vector<std::byte> arena;       // every launch's parameter bytes
  std::vector<write_record> writes;   // ordered by (seq, address)
  // Blocks an observed launch found still filled as allocated: no one had written them
  // (Note [Filled fresh blocks] in block_hashes.hpp). Ordered by (seq, address).
  std::vector<write_record> fresh;
  // The attributes of launches made with some (since 1.2), ordered by seq.
  std::vector<launch_attribute_record> launch_attributes;

  // The parameter bytes of a launch event. Precondition: the trace is valid (see
  // trace_file.hpp: the reader checks every offset).
  [[nodiscard]] std::span<const std::byte> params(const event& e) const {
    return {arena.data() + e.param_offset, static_cast<std::size_t>(e.bytes)};
  }
  // The writes recorded for the launch with sequence number `seq` (ordered by address).
  [[nodiscard]] std::span<const write_record> writes_of(std::uint64_t seq) const;
  // Its fresh records.
  [[nodiscard]] std::span<const write_record> fresh_of(std::uint64_t seq) const;
  // Its launch attributes (empty for a plain launch).
  [[nodiscard]] std::span<const launch_attribute_record> attributes_of(std::uint64_t seq) const;
  // Complete iterations: the events between consecutive markers.
  [[nodiscard]] std::vector<event_range> marked_iterations() const;

  bool operator==(const trace&) const = default;
};

// Arena offsets are aligned so that a parameter block's words can be read as aligned.
inline constexpr std::size_t arena_alignment = 8;

}  // namespace sublinear::tracer
