// The engine's checks for writes the trace did not see (Note [Unseen writes] in
// runtime/engine_writes.cpp), from the plan: which blocks it hashes where, and what they
// cost a planned iteration that runs as traced.
//
// Note [Write check work]
// Rationale: in planned iterations the engine hashes recipe inputs around their readers,
//   targets after their production, both again at each release, and inputs again before
//   a replay, which waits for the stream. On a recurrent model that is most of the planned
//   iteration's extra time: an LSTM's input sequence is read by every step's recipe, so it
//   is hashed about once per step and once per release (LSTM-512 at 0.5x on the host
//   device: 550-640 MB hashed and about 1,600 waits an iteration). The traced iteration
//   does none of it, so the plan's prediction (Note [Predicted iteration time]) must add it.
// Approach: count_write_checks walks the hashes the engine takes, in its order (before a
//   launch: restores, then the hashes listed before it; after it: the hashes listed
//   after it, then its releases), with the engine's rule for repeating a hash (no launch
//   of the trace and no replay touched the block since its last one) and its skips (a
//   block not allocated, evicted, offloaded or freed then). It counts hashes and their
//   bytes, waits (a replay whose inputs are hashed again: one, as later hashes find the
//   stream drained; a release compares when the stream gets there, Note [Unsettled
//   releases], and copies inputs in stream order where the device can, else it waits
//   once) and the input copies. probe_hash_cost
//   times the device's hash: queued back to back, and waited for at one granule and at
//   `large_granules`, in a reservation of its own (the least of up to `rounds`, 50 ms).
// Limitations: the walk assumes every planned release and restore happens where the plan
//   says; the valve, prefetching, unseen writes and validation's copies change the
//   figures. `WriteCheckWork.*` compares them with steady iterations' counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "policy/iteration.hpp"

namespace sublinear::device {
class vmm;
}

namespace sublinear::policy {
struct plan;
}

namespace sublinear::runtime {

class replay_device;

// Stamps order hashes against launches: 2l is just before launch l, 2l + 1 just after it.
constexpr std::uint32_t before_stamp(std::size_t l) { return static_cast<std::uint32_t>(2 * l); }
constexpr std::uint32_t after_stamp(std::size_t l) { return static_cast<std::uint32_t>(2 * l + 1); }

// Whether a launch in `uses` (a block's touching launches, ascending) runs between the
// hashes stamped `from` and `to`: the only way the block's bytes can change, for
// pointers the scan sees.
[[nodiscard]] bool touched_between(const std::vector<policy::launch_id>& uses, std::uint32_t from, std::uint32_t to);

// Which blocks to hash where (Note [Unseen writes]): position -> blocks to hash just
// before (after) that launch; per plan entry, the blocks its recipe reads in place with
// their first reader, and its targets with the recipe's last write to each.
struct write_check_index {
  std::vector<std::vector<policy::buffer_id>> hash_before_at;
  std::vector<std::vector<policy::buffer_id>> hash_after_at;
  std::vector<std::vector<std::pair<policy::buffer_id, policy::launch_id>>> guarded_inputs;
  std::vector<std::vector<std::pair<policy::buffer_id, policy::launch_id>>> productions;
};

[[nodiscard]] write_check_index index_write_checks(const policy::plan& plan, const policy::iteration& traced);

// Buffer -> the plan entry whose recipe regenerates it (its own, or the entry listing it
// in also_regenerates), else an entry evicting it without one, else -1.
[[nodiscard]] std::vector<std::int32_t> carriers_of(const policy::plan& plan, std::size_t buffers);

// What the checks do in one planned iteration (Note [Write check work]).
struct write_check_work {
  std::size_t hashes = 0;        // hashes taken (repeated ones not counted)
  std::size_t hashed_bytes = 0;  // their bytes
  std::size_t waits = 0;         // times the host waits for the stream for a check
  std::size_t copies = 0;        // recipe inputs copied to host memory at releases
  std::size_t copied_bytes = 0;
};

// `copies_on_stream`: the device queues the input copies on the stream
// (replay_device::downloads_on_stream), so they wait for nothing.
[[nodiscard]] write_check_work count_write_checks(const write_check_index& index, const policy::plan& plan,
                                                  const policy::iteration& traced, bool copies_on_stream = false);

// The device's cost of a hash (Note [Write check work]).
struct hash_cost {
  double issue_s = 0.0;  // the host's time to queue one (the whole hash where it waits)
  double wait_s = 0.0;   // a wait for one just queued on an idle stream, beyond issue_s
  double byte_s = 0.0;   // per byte hashed
  std::string device;    // the device probed, and where it hashes ("host, hashed on its stream")
  std::string error;     // why there are no costs ("" if measured)
  // The host and device time of `w`.
  [[nodiscard]] double cost_s(const write_check_work& w) const noexcept {
    return issue_s * static_cast<double>(w.hashes + w.copies) + wait_s * static_cast<double>(w.waits) +
           byte_s * static_cast<double>(w.hashed_bytes + w.copied_bytes);
  }
};

// Never throws on a device failure: `error` says why and the costs are 0.
[[nodiscard]] hash_cost probe_hash_cost(replay_device& dev, device::vmm& vmm, std::size_t large_granules = 16,
                                        int rounds = 25);

}  // namespace sublinear::runtime
