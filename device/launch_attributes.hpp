// Launch attributes: what cuLaunchKernelEx adds to a launch beyond grid, block, shared
// memory and stream, in a form every layer can hold without <cuda.h>.
//
// Note [Launch attributes]
// Rationale: Hopper libraries (cuBLASLt, CUTLASS 3, flash attention) launch with
//   cuLaunchKernelEx and attributes: a thread-block cluster shape, programmatic stream
//   serialization, a priority. Such a kernel replayed as a plain launch is refused (a
//   cluster kernel needs its cluster shape) or runs differently, and its recipe is lost.
// Approach: an attribute is kept as the driver takes it: its CUlaunchAttributeID value
//   and the 64 bytes of its CUlaunchAttributeValue (the CUDA backend checks both against
//   cuda.h at compile time). The trace keeps a launch's attributes (docs/trace-format.md,
//   LATTRS) and the replay passes them back to cuLaunchKernelEx. replay_verdict says,
//   per id, whether passing the recorded value again reproduces the launch: shapes,
//   cooperative grids, programmatic serialization and hints do; an attribute that
//   records an event (programmatic event, launch completion event) would record it again
//   out of the program's order, one that only graphs or streams take cannot be on a
//   replayed launch, and an id this build does not know is not guessed at. A launch
//   with any attribute that is not reproduced is not replayable (its outputs are never
//   evicted) and the plan preview names it with the reason.
// Limitations: the host device honours cluster_dimension and cooperative (its kernels
//   see them in their launch configuration) and accepts every other attribute without
//   effect. An access policy window's base pointer is replayed as recorded (a hint).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace sublinear::device {

// CUlaunchAttributeID values (cuda.h, CUDA 13).
namespace launch_attribute_id {
inline constexpr std::uint32_t ignore = 0;
inline constexpr std::uint32_t access_policy_window = 1;
inline constexpr std::uint32_t cooperative = 2;
inline constexpr std::uint32_t synchronization_policy = 3;
inline constexpr std::uint32_t cluster_dimension = 4;
inline constexpr std::uint32_t cluster_scheduling_policy_preference = 5;
inline constexpr std::uint32_t programmatic_stream_serialization = 6;
inline constexpr std::uint32_t programmatic_event = 7;
inline constexpr std::uint32_t priority = 8;
inline constexpr std::uint32_t mem_sync_domain_map = 9;
inline constexpr std::uint32_t mem_sync_domain = 10;
inline constexpr std::uint32_t preferred_cluster_dimension = 11;
inline constexpr std::uint32_t launch_completion_event = 12;
inline constexpr std::uint32_t device_updatable_kernel_node = 13;
inline constexpr std::uint32_t preferred_shared_memory_carveout = 14;
inline constexpr std::uint32_t nvlink_util_centric_scheduling = 16;
}  // namespace launch_attribute_id

inline constexpr std::size_t launch_attribute_value_bytes = 64;  // sizeof(CUlaunchAttributeValue)

struct launch_attribute {
  std::uint32_t id = launch_attribute_id::ignore;
  std::array<std::byte, launch_attribute_value_bytes> value{};

  bool operator==(const launch_attribute&) const = default;

  // The value's first words, as the driver lays them out (clusterDim is x, y, z; int
  // attributes are the first word).
  [[nodiscard]] std::uint32_t word(std::size_t i) const noexcept;
  void set_word(std::size_t i, std::uint32_t v) noexcept;
};

// An attribute with up to three 32-bit words (cluster shape, a flag, a priority).
[[nodiscard]] launch_attribute make_launch_attribute(std::uint32_t id, std::uint32_t x, std::uint32_t y = 0,
                                                     std::uint32_t z = 0) noexcept;

// "cluster_dimension", or "attribute 15" for an id this build does not name.
[[nodiscard]] std::string launch_attribute_name(std::uint32_t id);

// Whether passing the recorded attribute to a replay reproduces the launch; when not,
// `why` says so in a sentence fragment ("records an event ...").
struct replay_verdict {
  bool replayable = true;
  const char* why = "";
};
[[nodiscard]] replay_verdict verdict_for(std::uint32_t id) noexcept;

// The first attribute a replay cannot reproduce, or nullptr.
[[nodiscard]] const launch_attribute* first_unreplayable(std::span<const launch_attribute> attrs) noexcept;

// The cluster shape among `attrs` (1, 1, 1 when there is none).
struct cluster_shape {
  std::uint32_t x = 1, y = 1, z = 1;
  bool operator==(const cluster_shape&) const = default;
};
[[nodiscard]] cluster_shape cluster_of(std::span<const launch_attribute> attrs) noexcept;
[[nodiscard]] bool cooperative_of(std::span<const launch_attribute> attrs) noexcept;

}  // namespace sublinear::device
