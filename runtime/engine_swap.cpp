// Offload execution: the plan's offloads copied to host memory after their last forward
// use and fetched back before their first backward use, on the device's copy streams.
//
// Note [Offload execution]
// Rationale: a copy engine moves bytes while the compute stream runs; the plan says when
//   (policy/plan.hpp `offload`), the runtime must keep the stream order exact, release
//   pages only once their bytes are safe on the host, and never let a consumer read pages
//   the fetch has not filled.
// Approach: after launch evict_after the device->host copy is queued on the copy stream
//   behind the launch's stream; at every ENTER the engine polls the copies in flight and
//   evicts (pages released) those whose bytes have arrived; at the ENTER of release_before
//   the host waits for a copy still running (release_wait_s), so the simulator's mapped
//   bytes hold at any link speed. At the ENTER of fetch_after + 1 the pages are mapped
//   again at the same address and the host->device copy is queued behind the entering
//   launch's stream; at the ENTER of restore_before, after the recipes restoring there,
//   that stream waits on the copy's event. All of it in the simulator's order (Note [Link
//   timeline]; copies queued together by deadline, then plan order). Each buffer has a
//   slot in one host pool laid out by policy::lay_out_host_pool (Note [Host pool layout]),
//   made once per plan. The ENTER safety net covers offloaded buffers: a launch (copy,
//   set) or a recipe touching one outside the plan makes its stream wait for the bytes
//   first (safety_fetches); a prefetch never runs a recipe that would (Note [Prefetch]). A divergence brings every offloaded buffer back first. A copy the
//   device refuses leaves the buffer resident (out) or is replaced by a synchronous
//   upload (in), both counted in failed_copies.
// Limitations: the device->host copy follows the producing launch's stream only (as
//   evictions wait for the block's own streams); a buffer the program frees while a copy
//   of it is in flight makes the host wait for that copy.
#include "common/text.hpp"
#include "policy/host_layout.hpp"
#include "policy/offload_packs.hpp"
#include "runtime/detail/engine_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

