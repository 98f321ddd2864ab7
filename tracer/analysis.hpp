// Graph and liveness inference: from one recorded iteration to policy::iteration.
//
// Note [Iteration analysis]
// Rationale: planners consume plain data (policy/iteration.hpp); the runtime additionally
//   needs to get from a planned launch back to its recorded bytes and from a buffer to its
//   address. Both come from one pass over the iteration's events.
// Approach: the blocks live when the iteration begins (every alloc before it, or marked
//   preexisting, not yet freed) become buffers with no alloc_index; each allocation in the
//   iteration becomes a buffer with the next alloc_index. Positions count launches
//   (kernels, copies, sets): a buffer allocated after launch i-1 was issued has
//   alloc_at = i; freed then, free_at = i. Each launch's parameter block is scanned
//   against the blocks live at that moment (Note [Pointer scan]); copies and sets touch
//   their destination (written) and source. Written sets are the observed ones where the
//   trace has them (Note [Write observation]), otherwise every touched buffer. Launches
//   on the never-replay list or naming an event, and copies from or to host memory, are
//   not replayable, and what such a launch touches is never evicted.
//   The turning point is the forward/backward boundary: the first position where the
//   bytes *held across* peak (each buffer allocated in the iteration counted between its
//   first and its last use), which is where the activations saved for backward pile up
//   (not the live-byte peak: docs/design-notes.md#iteration-analysis). Candidates are the
//   buffers allocated in the iteration, live across the turning point, used on both sides
//   of it, with at least `min_idle_gap` launches between the last use before and the
//   first use after it. Cost: the measured duration where the launch was timed, else an
//   estimate from the bytes it touches (`unmeasured_cost_per_byte`). A buffer allocated
//   in the iteration whose first user does not write it has no known producer and is
//   never evicted (Note [Unknown producers] in analysis.cpp).
// Limitations: reads are known only conservatively: a launch is taken to read every
//   buffer it touches except one it writes first after its allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "policy/iteration.hpp"
#include "tracer/events.hpp"

namespace sublinear::tracer {

struct analysis_options {
  std::size_t granularity = 0;              // 0: the trace's (1 if the trace has none)
  std::size_t min_idle_gap = 1;             // launches between last forward and first backward use
  double unmeasured_cost_per_byte = 1e-10;  // seconds per touched byte (10 GB/s) when not timed
  // (kernel index, parameter offset) pairs known to be written through, from another
  // iteration of the same trace (Note [Write generalization] in analysis.cpp).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> known_writing_slots;
};

// One pointer into a buffer, as found in a launch's parameters.
struct touch {
  policy::buffer_id buffer = policy::none;
  std::uint32_t param_offset = 0;  // kernels: the word's offset; memcpy: 0 destination, 8 source
  std::uint64_t offset = 0;        // word - buffer base (interior pointers: > 0)
  bool operator==(const touch&) const = default;
};

struct analysed_iteration {
  policy::iteration graph;

  // Back to the trace, for the runtime and for reports.
  std::vector<std::size_t> launch_events;        // launch -> index in trace::events
  std::vector<std::uint64_t> buffer_addresses;   // buffer -> base address
  std::vector<std::uint32_t> streams;            // dense stream -> trace stream index
  std::vector<std::vector<touch>> touches;       // launch -> every pointer word, in order

  // Dataflow.
  std::vector<policy::launch_id> producer;       // buffer -> first launch writing it, or none
  std::vector<std::vector<policy::buffer_id>> inputs;  // launch -> buffers it may read, ascending

  std::vector<std::size_t> live_bytes;           // position p in [0, launches] -> live bytes
  policy::launch_id live_peak_at = 0;            // first position of the live-byte peak
  std::size_t held_bytes_at_turning_point = 0;   // bytes held across graph.turning_point
  std::size_t observed_launches = 0;             // launches whose writes were observed
  std::size_t timed_launches = 0;                // launches with a measured duration
  std::size_t graph_launches = 0;                // CUDA graph launches (Note [Graph launches] in analysis.cpp)
  // Buffers allocated in the iteration whose first user reads them without writing them:
  // their producer is unknown (Note [Unknown producers] in analysis.cpp); never evicted.
  std::vector<policy::buffer_id> unproduced;
  // Every (kernel index, parameter offset) seen written through, known ones included.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> writing_slots;
};

// Analyses events [iteration.begin, iteration.end) of `t`. Throws trace_format_error
// (trace_file.hpp) if the trace is invalid or the range lies outside it.
[[nodiscard]] analysed_iteration analyse(const trace& t, event_range iteration,
                                         const analysis_options& options = {});

// Analyses the last complete iteration (iterations_of in iterations.hpp); throws
// sublinear::config_error saying why when there is none.
[[nodiscard]] analysed_iteration analyse_last_iteration(const trace& t, const analysis_options& options = {});

}  // namespace sublinear::tracer
