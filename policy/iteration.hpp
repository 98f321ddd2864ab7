// The analysed iteration: what the tracer infers from one traced training iteration and
// what every planner consumes. Plain data: no device, no I/O.
//
// Note [Analysed iteration]
// Rationale: planners must be testable on random graphs and on recorded traces alike,
//   so their input is a value type the tracer fills and tests can build by hand.
// Approach: one iteration is a sequence of launches (kernels, copies, memsets) in issue
//   order and a set of buffers (allocation instances). A buffer lives from its
//   allocation to its free, measured in launch positions; each launch lists the buffers
//   its parameters point into (found by pointer scanning) and, of those, the ones it
//   was seen to write. Positions: "before launch i" means after launch i-1 completed.
// Limitations: what a launch reads is only known conservatively (every touched buffer);
//   writes are observed on the traced iteration (content hashes around each launch) or,
//   where that is not possible, assumed to be every touched buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace sublinear::policy {

using launch_id = std::uint32_t;
using buffer_id = std::uint32_t;
inline constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

enum class launch_kind : std::uint8_t { kernel, memcpy, memset };

struct launch {
  launch_kind kind = launch_kind::kernel;
  std::uint32_t kernel = 0;         // kernel id (index into iteration::kernel_names)
  std::uint32_t stream = 0;         // dense stream index within the iteration
  double cost_s = 0.0;              // measured duration of the original launch
  bool replayable = true;           // false: never-replay list, host->device copies of
                                    // host data, launches naming events, collectives
  std::vector<buffer_id> touched;   // buffers its parameters point into, ascending
  std::vector<buffer_id> written;   // subset of touched that it (may) write, ascending
};

struct buffer {
  std::size_t size = 0;             // bytes requested
  std::uint32_t alloc_index = none; // index among the iteration's allocations (what the
                                    // allocator sees at malloc time); none if allocated
                                    // before the iteration began
  launch_id alloc_at = 0;           // allocated before launch alloc_at (0 for persistent)
  launch_id free_at = none;         // freed before launch free_at; none: outlives the iteration
  std::uint32_t stream = 0;         // dense stream index of its allocation (as launch::stream);
                                    // packs hold buffers of one stream (Note [Packs])
  bool never_evict = false;         // reached by a never-replay launch, or failed validation
  bool unwritten_at_first_use = false;  // its first user found it as allocated: nothing
                                        // produces it, and nothing needs to (Note [Filled
                                        // fresh blocks] in tracer/block_hashes.hpp)
  std::vector<launch_id> users;     // launches touching it, ascending

  [[nodiscard]] bool persistent() const { return alloc_index == none || free_at == none; }
};

struct iteration {
  std::vector<launch> launches;
  std::vector<buffer> buffers;
  std::vector<std::string> kernel_names;
  launch_id turning_point = 0;      // the forward/backward boundary: position of the peak
  std::size_t granularity = 1;      // allocator page granularity for evictable buffers
  std::size_t peak_bytes = 0;       // traced peak of live bytes (sum of buffer sizes)

  // Activations worth considering: not persistent, not never_evict, live across the
  // turning point with an idle gap (no use) around it. Filled by the tracer's analysis;
  // planners may use it or their own criterion.
  std::vector<buffer_id> candidates;
};

}  // namespace sublinear::policy