namespace sublinear::runtime {

namespace {
using policy::buffer_id;
using policy::launch_id;
using policy::none;
}  // namespace

// ---- the device's defaults: synchronous copies into pageable memory -----------------------

std::byte* replay_device::host_pool(std::size_t bytes) {
  if (pageable_pool_.size() < bytes) pageable_pool_.resize(bytes);
  return pageable_pool_.data();
}

replay_device::copy_handle replay_device::copy_to_host(void* host_dst, const void* device_src, std::size_t bytes,
                                                       device::stream_handle after) {
  download(host_dst, device_src, bytes, after);
  return nullptr;
}

replay_device::copy_handle replay_device::copy_to_device(void* device_dst, const void* host_src, std::size_t bytes,
                                                         device::stream_handle after) {
  upload(device_dst, host_src, bytes, after);
  return nullptr;
}

replay_device::link_figures replay_device::link() {
  link_figures f;
  f.source = "synchronous";
  return f;
}

// ---- the host budget ------------------------------------------------------------------------
//
// Note [Host budget]
// Rationale: SUBLINEAR_HOST_BUDGET is the user's bound on the host memory sublinear keeps
//   for copies (pinned on CUDA, taken from what the OS lets a process lock); a bound one
//   kind of copy ignores is no bound.
// Approach: three kinds hold host memory: the plan's pool (made once per plan; the device
//   keeps the largest), the copies of recipe inputs kept at releases (Note [Unseen
//   writes]; a block per buffer, kept across iterations) and the blocks offloaded while
//   tracing (Note [Offloading the traced iteration]). host_held() is their sum, and no
//   new block is taken that would put it past host_budget(). The planner's pool may take
//   all but the traced offloads; input copies that leave a new pool no room are given
//   back at the plan (made again as room allows). An input copy with no room is not made:
//   an unseen write to that input before its replay is then caught (the run stops with
//   the remedy), not undone (uncopied_bytes, one warning). A traced offload with no room
//   skips the block; with nothing offloadable the iteration runs unbudgeted, as when
//   nothing could go. Each iteration reports the most held at once (host_held_bytes).
// Limitations: SUBLINEAR_VALIDATE=always's copies of every evicted buffer (a diagnostic
//   mode) and the CUDA link's few probe buffers are outside it; memory the host refuses
//   below the budget is met as no room. Without SUBLINEAR_HOST_BUDGET and with the host's
//   size unknown, nothing is bounded.

std::size_t engine::impl::host_budget() const {
  if (opts.config.host_budget > 0) return opts.config.host_budget;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 2 : 0;
}

std::size_t engine::impl::host_held() const { return host_pool_made + host_copies.held() + traced_offload_bytes; }

std::size_t engine::impl::host_room(std::size_t besides) const {
  const std::size_t budget = host_budget();
  if (budget == 0) return SIZE_MAX;
  const std::size_t others = host_held() - besides;
  return budget > others ? budget - others : 0;
}

void engine::impl::note_host_held() { current.host_held_bytes = std::max(current.host_held_bytes, host_held()); }

// ---- the plan's offloads, by position -----------------------------------------------------

void engine::impl::index_offloads() {
  const auto& g = graph();
  const std::size_t n = g.launches.size();
  copy_out_after.assign(n + 1, {});
  release_by.assign(n + 1, {});
  fetch_at.assign(n + 1, {});
  needed_at.assign(n + 1, {});
  offload_of.assign(g.buffers.size(), -1);
  for (std::size_t i = 0; i < plan.offloads.size(); ++i) {
    const policy::offload& o = plan.offloads[i];
    const bool ordered = o.target < g.buffers.size() && o.evict_after < o.release_before &&
                         o.release_before <= o.fetch_after + 1 && o.fetch_after < o.restore_before &&
                         o.restore_before <= n;
    if (!ordered || offload_of[o.target] >= 0 || entry_of[o.target] >= 0)
      throw error("sublinear: plan '" + plan.planner + "' has a malformed offload #" + std::to_string(i) +
                  " (buffer " + std::to_string(o.target) + ": its points must satisfy evict_after < release_before <= "
                  "fetch_after + 1 <= restore_before, and a buffer is the target of one eviction or offload)");
    offload_of[o.target] = static_cast<std::int32_t>(i);
    buffer_evictable[o.target] = 1;
    copy_out_after[o.evict_after].push_back(i);
    release_by[o.release_before].push_back(i);
    fetch_at[std::min<std::size_t>(o.fetch_after + 1, n)].push_back(i);
    needed_at[o.restore_before].push_back(i);
  }
  // An offloaded pack's members ride on its first member's copies (Note [Offload packs]).
  policy::link_copies moved = policy::copies_of(g, plan);
  // Each copy stream is a FIFO: the copies queued at one launch go in the order the
  // simulator gives them (Note [Link timeline]): deadline first, then plan order. A pack's
  // riders, whose bytes the simulator moves in their carrier's copy wherever the plan
  // lists them, go right after it, so the carrier's copy takes them in any plan order.
  const auto by_deadline = [&](std::vector<std::size_t>& at, auto deadline) {
    const auto key = [&](std::size_t j) {
      return std::make_tuple(deadline(plan.offloads[j]), moved.carrier[j], j != moved.carrier[j], j);
    };
    std::sort(at.begin(), at.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  };
  for (auto& at : copy_out_after) by_deadline(at, [](const policy::offload& o) { return o.release_before; });
  for (auto& at : fetch_at) by_deadline(at, [](const policy::offload& o) { return o.restore_before; });
  // The slots as the simulator laid them out for host_bytes (Note [Host pool layout]).
  policy::host_layout layout = policy::lay_out_host_pool(g, plan);
  host_offset = std::move(layout.offsets);
  host_pool_bytes = layout.pool_bytes;
  copy_bytes = std::move(moved.bytes);
  copy_offset = std::move(moved.offset);
  riders.assign(plan.offloads.size(), {});
  for (std::size_t i = 0; i < plan.offloads.size(); ++i)
    if (moved.carrier[i] != i) riders[moved.carrier[i]].push_back(i);
}

void engine::impl::begin_offloads() {
  swap.assign(plan.offloads.size(), swap_state::resident);
  swap_copy.assign(plan.offloads.size(), nullptr);
  swap_note.assign(plan.offloads.size(), SIZE_MAX);
  copying_out.clear();
  swapped_ranges.clear();
  shared_copies.clear();
  if (!plan.offloads.empty()) link_at_begin = dev.link();
}

// End of an iteration: every copy has arrived (the program has synchronized), the link's
// figures for the iteration are taken.
void engine::impl::finish_offloads() {
  // A buffer the iteration hands on (restore_before is its end) comes back now.
  for (std::size_t i = 0; i < swap.size(); ++i) {
    const buffer_id b = plan.offloads[i].target;
    if (swap[i] == swap_state::on_host && addr[b] != nullptr && !freed[b]) fetch(i, nullptr);
    if (swap[i] == swap_state::resident || swap_copy[i] == nullptr) continue;
    dev.wait_copy(swap_copy[i]);
    end_swap_note(i);
    swap[i] = swap_state::resident;  // fetched, or a copy out abandoned with its pages still mapped
  }
  for (std::size_t i = 0; i < swap_copy.size(); ++i) {
    if (swap_copy[i] == nullptr) continue;
    dev.wait_copy(swap_copy[i]);
    release_copy_of(i);
  }
  copying_out.clear();
  swapped_ranges.clear();
  if (plan.offloads.empty()) return;
  const replay_device::link_figures now = dev.link();
  current.link_busy_s = now.busy_s - link_at_begin.busy_s;
  current.copy_stall_s = now.stall_s - link_at_begin.stall_s;
}

void engine::impl::begin_swap_note(std::size_t i, timeline_event::kind what) {
  const buffer_id b = plan.offloads[i].target;
  const std::size_t before = timeline.size();
  note_block(what, dev.now_s(), addr[b], graph().buffers[b].size, record_for(b).producer);
  swap_note[i] = timeline.size() > before ? before : SIZE_MAX;
}

void engine::impl::end_swap_note(std::size_t i) {
  if (swap_note[i] < timeline.size()) timeline[swap_note[i]].end_s = dev.now_s() - started_s;
  swap_note[i] = SIZE_MAX;
}

// ---- copies out ----------------------------------------------------------------------------

void engine::impl::release_copy_of(std::size_t i) {
  replay_device::copy_handle h = swap_copy[i];
  swap_copy[i] = nullptr;
  if (h == nullptr) return;
  if (auto it = shared_copies.find(h); it != shared_copies.end()) {
    if (--it->second > 0) return;  // a pack's other members still hold it
    shared_copies.erase(it);
  }
  dev.release_copy(h);
}

// The members of carrier c's pack in the pack's order, in runs of adjacent members for
// which `in_place` holds: each run with its bytes' offset and length in the pack. All of
// them in place: one run of the copy's planned bytes (policy::copies_of).
std::vector<engine::impl::pack_run> engine::impl::pack_runs(std::size_t c,
                                                            const std::function<bool(std::size_t)>& in_place) const {
  std::vector<std::size_t> members{c};
  members.insert(members.end(), riders[c].begin(), riders[c].end());
  std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) { return copy_offset[a] < copy_offset[b]; });
  std::vector<pack_run> runs;
  for (std::size_t k = 0; k < members.size();) {
    if (!in_place(members[k])) {
      ++k;
      continue;
    }
    std::size_t j = k;
    while (j < members.size() && in_place(members[j])) ++j;
    const std::size_t last = members[j - 1];
    pack_run run;
    run.members.assign(members.begin() + static_cast<std::ptrdiff_t>(k), members.begin() + static_cast<std::ptrdiff_t>(j));
    run.offset = copy_offset[members[k]];
    run.bytes = copy_offset[last] + graph().buffers[plan.offloads[last].target].size - run.offset;
    runs.push_back(std::move(run));
    k = j;
  }
  if (runs.size() == 1 && runs.front().members.size() == members.size()) runs.front().bytes = copy_bytes[c];
  return runs;
}

