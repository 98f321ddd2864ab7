// Offloading to host memory while tracing, under an absolute budget.
//
// Note [Offloading the traced iteration]
// Rationale: a model whose traced iteration does not fit in the device, or in an
//   absolute budget, could otherwise never be planned: the plan needs the trace. Nothing
//   is known yet about how to recompute a buffer, but its bytes can always be kept.
// Approach: with an absolute budget the allocator's budget holds from the first traced
//   iteration on, and blocks of at least a page are placed evictable (dedicated pages)
//   while tracing. When a mapping does not fit, the pressure handler offloads live
//   evictable blocks to host memory (replay_device::download, stream-ordered, then
//   caching_allocator::evict), least recently touched first (launch parameters' pointer
//   words, copies' and sets' ranges), never one the launch entering now touches, until
//   the shortfall is covered. A launch, copy, set or replayed recipe launch touching an
//   offloaded block restores it (restore, then upload) before it is queued; a free drops
//   the host copy. None of this is recorded, and the engine's launch hook runs before the
//   collector's, so write observation hashes the restored bytes. The plan's overhead is
//   taken from the peak without offloading (mapped, less pooled chunks, plus the
//   offloaded blocks). engine_options::budget_traced_iterations = false keeps the traced
//   iterations unbudgeted (a recording for `sublinear plan` is made that way).
// Limitations: evictable placement changes the layout, so such a trace differs from an
//   unbudgeted one; offloads cost a host copy each way and wait for the block's own stream
//   only (not other streams' record_stream use); a block counts as touched only through a
//   pointer word, as in the safety net; blocks allocated in planned iterations are not
//   tracked (a trace after a divergence cannot offload them). The host copies count
//   against the host budget (Note [Host budget] in engine_swap.cpp). With nothing offloadable,
//   the rest of that traced iteration runs without a budget, with a warning naming the
//   shortfall (its report shows no budget): the plan may still meet the budget (it also
//   evicts blocks under a page), and failing would lose the run. A diverged iteration
//   runs under the traced iteration's peak first, and without a budget only after that.
#include "common/text.hpp"
#include "runtime/detail/engine_impl.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace sublinear::runtime {

// The peak this iteration would have had without offloading: mapped pages, less chunks
// pooled only because of offloads, plus the offloaded blocks' pages.
void engine::impl::sample_unoffloaded_peak() {
  const auto s = alloc.get_stats();
  unoffloaded_peak = std::max(unoffloaded_peak, s.mapped - s.pooled + s.evicted);
}

// Calls `f(base, block)` for every tracked block overlapping [p, p + bytes).
// Addresses compare as integers: parameter words may be anything, not pointers.
template <class F>
void engine::impl::for_blocks_in(std::uintptr_t p, std::size_t bytes, F&& f) {
  auto at = [](const char* base) { return reinterpret_cast<std::uintptr_t>(base); };
  const std::uintptr_t end = p + std::max<std::size_t>(bytes, 1) < p ? UINTPTR_MAX : p + std::max<std::size_t>(bytes, 1);
  auto it = blocks.upper_bound(reinterpret_cast<const char*>(p));
  if (it != blocks.begin()) {
    auto prev = std::prev(it);
    if (p < at(prev->first) + prev->second.size) it = prev;
  }
  for (; it != blocks.end() && at(it->first) < end; ++it) f(it->first, it->second);
}

// The blocks `op` touches: pointer words of a kernel's parameters, a copy's or set's ranges.
std::vector<const char*> engine::impl::touched_blocks(const launch_view& op) {
  std::vector<const char*> out;
  auto add = [&](const char* base, tracked_block&) {
    if (std::find(out.begin(), out.end(), base) == out.end()) out.push_back(base);
  };
  if (op.what == launch_view::kind::kernel) {
    for (std::size_t off = 0; off + 8 <= op.params.size(); ++off) {  // Note [Pointer scan]: any offset
      std::uint64_t word = 0;
      std::memcpy(&word, op.params.data() + off, 8);
      for_blocks_in(static_cast<std::uintptr_t>(word), 1, add);
    }
  } else {
    const std::size_t bytes = std::max<std::size_t>(op.bytes, 1);
    for_blocks_in(reinterpret_cast<std::uintptr_t>(op.dst), bytes, add);
    if (op.src != nullptr) for_blocks_in(reinterpret_cast<std::uintptr_t>(op.src), bytes, add);
  }
  return out;
}

// Brings an offloaded block back: pages at its address, then its bytes, before anything
// queued on `stream` after this call.
void engine::impl::bring_back(const char* base, device::stream_handle stream) {
  auto it = blocks.find(base);
  if (it == blocks.end() || !it->second.offloaded) return;
  tracked_block& t = it->second;
  alloc.restore(const_cast<char*>(base));  // may offload others, never those entering now
  dev.upload(const_cast<char*>(base), t.host.data(), t.size, stream);
  t.offloaded = false;
  std::vector<std::byte>().swap(t.host);
  --offloaded_live;
  traced_offload_bytes -= t.size;
  ++current.offload_restores;
  sample_unoffloaded_peak();
}