// An offloaded pack's copy out: one for all its members when all are resident where the
// plan put them. Where some are not (the allocator placed a member on pages of its own,
// Note [Pack segments], or one is not resident), each run of members that are, in the
// pack's order, moves in one copy, and the others copy on their own. False (the carrier's
// own copy not started) leaves the carrier to copy itself.
bool engine::impl::start_pack_offload(std::size_t c, device::stream_handle stream) {
  const buffer_id b0 = plan.offloads[c].target;
  const auto ready = [&](std::size_t i) {
    const buffer_id b = plan.offloads[i].target;
    return addr[b] != nullptr && !freed[b] && !evicted[b] && !kept_resident[b] && swap[i] == swap_state::resident &&
           addr[b] == addr[b0] + copy_offset[i];
  };
  if (host_pool == nullptr || !ready(c)) return false;
  bool carrier_started = false, done = false;
  for (const pack_run& run : pack_runs(c, ready)) {
    replay_device::copy_handle h = nullptr;
    try {
      h = dev.copy_to_host(host_pool + host_offset[c] + run.offset, addr[b0] + run.offset, run.bytes, stream);
    } catch (const std::exception&) {
      continue;  // each member of this run on its own, with its own fallbacks
    }
    if (h != nullptr) shared_copies[h] = run.members.size();
    current.offloaded_bytes += run.bytes;
    ++current.link_copies;
    for (std::size_t i : run.members) {
      swap[i] = swap_state::copying_out;
      swap_copy[i] = h;
      copying_out.push_back(i);
      swapped_ranges[addr[plan.offloads[i].target]] = i;
      ++current.offloads;
      begin_swap_note(i, timeline_event::kind::offload);
      carrier_started = carrier_started || i == c;
    }
    done = done || dev.copy_done(h);
  }
  if (done) poll_offloads();
  return carrier_started;
}

void engine::impl::start_offload(std::size_t i, device::stream_handle stream) {
  if (!riders[i].empty() && start_pack_offload(i, stream)) return;
  const buffer_id b = plan.offloads[i].target;
  if (addr[b] == nullptr || freed[b] || evicted[b] || kept_resident[b] || swap[i] != swap_state::resident ||
      host_pool == nullptr)
    return;
  const std::size_t size = graph().buffers[b].size;
  replay_device::copy_handle c = nullptr;
  try {
    c = dev.copy_to_host(host_pool + host_offset[i], addr[b], size, stream);
  } catch (const std::exception& e) {
    // The plan's memory still holds: the bytes go synchronously (the host waits for the
    // stream), and only if that fails too does the buffer stay resident.
    ++current.failed_copies;
    try {
      dev.download(host_pool + host_offset[i], addr[b], size, stream);
    } catch (const std::exception& again) {
      log_warn("iteration " + std::to_string(iteration_index) + ": copying buffer #" +
               std::to_string(graph().buffers[b].alloc_index) + " (" + format_bytes(size) +
               ") to host memory failed (" + e.what() + ", then " + again.what() + "); it stays resident this iteration");
      return;
    }
    log_warn("iteration " + std::to_string(iteration_index) + ": the copy of buffer #" +
             std::to_string(graph().buffers[b].alloc_index) + " (" + format_bytes(size) + ") to host memory failed (" +
             e.what() + "); copied it synchronously");
    c = nullptr;
  }
  swap[i] = swap_state::copying_out;
  swap_copy[i] = c;
  ++current.link_copies;
  copying_out.push_back(i);
  swapped_ranges[addr[b]] = i;
  ++current.offloads;
  current.offloaded_bytes += size;
  begin_swap_note(i, timeline_event::kind::offload);
  if (dev.copy_done(c)) {
    copying_out.pop_back();
    release_offloaded(i);
  }
}