// At ENTER (and before a recipe launch is replayed): marks what `op` touches as used now
// and restores the offloaded blocks among it.
void engine::impl::touch_and_restore(const launch_view& op, device::stream_handle stream) {
  if (blocks.empty() || (st != engine_state::trace && !diverged && offloaded_live == 0)) return;
  ++launch_clock;
  entering = touched_blocks(op);
  try {
    for (const char* base : entering) {
      auto& t = blocks.at(base);
      t.last_touch = launch_clock;
      if (t.offloaded) bring_back(base, stream);
    }
  } catch (...) {
    entering.clear();
    throw;
  }
  entering.clear();
}

// The pressure handler while tracing: offloads the least recently touched evictable
// blocks the launch entering now does not touch until `shortfall` bytes are on their
// way out. Returns the bytes asked to evict (0: nothing could go).
std::size_t engine::impl::offload(std::size_t shortfall) {
  const std::size_t gran = alloc.granularity();
  std::vector<std::pair<std::uint64_t, const char*>> found;
  for (auto& [base, t] : blocks) {
    if (!t.evictable || t.offloaded) continue;
    if (std::find(entering.begin(), entering.end(), base) != entering.end()) continue;
    if (engine_evicted(base)) continue;  // a diverged iteration: the plan's, not yet back
    found.emplace_back(t.last_touch, base);
  }
  std::sort(found.begin(), found.end());
  std::size_t asked = 0;
  std::size_t count = 0;
  std::size_t no_room = 0;  // blocks the host budget had no room for (Note [Host budget])
  for (const auto& [touch, base] : found) {
    if (asked >= shortfall) break;
    tracked_block& t = blocks.at(base);
    if (t.size > host_room(0)) {
      ++no_room;
      continue;
    }
    try {
      t.host.resize(t.size);
    } catch (const std::bad_alloc&) {
      ++no_room;
      continue;
    }
    dev.download(t.host.data(), base, t.size, t.stream);  // waits for the work queued on it
    alloc.evict(const_cast<char*>(base));
    t.offloaded = true;
    ++offloaded_live;
    traced_offload_bytes += t.size;
    note_host_held();
    ++current.offloads;
    current.offloaded_bytes += t.size;
    asked += (t.size + gran - 1) / gran * gran;
    ++count;
    if (opts.record_timeline) note_block(timeline_event::kind::evict, dev.now_s(), base, t.size, "offload");
  }
  log_info("iteration " + std::to_string(iteration_index) + (diverged ? " (diverged): " : " (traced): ") +
           format_bytes(shortfall) +
           " short of the budget: offloaded " + std::to_string(count) + " blocks (" + format_bytes(asked) +
           ") to host memory of " + std::to_string(found.size()) + " that could go" +
           (no_room > 0 ? ", " + std::to_string(no_room) + " with no room under the host budget" : std::string()));
  if (asked == 0) lift_trace_budget(shortfall, no_room);
  return asked == 0 ? shortfall : asked;
}

// Whether the plan's eviction or offload has the block's pages out now.
bool engine::impl::engine_evicted(const char* base) const {
  if (!have_plan || evicted.empty()) return false;
  const auto it = buffer_at.find(base);
  return it != buffer_at.end() && it->second < evicted.size() && evicted[it->second] != 0;
}

// Nothing is left to offload: the rest of this traced iteration runs without a budget
// (Note [Offloading the traced iteration]); the next iteration sets it again. A diverged
// iteration first runs under the traced iteration's own peak (planning_peak: its pages had
// nothing been offloaded), what the program mapped without sublinear; only if that is
// short too does it run without one.
void engine::impl::lift_trace_budget(std::size_t shortfall, std::size_t no_room) {
  const bool to_traced_peak = diverged && planning_peak > current.budget && current.budget > 0;
  const std::string why =
      no_room > 0 ? " and the host budget of " + format_bytes(host_budget()) + " (it holds " +
                        format_bytes(host_held()) + ") has no room to offload the " + std::to_string(no_room) +
                        " blocks that could go (raise SUBLINEAR_HOST_BUDGET)"
                  : " and nothing is left to offload (blocks under a page, and those the launch entering now "
                    "touches, stay)";
  log_warn("iteration " + std::to_string(iteration_index) + (diverged ? " (diverged)" : " (traced)") + " needs " +
           format_bytes(shortfall) + " more than the budget of " + format_bytes(current.budget) + why +
           "; the rest of this iteration runs " +
           (to_traced_peak ? "under the traced iteration's peak, " + format_bytes(planning_peak) : "without a budget") +
           ". The plan holds the budget from the next planned iteration on.");
  const std::size_t lifted = to_traced_peak ? planning_peak : 0;
  alloc.set_budget(lifted);
  current.budget = lifted;
}

}  // namespace sublinear::runtime