// Its bytes are on the host: the pages go (Note [Deferred unmap] covers the streams).
void engine::impl::release_offloaded(std::size_t i) {
  const buffer_id b = plan.offloads[i].target;
  release_copy_of(i);
  end_swap_note(i);
  alloc.evict(addr[b]);
  evicted[b] = 1;
  swap[i] = swap_state::on_host;
}

void engine::impl::poll_offloads() {
  for (std::size_t k = 0; k < copying_out.size();) {
    const std::size_t i = copying_out[k];
    if (swap[i] == swap_state::copying_out && dev.copy_done(swap_copy[i])) {
      release_offloaded(i);
    } else if (swap[i] == swap_state::copying_out) {
      ++k;
      continue;
    }
    copying_out.erase(copying_out.begin() + static_cast<std::ptrdiff_t>(k));
  }
}

// ---- copies in -----------------------------------------------------------------------------

// An offloaded pack's copy back: one for all its members when all are on the host and in
// place. Where some are not (brought back early on their own, or placed apart), each run
// of members that are, in the pack's order, moves in one copy; the others stay as they
// are. False (the carrier itself not on the host in place) leaves each member to fetch
// itself.
bool engine::impl::fetch_pack(std::size_t c, device::stream_handle stream) {
  const buffer_id b0 = plan.offloads[c].target;
  const auto away = [&](std::size_t i) {
    const buffer_id b = plan.offloads[i].target;
    return swap[i] == swap_state::on_host && !freed[b] && addr[b] == addr[b0] + copy_offset[i];
  };
  if (!away(c)) return false;
  for (const pack_run& run : pack_runs(c, away)) fetch_run(c, run.members, run.offset, run.bytes, stream);
  return true;
}

// One copy back for `members` of carrier c's pack: `bytes` from `offset` into the pack.
void engine::impl::fetch_run(std::size_t c, const std::vector<std::size_t>& members, std::size_t offset,
                             std::size_t bytes, device::stream_handle stream) {
  std::size_t restored = 0;
  try {
    for (; restored < members.size(); ++restored) alloc.restore(addr[plan.offloads[members[restored]].target]);
  } catch (...) {
    // out_of_memory propagates as for recipes, with these members still on the host.
    for (std::size_t k = 0; k < restored; ++k) alloc.evict(addr[plan.offloads[members[k]].target]);
    throw;
  }
  for (std::size_t i : members) {
    evicted[plan.offloads[i].target] = 0;
    ++current.fetches;
    begin_swap_note(i, timeline_event::kind::fetch);
  }
  current.fetched_bytes += bytes;
  ++current.link_copies;
  char* device_at = addr[plan.offloads[c].target] + offset;
  const std::byte* host_at = host_pool + host_offset[c] + offset;
  replay_device::copy_handle h = nullptr;
  try {
    h = dev.copy_to_device(device_at, host_at, bytes, stream);
  } catch (const std::exception& e) {
    ++current.failed_copies;
    log_warn("iteration " + std::to_string(iteration_index) + ": the copy of a pack of " +
             std::to_string(members.size()) + " buffers back to the device failed (" + e.what() +
             "); copying it synchronously");
    dev.upload(device_at, host_at, bytes, stream);
    for (std::size_t i : members) {
      end_swap_note(i);
      swap[i] = swap_state::resident;
      swapped_ranges.erase(addr[plan.offloads[i].target]);
    }
    return;
  }
  if (h != nullptr) shared_copies[h] = members.size();
  for (std::size_t i : members) swap[i] = swap_state::fetching, swap_copy[i] = h;
}

// Maps the pages again and queues the copy back behind `stream`'s work.
void engine::impl::fetch(std::size_t i, device::stream_handle stream) {
  if (swap[i] != swap_state::on_host) return;
  if (!riders[i].empty() && fetch_pack(i, stream)) return;
  const buffer_id b = plan.offloads[i].target;
  if (freed[b]) return;
  const std::size_t size = graph().buffers[b].size;
  alloc.restore(addr[b]);  // may relieve pressure; out_of_memory propagates as for recipes
  evicted[b] = 0;
  ++current.fetches;
  current.fetched_bytes += size;
  ++current.link_copies;
  begin_swap_note(i, timeline_event::kind::fetch);
  try {
    swap_copy[i] = dev.copy_to_device(addr[b], host_pool + host_offset[i], size, stream);
    swap[i] = swap_state::fetching;
  } catch (const std::exception& e) {
    ++current.failed_copies;
    log_warn("iteration " + std::to_string(iteration_index) + ": the copy of buffer #" +
             std::to_string(graph().buffers[b].alloc_index) + " back to the device failed (" + e.what() +
             "); copying it synchronously");
    dev.upload(addr[b], host_pool + host_offset[i], size, stream);
    swap[i] = swap_state::resident;
    swapped_ranges.erase(addr[b]);
  }
}

// After this, work queued on `stream` sees the buffer's bytes.
void engine::impl::bring_in(std::size_t i, device::stream_handle stream) {
  const buffer_id b = plan.offloads[i].target;
  if (swap[i] == swap_state::resident) return;
  if (swap[i] == swap_state::copying_out) {
    // Still resident: the copy out is abandoned (its event is given back pending).
    release_copy_of(i);
    swap[i] = swap_state::resident;
    swapped_ranges.erase(addr[b]);
    return;
  }
  if (swap[i] == swap_state::on_host) fetch(i, stream);
  if (swap[i] != swap_state::fetching) return;
  dev.stream_wait_copy(stream, swap_copy[i]);
  end_swap_note(i);
  release_copy_of(i);
  swap[i] = swap_state::resident;
  swapped_ranges.erase(addr[b]);
}

// The offloads not back whose bytes `recipe` reads: a buffer it reads at its first touch
// (a block the first touching launch writes first since its allocation starts as empty
// scratch, Note [Recipe scratch]; policy::reads_on_entry is the planner's side).
std::vector<std::size_t> engine::impl::offloads_a_recipe_reads(const std::vector<launch_id>& recipe) const {
  std::vector<std::size_t> out;
  if (swapped_ranges.empty()) return out;
  std::vector<buffer_id> seen;
  for (launch_id l : recipe) {
    for (buffer_id u : graph().launches[l].touched) {
      const std::int32_t i = offload_of[u];
      if (i < 0 || (swap[i] != swap_state::on_host && swap[i] != swap_state::fetching)) continue;
      if (std::find(seen.begin(), seen.end(), u) != seen.end()) continue;
      seen.push_back(u);
      if (reads(l, u)) out.push_back(static_cast<std::size_t>(i));
    }
  }
  return out;
}

bool engine::impl::reads_offload_not_back(const std::vector<launch_id>& recipe) const {
  return !offloads_a_recipe_reads(recipe).empty();
}

void engine::impl::bring_in_recipe_inputs(const std::vector<launch_id>& recipe, device::stream_handle stream) {
  for (std::size_t i : offloads_a_recipe_reads(recipe)) {
    if (swap[i] != swap_state::on_host && swap[i] != swap_state::fetching) continue;  // came back with a pack
    ++current.safety_fetches;
    bring_in(i, stream);
  }
}

// At the ENTER of launch `pos`: releases, fetches and waits the plan puts here.
void engine::impl::offloads_before(device::stream_handle stream) {
  if (plan.offloads.empty() || pos >= release_by.size()) return;
  poll_offloads();
  for (std::size_t i : release_by[pos]) {
    if (swap[i] != swap_state::copying_out) continue;
    const double t0 = dev.now_s();
    dev.wait_copy(swap_copy[i]);
    current.release_wait_s += dev.now_s() - t0;
    copying_out.erase(std::find(copying_out.begin(), copying_out.end(), i));
    release_offloaded(i);
  }
  for (std::size_t i : fetch_at[pos]) fetch(i, stream);
}

// After the recipes restoring at this launch: its stream waits for the fetches it needs.
void engine::impl::fetches_needed(device::stream_handle stream) {
  if (plan.offloads.empty() || pos >= needed_at.size()) return;
  for (std::size_t i : needed_at[pos]) bring_in(i, stream);
}

// The pressure valve's share (Note [Pressure valve]): a copy out still running is waited
// for and its pages released before their planned point; a fetch not yet needed is waited
// for and its pages given back again (its bytes are still on the host, unchanged), to be
// fetched once more at its restore point. Never the launch entering now's buffers.
// Returns the bytes asked to evict.
std::size_t engine::impl::offload_under_pressure(std::size_t shortfall) {
  if (plan.offloads.empty() || swap.empty()) return 0;
  const std::size_t gran = alloc.granularity();
  std::size_t asked = 0;
  std::size_t buffers = 0;  // released or given back, each counted as a pressure eviction
  const auto pages = [&](buffer_id b) { return (graph().buffers[b].size + gran - 1) / gran * gran; };
  for (std::size_t k = 0; k < copying_out.size() && asked < shortfall;) {
    const std::size_t i = copying_out[k];
    if (swap[i] != swap_state::copying_out) {
      ++k;
      continue;
    }
    const double t0 = dev.now_s();
    const replay_device::copy_handle h = swap_copy[i];
    dev.wait_copy(h);
    current.release_wait_s += dev.now_s() - t0;
    copying_out.erase(copying_out.begin() + static_cast<std::ptrdiff_t>(k));
    release_offloaded(i);
    ++buffers;
    asked += pages(plan.offloads[i].target);
    // A pack's pages go only with all its members: the others that rode on the copy too.
    for (std::size_t j = 0; h != nullptr && j < copying_out.size();) {
      const std::size_t r = copying_out[j];
      if (swap[r] != swap_state::copying_out || swap_copy[r] != h) {
        ++j;
        continue;
      }
      copying_out.erase(copying_out.begin() + static_cast<std::ptrdiff_t>(j));
      release_offloaded(r);
      ++buffers;
      if (j < k) --k;
    }
  }
  const auto may_give_back = [&](std::size_t i) {
    const policy::offload& o = plan.offloads[i];
    return swap[i] == swap_state::fetching && o.restore_before > pos && pins[o.target] == 0;
  };
  for (std::size_t i = 0; i < swap.size() && asked < shortfall; ++i) {
    if (!may_give_back(i)) continue;
    // A pack fetched in one copy is given back whole, or not at all (its pages go only
    // with every member).
    std::vector<std::size_t> group{i};
    const replay_device::copy_handle h = swap_copy[i];
    if (h != nullptr && shared_copies.count(h) != 0) {
      for (std::size_t j = 0; j < swap.size(); ++j)
        if (j != i && swap[j] == swap_state::fetching && swap_copy[j] == h) group.push_back(j);
      if (!std::all_of(group.begin(), group.end(), may_give_back)) continue;
    }
    dev.wait_copy(h);
    for (std::size_t j : group) {
      const policy::offload& o = plan.offloads[j];
      end_swap_note(j);
      release_copy_of(j);
      alloc.evict(addr[o.target]);
      evicted[o.target] = 1;
      swap[j] = swap_state::on_host;
    }
    buffers += group.size();
    asked += pages(plan.offloads[i].target);
  }
  current.pressure_evictions += buffers;
  return asked;
}

// The safety net for offloaded buffers (Note [Offload execution]; the trace rule of Note
// [Stray pointer words]).
void engine::impl::fetch_touched(const launch_view& op) {
  if (swapped_ranges.empty()) return;
  const bool follow_trace = !diverged && pos < graph().launches.size() && op.what == launch_view::kind::kernel;
  auto hit = [&](std::uint64_t word, std::size_t offset) {
    auto p = reinterpret_cast<const char*>(word);
    auto it = swapped_ranges.upper_bound(p);
    if (it == swapped_ranges.begin()) return;
    --it;
    const std::size_t i = it->second;
    const buffer_id b = plan.offloads[i].target;
    if (p >= it->first + graph().buffers[b].size) return;
    if (follow_trace && !traced_touch(pos, offset, b)) {
      if (offset % 8 == 0) ++current.stray_pointers;
      return;
    }
    if (swap[i] == swap_state::on_host || swap[i] == swap_state::fetching) ++current.safety_fetches;
    bring_in(i, op.stream);
  };
  if (op.what == launch_view::kind::kernel) {
    for (std::size_t off = 0; off + 8 <= op.params.size() && !swapped_ranges.empty(); ++off) {
      std::uint64_t word = 0;
      std::memcpy(&word, op.params.data() + off, 8);
      hit(word, off);
    }
  } else {
    // A copy's or set's range may start inside the buffer or cover it.
    const auto dst = reinterpret_cast<std::uintptr_t>(op.dst);
    std::vector<std::size_t> inside;
    auto collect = [&](std::uintptr_t from, std::size_t bytes) {
      for (const auto& [base, i] : swapped_ranges) {
        const auto at = reinterpret_cast<std::uintptr_t>(base);
        if (at < from + std::max<std::size_t>(bytes, 1) && from < at + graph().buffers[plan.offloads[i].target].size)
          inside.push_back(i);
      }
    };
    collect(dst, op.bytes);
    if (op.src != nullptr) collect(reinterpret_cast<std::uintptr_t>(op.src), op.bytes);
    for (std::size_t i : inside) {
      if (swap[i] == swap_state::on_host || swap[i] == swap_state::fetching) ++current.safety_fetches;
      bring_in(i, op.stream);
    }
  }
}

// A divergence: every offloaded buffer comes back before the launch that diverged.
void engine::impl::fetch_everything(device::stream_handle stream) {
  for (std::size_t i = 0; i < swap.size(); ++i) bring_in(i, stream);
}

void engine::impl::bring_in_all_but_on_host(device::stream_handle stream) {
  for (std::size_t i = 0; i < swap.size(); ++i)
    if (swap[i] != swap_state::on_host) bring_in(i, stream);
}

// The program frees `b`: no copy of it may still run into or out of its pages.
void engine::impl::drop_offload(buffer_id b) {
  if (b >= offload_of.size() || offload_of[b] < 0 || swap.empty()) return;
  const auto i = static_cast<std::size_t>(offload_of[b]);
  if (swap_copy[i] != nullptr) {
    dev.wait_copy(swap_copy[i]);
    release_copy_of(i);
  }
  if (auto it = std::find(copying_out.begin(), copying_out.end(), i); it != copying_out.end()) copying_out.erase(it);
  if (addr[b] != nullptr) swapped_ranges.erase(addr[b]);
  swap[i] = swap_state::resident;
}

}  // namespace sublinear::runtime

namespace sublinear::runtime {

engine::plan_link engine::planned_link() const {
  std::lock_guard lock(impl_->mutex);
  const auto& m = *impl_;
  plan_link out;
  const replay_device::link_figures l =
      m.opts.config.offload == policy::offload_mode::off ? replay_device::link_figures{} : m.dev.link();
  out.to_host_bytes_per_s = m.opts.config.link_to_host > 0.0 ? m.opts.config.link_to_host : l.to_host_bytes_per_s;
  out.to_device_bytes_per_s = m.opts.config.link_to_device > 0.0 ? m.opts.config.link_to_device : l.to_device_bytes_per_s;
  out.source = m.opts.config.link_to_host > 0.0 ? "SUBLINEAR_LINK_BANDWIDTH" : l.source;
  out.refused = m.offload_refused;
  if (!m.have_plan) return out;
  out.offloads = m.plan.offloads.size();
  out.offloaded_bytes = m.plan.offloaded_bytes;
  if (out.offloaded_bytes == 0)
    for (const auto& o : m.plan.offloads) out.offloaded_bytes += m.graph().buffers[o.target].size;
  out.host_bytes = m.host_pool_bytes;
  out.link_busy_s = m.plan.link_busy_s;
  out.predicted_stall_s = m.plan.predicted_stall_s;
  out.predicted_device_s = m.plan.predicted_time_s;
  return out;
}

}  // namespace sublinear::runtime
