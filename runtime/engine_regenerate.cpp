// Eviction and regeneration: planned evictions after their launch, recipes replayed
// before the launch that needs their targets (and ahead of it, when there is room), the
// ENTER safety net, and the validation of what a recipe regenerated.
//
// Note [Replay at the launch]
// Evictions happen right after the launch at `evict_after` is issued: the allocator
// records an event on the block's streams and unmaps once it has completed (Note
// [Deferred unmap]). Regeneration happens at launch ENTER of `restore_before`, and, as a
// safety net, at the ENTER of any launch whose parameters point into an evicted block: the
// pages are mapped again at the same address and the recipe's launches are queued on the
// entering launch's stream before it, with the parameter bytes they had in this iteration.
// Temporaries get scratch blocks at other addresses and the parameter words pointing at
// them are rewritten. Launches the engine queues itself are not intercepted again.
#include "common/text.hpp"
#include "runtime/detail/engine_impl.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace sublinear::runtime {

namespace {

using policy::buffer_id;
using policy::launch_id;
using policy::none;

// Rewrites pointer words of `op` that point into a temporary's range to its scratch: the
// aligned words, and unaligned ones where the traced launch held such a pointer
// (`traced`, Note [Pointer scan]).
void patch(launch_view& op, std::vector<std::byte>& params,
           const std::vector<std::pair<std::pair<const char*, std::size_t>, char*>>& moves,
           const std::vector<tracer::touch>& traced) {
  auto moved = [&](std::uint64_t word, std::uint64_t* out) {
    for (const auto& [range, scratch] : moves) {
      auto base = reinterpret_cast<std::uint64_t>(range.first);
      if (word >= base && word < base + range.second) {
        *out = reinterpret_cast<std::uint64_t>(scratch) + (word - base);
        return true;
      }
    }
    return false;
  };
  if (moves.empty()) return;
  if (op.what == launch_view::kind::kernel) {
    for (std::size_t off = 0; off + 8 <= params.size(); off += 8) {
      std::uint64_t word = 0, to = 0;
      std::memcpy(&word, params.data() + off, 8);
      if (moved(word, &to)) std::memcpy(params.data() + off, &to, 8);
    }
    for (const tracer::touch& t : traced) {
      if (t.param_offset % 8 == 0 || t.param_offset + 8 > params.size()) continue;
      std::uint64_t word = 0, to = 0;
      std::memcpy(&word, params.data() + t.param_offset, 8);
      if (moved(word, &to)) std::memcpy(params.data() + t.param_offset, &to, 8);
    }
    op.params = params;
  } else {
    std::uint64_t to = 0;
    if (moved(reinterpret_cast<std::uint64_t>(op.dst), &to)) op.dst = reinterpret_cast<void*>(to);
    if (op.src != nullptr && moved(reinterpret_cast<std::uint64_t>(op.src), &to))
      op.src = reinterpret_cast<const void*>(to);
  }
}

// Keeps the buffers a regeneration needs out of the pressure valve's reach.
struct pin_scope {
  std::vector<std::uint32_t>& pins;
  std::vector<buffer_id> held;
  pin_scope(std::vector<std::uint32_t>& p, const policy::iteration& g, const policy::eviction& e) : pins(p) {
    held.push_back(e.target);
    held.insert(held.end(), e.also_regenerates.begin(), e.also_regenerates.end());
    for (launch_id l : e.recipe) held.insert(held.end(), g.launches[l].touched.begin(), g.launches[l].touched.end());
    for (buffer_id b : held) ++pins[b];
  }
  ~pin_scope() {
    for (buffer_id b : held) --pins[b];
  }
  pin_scope(const pin_scope&) = delete;
  pin_scope& operator=(const pin_scope&) = delete;
};

}  // namespace

void engine::impl::evict(std::size_t entry_index, device::stream_handle stream) {
  evict_buffer(plan.evictions[entry_index].target, entry_index, stream, true);
}

// `planned`: at the plan's evict point (validation keeps a copy); otherwise the valve's.
// False: not evicted (Note [Unseen writes]: it is kept when a write the trace did not see
// changed it, or what its recipe reads), or not yet (Note [Unsettled releases]).
bool engine::impl::evict_buffer(buffer_id b, std::size_t entry_index, device::stream_handle stream, bool planned) {
  if (addr[b] == nullptr || freed[b] || evicted[b] || kept_resident[b] || releasing[b]) return false;
  const std::size_t size = graph().buffers[b].size;
  unsettled_release check;
  const auto verdict =
      start_release_check(b, entry_index, static_cast<std::uint32_t>(planned ? 2 * pos + 1 : 2 * pos), stream, check);
  if (verdict == release_verdict::keep) return false;
  keep_input_copies(b, entry_index, planned, stream);  // Note [Unseen writes]
  if (planned && st == engine_state::validate) {
    auto& copy = backups[b];
    copy.resize(size);
    dev.download(copy.data(), addr[b], size, stream);
  }
  if (verdict == release_verdict::unsettled) {
    if (planned && (!unsettled.empty() || !settled(check))) {
      releasing[b] = 1;
      unsettled.push_back(std::move(check));
      return false;
    }
    if (!settled(check)) ++current.settle_waits;  // the valve needs the pages now
    if (!finish_release_check(check)) return false;
  }
  complete_eviction(b, entry_index);
  return true;
}

// The pages of `b`, released by plan entry `entry_index`, go once its last uses complete.
void engine::impl::complete_eviction(buffer_id b, std::size_t entry_index) {
  const std::size_t size = graph().buffers[b].size;
  if (opts.config.log >= log_level::debug)
    log_debug("iteration " + std::to_string(iteration_index) + ": evict buffer " + std::to_string(b) + " at " +
              std::to_string(reinterpret_cast<std::uintptr_t>(addr[b])) + " after launch " + std::to_string(pos));
  alloc.evict(addr[b]);
  evicted[b] = 1;
  active_entry[b] = static_cast<std::int32_t>(entry_index);
  evicted_ranges[addr[b]] = b;
  ++current.evictions;
  current.evicted_bytes += size;
  auto& r = record_for(b);
  ++r.times_evicted;
  note_block(timeline_event::kind::evict, dev.now_s(), addr[b], size, r.producer);
}

// Note [Failed recipe]
// A recipe can fail where it runs: the device refuses a replayed launch (on an H200 one
// of PyTorch's ResNet-50 kernels was refused with CUDA_ERROR_INVALID_VALUE, and the
// program saw CUDNN_STATUS_BAD_PARAM), an input changed since the original launch, or
// two recipes need each other's targets. While validating, every buffer evicted at a
// planned point has a copy of its bytes: the targets get them back, count as validation
// mismatches (never evicted again), a refused kernel is left out of every later plan,
// and the iteration goes on. Steady iterations run the recipes validation ran, so they
// meet the same failures only if something changed; without a copy the bytes are gone
// and the error says so. Out of memory is not a failed recipe: it propagates (the valve
// has already tried).
//
// Maps the entry's buffers back and replays its recipe on `stream`.
void engine::impl::regenerate(std::size_t entry_index, device::stream_handle stream, int depth, bool prefetch) {
  const auto& e = plan.evictions[entry_index];
  std::vector<buffer_id> pending;  // targets evicted now: what a failure must give back
  if (!freed[e.target] && evicted[e.target]) pending.push_back(e.target);
  for (buffer_id b : e.also_regenerates)
    if (!freed[b] && evicted[b]) pending.push_back(b);
  if (pending.empty()) return;
  try {
    regenerate_now(entry_index, stream, depth, prefetch);
  } catch (const out_of_memory&) {
    throw;
  } catch (const std::exception& failure) {
    if (recover_failed_recipe(pending, failure.what(), stream)) return;
    if (depth > 0) throw;  // the outermost recipe says it once
    throw error(std::string(failure.what()) +
                "; no copy of the evicted bytes was kept (SUBLINEAR_VALIDATE=first or always catches this in the "
                "first planned iteration, while copies exist)");
  }
}

bool engine::impl::recover_failed_recipe(const std::vector<buffer_id>& pending, const std::string& why,
                                         device::stream_handle stream) {
  for (buffer_id b : pending)
    if (backups.find(b) == backups.end()) return false;
  for (buffer_id b : pending) {
    if (evicted[b]) {
      try {
        alloc.restore(addr[b], stream);
      } catch (const std::exception&) {
        return false;
      }
      evicted[b] = 0;
      evicted_ranges.erase(addr[b]);
    }
    auto it = backups.find(b);
    dev.upload(addr[b], it->second.data(), it->second.size(), stream);
    ++engine_writes[b];
    backups.erase(it);
    ++current.validation_mismatches;
    const auto alloc_index = graph().buffers[b].alloc_index;
    never_evict_allocs.insert(alloc_index);
    record_for(b).never_evict = true;
    log_warn("validation: regenerating buffer #" + std::to_string(alloc_index) + " (" +
             format_bytes(graph().buffers[b].size) + ") failed (" + why +
             "); its bytes were restored from the validation copy and it will not be evicted again");
  }
  return true;
}

// Note [Recipe prefix]: a recipe whose later launches this iteration has not issued
// yet runs only the launches it has. That happens when a carrier's own target is still
// to come but buffers it regenerates on the way were evicted already, and the run
// diverges (restore everything) or a launch touches one of them (the safety net) before
// the target's restore point. Every write an evicted buffer got before its eviction was
// issued, so the launches seen so far bring it back as it was; what comes later had not
// happened yet either. A target evicted now that no seen launch writes cannot be
// regenerated, and the replay says so.
std::vector<launch_id> engine::impl::runnable_recipe(const policy::eviction& e,
                                                     const std::vector<buffer_id>& targets) const {
  std::size_t seen = 0;
  while (seen < e.recipe.size() && saved[e.recipe[seen]].present) ++seen;
  if (seen == e.recipe.size()) return e.recipe;
  const auto& g = graph();
  for (buffer_id b : targets) {
    if (!evicted[b] || freed[b]) continue;
    bool written = false;
    for (std::size_t i = 0; i < seen && !written; ++i) {
      const auto& w = g.launches[e.recipe[i]].written;
      written = std::find(w.begin(), w.end(), b) != w.end();
    }
    if (!written) throw error("sublinear: a recipe launch was not seen in this iteration before it is replayed");
  }
  if (opts.config.log >= log_level::debug)
    log_debug("iteration " + std::to_string(iteration_index) + ": the recipe of buffer " + std::to_string(e.target) +
              " runs the " + std::to_string(seen) + " of its " + std::to_string(e.recipe.size()) +
              " launches issued so far (Note [Recipe prefix])");
  return {e.recipe.begin(), e.recipe.begin() + static_cast<std::ptrdiff_t>(seen)};
}

// Note [Recipe scratch]
// Rationale: a recipe's temporaries (workspaces freed after the original launch, side
//   outputs, inputs rebuilt out of place) were all mapped before its first launch and
//   released after its last, so a recipe through four convolutions held four im2col
//   workspaces at once where the original iteration held one at a time. At tight budgets
//   the peak sits inside such a recipe (ResNet-152: 1.25 MiB of scratch on a 6.4 MiB
//   plan), and what the planner must leave for it is memory it cannot drop.
// Approach: a temporary gets its scratch block just before the first recipe launch that
//   touches it (a live side output that launch reads is copied in then: nothing has
//   changed it since the recipe began) and gives it back, stream-ordered, right after the
//   last one is queued,
//   so a later temporary of the same recipe can reuse it, as the original iteration's
//   allocations did. The simulator counts the same thing (scratch_bytes: the most bytes
//   held at once, by first and last touching recipe launch).
// Limitations: the allocator, not a precomputed layout, places the blocks, so reuse relies
//   on best fit finding the freed block; a block it cannot reuse costs pages the model
//   does not see, which the planning margin and the pressure valve absorb. Out of memory
//   partway through a recipe evicts its regenerated buffers again (their bytes are
//   incomplete) before the error propagates.
void engine::impl::regenerate_now(std::size_t entry_index, device::stream_handle stream, int depth, bool prefetch) {
  const auto& e = plan.evictions[entry_index];
  std::vector<buffer_id> targets{e.target};
  targets.insert(targets.end(), e.also_regenerates.begin(), e.also_regenerates.end());
  if (depth > 64) throw error("sublinear: replay recursion deeper than 64 recipes; the plan is cyclic");
  if (e.recipe.empty()) throw error("sublinear: an evicted buffer has no recipe to regenerate it");
  const auto& g = graph();
  const std::vector<launch_id> recipe = runnable_recipe(e, targets);
  // Inputs whose release is unsettled are evicted first or kept (Note [Unsettled releases]).
  std::size_t settle = 0;
  for (std::size_t k = 0; k < unsettled.size(); ++k)
    for (launch_id l : recipe)
      if (std::binary_search(g.launches[l].touched.begin(), g.launches[l].touched.end(), unsettled[k].buffer))
        settle = k + 1;
  if (settle != 0) settle_releases(settle);
  pin_scope pinned(pins, g, e);
  // Offloaded inputs come back before a recipe reads them; at its restore point the plan
  // has them back already (Note [Offloaded recipe inputs]), elsewhere this waits for them.
  bring_in_recipe_inputs(recipe, stream);
  std::unordered_set<buffer_id> regenerated(targets.begin(), targets.end());
  std::unordered_set<buffer_id> temps(e.temporaries.begin(), e.temporaries.end());
  add_unseen_temporaries(entry_index, targets, temps);  // Note [Unseen writes]
  // While this recipe runs, a recipe it needs first must not need its targets back.
  std::vector<buffer_id> marked;
  for (buffer_id b : targets)
    if (regenerating.insert(b).second) marked.push_back(b);
  struct unmark {
    std::unordered_set<buffer_id>& set;
    const std::vector<buffer_id>& ids;
    ~unmark() {
      for (buffer_id b : ids) set.erase(b);
    }
  } unmark_at_exit{regenerating, marked};
  // Inputs evicted at this moment that the plan expected resident: regenerate them first.
  // A live temporary the recipe reads before writing it needs its bytes too (its scratch
  // starts from them, below), but it is not regenerated here: on the host without write
  // observation that corrupts the Transformer's parameters in a way validation does not
  // catch. Such a recipe fails instead (Note [Failed recipe]). Without
  // write observation every block a launch touches may be written, so a recipe's inputs
  // are temporaries too.
  std::unordered_set<buffer_id> written_so_far;
  for (launch_id l : recipe) {
    for (buffer_id u : g.launches[l].touched) {
      if (regenerated.count(u) || !evicted[u] || freed[u]) continue;
      if (temps.count(u)) {
        if (written_so_far.count(u) || !reads(l, u)) continue;
        throw error("sublinear: the recipe of buffer #" + std::to_string(g.buffers[e.target].alloc_index) +
                    " reads buffer #" + std::to_string(g.buffers[u].alloc_index) +
                    " as a temporary, and that buffer is evicted now: the plan is invalid here");
      }
      if (regenerating.count(u) != 0) {
        throw error("sublinear: the recipe of buffer #" + std::to_string(g.buffers[e.target].alloc_index) +
                    " needs buffer #" + std::to_string(g.buffers[u].alloc_index) +
                    ", which is itself waiting for this recipe (the plan is cyclic here)");
      }
      if (carrier_of(u) < 0) throw error("sublinear: a recipe input was evicted with no way to regenerate it");
      regenerate(static_cast<std::size_t>(carrier_of(u)), stream, depth + 1);
      if (evicted[u]) throw error("sublinear: a recipe input could not be regenerated");
    }
    for (buffer_id w : g.launches[l].written) written_so_far.insert(w);
  }
  // What the recipe's own launches write of each live temporary (check_versions).
  std::unordered_map<buffer_id, std::uint64_t> recipe_writes;
  for (launch_id l : recipe)
    for (buffer_id w : g.launches[l].written)
      if (temps.count(w)) ++recipe_writes[w];
  const double started = dev.now_s();
  if (opts.config.log >= log_level::debug)
    log_debug("iteration " + std::to_string(iteration_index) + ": regenerate buffer " + std::to_string(e.target) +
              " before launch " + std::to_string(pos));
  std::vector<buffer_id> restored;
  std::unordered_map<buffer_id, char*> scratch_of;
  // Scratch for temporaries, at other addresses (Note [Recipe scratch]). Blocks the
  // recipe writes that have been freed since (a regeneration the pressure valve moved
  // later than planned) get scratch too: their addresses may belong to others now.
  for (launch_id l : recipe)
    for (buffer_id w : g.launches[l].written)
      if (freed[w]) temps.insert(w);
  // The last recipe launch that touches each temporary: its scratch goes back to the
  // allocator, stream-ordered, once that launch is queued.
  std::unordered_map<buffer_id, std::size_t> last_use;
  for (std::size_t i = 0; i < recipe.size(); ++i)
    for (buffer_id t : g.launches[recipe[i]].touched)
      if (temps.count(t)) last_use[t] = i;
  auto release_scratch = [&] {
    for (const auto& [t, s] : scratch_of) alloc.deallocate(s);
    scratch_of.clear();
  };
  // Out of memory before the recipe is complete: what was mapped back holds no valid
  // bytes, so it is evicted again (after what is queued) and the state stays consistent
  // for a later attempt.
  auto evict_restored_again = [&] {
    for (buffer_id b : restored) {
      alloc.evict(addr[b]);
      evicted[b] = 1;
      evicted_ranges[addr[b]] = b;
    }
  };
  // Before any page is mapped back: a failure past this point would leave the targets
  // mapped and marked resident with no valid bytes.
  for (launch_id l : recipe)
    if (!saved[l].present) throw error("sublinear: a recipe launch was not seen in this iteration before it is replayed");
  try {
    for (buffer_id b : targets) {
      if (!evicted[b] || freed[b]) continue;
      // The recipe writes the pages on `stream` first (Note [Stream-ordered handoff]).
      alloc.restore(addr[b], stream);
      restored.push_back(b);
      evicted[b] = 0;
      evicted_ranges.erase(addr[b]);
    }
  } catch (...) {
    evict_restored_again();
    throw;
  }
  // Inputs a launch touched since the release are read in scratch (Note [Unseen writes])
  // when they changed.
  isolate_changed_inputs(entry_index, restored, temps, stream);
  std::vector<std::pair<std::pair<const char*, std::size_t>, char*>> moves;
  for (std::size_t i = 0; i < recipe.size(); ++i) {
    const launch_id l = recipe[i];
    saved_op& so = saved[l];  // present: checked above
    try {
      check_versions(l, so, regenerated, temps, recipe_writes);
    } catch (...) {
      release_scratch();
      throw;
    }
    // Only the temporaries this launch touched: a freed workspace's addresses may belong
    // to another buffer by the time a later recipe launch ran.
    moves.clear();
    for (buffer_id t : g.launches[l].touched) {
      if (!temps.count(t)) continue;
      if (addr[t] == nullptr) throw error("sublinear: a recipe temporary has no address in this iteration");
      auto it = scratch_of.find(t);
      if (it == scratch_of.end()) {
        // First use in the recipe: map its scratch now; a live side output this launch
        // reads starts from its contents, which nothing has changed since the recipe
        // began (one it writes first starts empty: policy::reads_on_entry).
        const std::size_t size = g.buffers[t].size;
        char* s = nullptr;
        try {
          s = static_cast<char*>(alloc.allocate(size, stream));
        } catch (...) {
          release_scratch();
          evict_restored_again();
          throw;
        }
        it = scratch_of.emplace(t, s).first;
        if (const auto kept = read_from_copy.find(t); kept != read_from_copy.end()) {
          host_copies.wait(t);  // queued at the release (download_on_stream)
          dev.upload(s, kept->second->bytes, size, stream);  // Note [Unseen writes]
        } else if (!freed[t] && !evicted[t] && reads(l, t)) {
          dev.copy(s, addr[t], size, stream);
        }
      }
      moves.push_back({{addr[t], g.buffers[t].size}, it->second});
    }
    launch_view op = so.view;
    std::vector<std::byte> params = so.params;
    op.params = params;
    patch(op, params, moves, an.touches[l]);
    touch_and_restore(op, stream);  // a block offloaded while tracing that the recipe reads
    try {
      dev.replay(op, stream);
    } catch (const std::exception& failure) {
      release_scratch();
      // Note [Failed recipe]: the kernel stays out of every later plan.
      unreplayable_kernels.insert(kernel_name_of(l));
      throw error("sublinear: replaying " + kernel_name_of(l) + " to regenerate buffer #" +
                  std::to_string(g.buffers[e.target].alloc_index) + " failed: " + failure.what());
    }
    // A retained input is freed later by the engine, on its own stream's order: make that
    // free wait for this replay too when it runs on another stream.
    for (buffer_id u : g.launches[l].touched)
      if (!retain_until.empty() && retain_until[u] != none && !temps.count(u) && addr[u] != nullptr)
        alloc.record_stream(addr[u], stream);
    for (buffer_id u : g.launches[l].touched)
      if (!temps.count(u)) ++engine_writes[u];
    ++current.recomputed_launches;
    current.recompute_s += g.launches[l].cost_s;
    for (buffer_id w : g.launches[l].written) regenerated.insert(w);
    for (buffer_id t : g.launches[l].touched) {
      auto lu = last_use.find(t);
      if (lu == last_use.end() || lu->second != i) continue;
      auto sc = scratch_of.find(t);
      if (sc == scratch_of.end()) continue;
      alloc.deallocate(sc->second);  // stream-ordered: reusable by what is queued after
      scratch_of.erase(sc);
    }
  }
  release_scratch();
  check_replay(restored, stream);
  for (buffer_id b : targets) {
    if (freed[b]) continue;
    auto& r = record_for(b);
    ++r.times_recomputed;
    r.recompute_cost_s = 0;
    for (launch_id l : recipe) r.recompute_cost_s += g.launches[l].cost_s;
    validate_regenerated(b, stream);
  }
  if (prefetch) {
    ++current.prefetched;
  } else {
    current.stall_s += dev.now_s() - started;
  }
  // One event per buffer mapped back, all with the recipe's time span.
  for (buffer_id b : restored)
    note_block(timeline_event::kind::regenerate, started, addr[b], g.buffers[b].size, record_for(b).producer);
}

// Note [Replay recipes]: inputs must hold the values they had at the original launch.
// So must a live temporary at its first use in the recipe, whose scratch starts from its
// present bytes; a freed one has none to check (its scratch holds what the recipe writes).
// A live temporary the launch reads may have been written since only by the recipe's own
// launches: each write counts once in its version (`recipe_writes`). One it only writes
// needs no bytes of its own.
void engine::impl::check_versions(launch_id l, const saved_op& so, const std::unordered_set<buffer_id>& regenerated,
                                  const std::unordered_set<buffer_id>& temps,
                                  const std::unordered_map<buffer_id, std::uint64_t>& recipe_writes) const {
  const auto& touched = graph().launches[l].touched;
  for (std::size_t i = 0; i < touched.size(); ++i) {
    buffer_id u = touched[i];
    if (regenerated.count(u) || (temps.count(u) && (freed[u] || !reads(l, u)))) continue;
    std::uint64_t expected = so.input_versions[i];
    if (temps.count(u)) {
      const auto w = recipe_writes.find(u);
      if (w != recipe_writes.end()) expected += w->second;
    }
    if (version[u] != expected) {
      throw error("sublinear: replay of launch " + std::to_string(l) + " would read buffer " + std::to_string(u) +
                  " after it changed; the plan is invalid for this iteration");
    }
  }
}

// Whether launch `l` may read buffer `u` (the analysis's inputs: every touched buffer but
// one it writes first after its allocation).
bool engine::impl::reads(launch_id l, buffer_id u) const {
  const auto& in = an.inputs[l];
  return std::binary_search(in.begin(), in.end(), u);
}

std::string engine::impl::kernel_name_of(launch_id l) const {
  const auto& g = graph();
  const std::uint32_t k = g.launches[l].kernel;
  return k < g.kernel_names.size() ? g.kernel_names[k] : "launch " + std::to_string(l);
}

void engine::impl::validate_regenerated(buffer_id b, device::stream_handle stream) {
  auto it = backups.find(b);
  if (it == backups.end()) return;
  std::vector<std::byte> now(it->second.size());
  dev.download(now.data(), addr[b], now.size(), stream);
  if (now != it->second) {
    dev.upload(addr[b], it->second.data(), it->second.size(), stream);  // keep this iteration right
    ++engine_writes[b];
    ++current.validation_mismatches;
    const auto alloc_index = graph().buffers[b].alloc_index;
    never_evict_allocs.insert(alloc_index);
    record_for(b).never_evict = true;
    log_warn("validation: regenerating buffer #" + std::to_string(alloc_index) + " (" +
             format_bytes(graph().buffers[b].size) + ", produced by " + record_for(b).producer +
             ") gave different bytes; it will not be evicted again");
  }
  backups.erase(it);
}

void engine::impl::restore_everything(device::stream_handle stream) {
  restore_all_pending = false;
  settle_releases(unsettled.size());  // Note [Unsettled releases]
  // Under an absolute budget a buffer on the host stays there until a launch touches it
  // (fetch_touched follows every word once diverged), a recipe reads it, or the iteration
  // ends: all back at once, each offloaded buffer under a page on pages of its own, maps
  // several times the baseline's peak. A copy still running is abandoned or waited for.
  if (trace_budget_bytes > 0) {
    bring_in_all_but_on_host(stream);
  } else {
    fetch_everything(stream);  // Note [Offload execution]
  }
  std::vector<std::size_t> order;
  for (buffer_id b = 0; b < evicted.size(); ++b)
    if (evicted[b] && !freed[b] && carrier_of(b) >= 0) order.push_back(static_cast<std::size_t>(carrier_of(b)));
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return plan.evictions[x].restore_before < plan.evictions[y].restore_before;
  });
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (std::size_t i : order) regenerate(i, stream);
}

// The entry whose recipe brings `b` back now: the one that evicted it if it carries a
// recipe, else the entry that lists it in also_regenerates.
std::int32_t engine::impl::carrier_of(buffer_id b) const {
  const std::int32_t e = active_entry[b];
  if (e >= 0 && !plan.evictions[static_cast<std::size_t>(e)].recipe.empty()) return e;
  return entry_of[b];
}

// Note [Stray pointer words]
// Rationale: the ENTER safety net regenerates an evicted block when a launch's parameters
//   point into it. Kernel parameter blocks are not all pointers, and not all initialised:
//   PyTorch's elementwise kernels pass fixed-size arrays of which only the first entries
//   are set, and the rest keep whatever the host stack held, which in a planned iteration
//   is often the address the engine itself just evicted (its eviction code ran on the same
//   thread just before). On an H200 such a word in GPT-2's forward pointed into the
//   dropout output evicted one launch earlier; the net tried to regenerate it with a
//   recipe whose last launch had not run yet, failed, and the block's pages were mapped
//   back holding no valid bytes: the loss was NaN from the next iteration on.
// Approach: while an iteration follows its trace, a kernel's word counts only if the
//   traced launch at the same position held a pointer into the same buffer at the same
//   parameter offset (the analysis keeps every such touch). Others are left alone and
//   counted (iteration_report::stray_pointers; at SUBLINEAR_LOG=debug each is named). A
//   buffer the plan or the pressure valve evicts is always needed through a word the
//   trace saw, so both still come back at their next use. Memory copies and sets, and
//   every launch once an iteration has diverged, are followed word for word.
// Limitations: a program whose pointers change between iterations with the same kernels
//   and the same allocation sizes (data-dependent choice of an operand) is not caught by
//   the divergence check, nor by the safety net: that program was never plannable from
//   one trace.
//
// Whether the traced launch at `l` held a pointer into buffer `b` at parameter offset
// `offset` (Note [Stray pointer words]).
bool engine::impl::traced_touch(std::size_t l, std::size_t offset, buffer_id b) const {
  if (l >= an.touches.size()) return false;
  for (const auto& t : an.touches[l])
    if (t.param_offset == offset && t.buffer == b) return true;
  return false;
}

// The safety net: a launch whose parameters point into an evicted block.
void engine::impl::regenerate_touched(const launch_view& op) {
  if (evicted_ranges.empty()) return;
  // Note [Stray pointer words]: while the iteration follows the trace, a kernel's word
  // counts only where the traced launch at this position pointed into the same buffer.
  const bool follow_trace = !diverged && pos < graph().launches.size() && op.what == launch_view::kind::kernel;
  // Every evicted range lies in [lo, hi) (regenerations only remove ranges).
  const auto lo = reinterpret_cast<std::uint64_t>(evicted_ranges.begin()->first);
  const auto top = std::prev(evicted_ranges.end());
  const auto hi = reinterpret_cast<std::uint64_t>(top->first) + graph().buffers[top->second].size;
  auto hit = [&](std::uint64_t word, std::size_t offset) {
    if (word < lo || word >= hi) return;
    auto p = reinterpret_cast<const char*>(word);
    auto it = evicted_ranges.upper_bound(p);
    if (it == evicted_ranges.begin()) return;
    --it;
    const buffer_id b = it->second;
    if (p >= it->first + graph().buffers[b].size) return;
    if (follow_trace && !traced_touch(pos, offset, b)) {
      if (offset % 8 != 0) return;  // an unaligned window of other fields' bytes (Note [Pointer scan])
      ++current.stray_pointers;
      if (opts.config.log >= log_level::debug)
        log_debug("iteration " + std::to_string(iteration_index) + ": launch " + std::to_string(pos) + " (" +
                  kernel_name_of(static_cast<launch_id>(pos)) + ") has a word at parameter offset " +
                  std::to_string(offset) + " pointing into evicted buffer #" +
                  std::to_string(graph().buffers[b].alloc_index) +
                  ", which the traced launch did not hold there: left alone");
      return;
    }
    const std::int32_t entry = carrier_of(b);
    if (entry < 0) throw error("sublinear: a launch touches an evicted buffer that has no recipe");
    regenerate(static_cast<std::size_t>(entry), op.stream);
  };
  if (op.what == launch_view::kind::kernel) {
    // Every offset: a pointer in a packed struct (Note [Pointer scan]).
    for (std::size_t off = 0; off + 8 <= op.params.size() && !evicted_ranges.empty(); ++off) {
      std::uint64_t word = 0;
      std::memcpy(&word, op.params.data() + off, 8);
      hit(word, off);
    }
  } else {
    hit(reinterpret_cast<std::uint64_t>(op.dst), 0);
    if (op.src != nullptr) hit(reinterpret_cast<std::uint64_t>(op.src), 8);
  }
}

// True if launch in [from, until) writes `b`.
bool engine::impl::written_in(buffer_id b, std::size_t from, std::size_t until) const {
  const auto& w = writers[b];
  auto it = std::lower_bound(w.begin(), w.end(), static_cast<launch_id>(from));
  return it != w.end() && *it < until;
}

// True if the recipe of entry `i` can run now: every launch of it seen in this iteration,
// every block it touches in place allocated and not freed, its inputs resident and
// unchanged since the original launches. With `until` (the valve), it must also stay
// valid up to that launch: nothing it touches is freed before it or written in
// [pos, until), and every buffer it writes that is resident still holds what the recipe
// wrote (the recipe will write it again).
bool engine::impl::recipe_valid(std::size_t i, std::size_t until) const {
  const auto& e = plan.evictions[i];
  const auto& g = graph();
  if (e.recipe.empty()) return false;
  std::unordered_set<buffer_id> made(e.also_regenerates.begin(), e.also_regenerates.end());
  made.insert(e.target);
  std::unordered_set<buffer_id> temps(e.temporaries.begin(), e.temporaries.end());
  std::unordered_map<buffer_id, launch_id> recipe_writer;
  for (launch_id l : e.recipe) {
    const saved_op& so = saved[l];
    if (l >= pos || !so.present) return false;
    const auto& touched = g.launches[l].touched;
    const auto& writes = g.launches[l].written;
    for (std::size_t k = 0; k < touched.size(); ++k) {
      const buffer_id u = touched[k];
      if (temps.count(u) != 0) continue;
      if (addr[u] == nullptr) return false;
      // A block the recipe produces may be gone by then: it is replayed into scratch
      // (regenerate). One it only reads must exist now and, for the valve, still exist
      // when the regeneration runs: a replay never touches a freed block.
      const bool produced = made.count(u) != 0 || std::binary_search(writes.begin(), writes.end(), u);
      const bool gone_by_then = freed[u] || (until > pos && g.buffers[u].free_at != none && g.buffers[u].free_at <= until);
      if (gone_by_then && !produced) return false;
      if (until > pos && written_in(u, pos, until)) return false;
      if (gone_by_then) continue;  // a temporary then
      if (made.count(u) != 0) continue;
      if ((evicted[u] || releasing[u]) && !freed[u]) return false;
      if (version[u] != so.input_versions[k]) return false;
    }
    for (buffer_id w : g.launches[l].written) {
      made.insert(w);
      recipe_writer[w] = l;
    }
  }
  if (until > pos) {
    for (const auto& [w, l] : recipe_writer) {
      if (temps.count(w) != 0 || evicted[w] || freed[w]) continue;
      if (last_write[w] != l) return false;
    }
  }
  return true;
}

// Note [Prefetch]
// Rationale: regenerating at the ENTER of the launch that needs a buffer puts the map
//   calls, the scratch allocations and the recipe's launches right in front of that
//   launch: on a device whose host thread runs ahead of its stream, the stream drains
//   while the host maps and queues. The plan's restore point is the latest moment, not
//   the only one.
// Approach: at every ENTER the engine looks `engine_options::prefetch_launches` launches
//   ahead and regenerates the entries due there now, on the entering launch's stream,
//   when their recipes can already run (every recipe launch seen, inputs resident and
//   unchanged, no offloaded input still on the host or on its way back: its fetch is
//   waited for only at its restore point) and the budget has room for their targets and
//   temporaries with a
//   thirty-second of the budget to spare. Entries that do not fit are regenerated at
//   their restore point, and the ENTER safety net stays. An entry whose own target is
//   still to be evicted is not prefetched: its recipe would run for the buffers it
//   regenerates on the way and then again, at its restore point, for the target (a chain
//   under greedy replayed 8 launches an iteration for a plan of 6).
// Limitations: a prefetched buffer occupies pages a few launches longer than the plan
//   predicted; the room check and the pressure valve bound what that can cost.
//
// Regenerates, ahead of their restore points, the entries due within the next
// prefetch_launches launches whose recipes can run now and that fit under the budget.
void engine::impl::prefetch(device::stream_handle stream) {
  const auto& g = graph();
  const std::size_t horizon = std::min(g.launches.size(), pos + opts.prefetch_launches);
  std::size_t q = std::max(prefetch_scan, pos + 1);
  if (q > horizon) return;
  const std::size_t gran = alloc.granularity();
  auto pages = [&](buffer_id b) { return (g.buffers[b].size + gran - 1) / gran * gran; };
  auto s = alloc.get_stats();
  for (; q <= horizon; ++q) {
    for (std::size_t i : restore_at[q]) {
      const auto& e = plan.evictions[i];
      // Its target is still to be evicted: the recipe would run now for the buffers it
      // regenerates on the way and again at its restore point for the target.
      if (!evicted[e.target] && !freed[e.target] && !kept_resident[e.target] && e.evict_after != none &&
          e.evict_after >= pos)
        continue;
      std::size_t need = 0;
      if (evicted[e.target] && !freed[e.target]) need += pages(e.target);
      for (buffer_id t : e.also_regenerates)
        if (evicted[t] && !freed[t]) need += pages(t);
      if (need == 0) continue;
      for (buffer_id t : e.temporaries) need += pages(t);
      const std::size_t in_use = s.mapped - s.pooled;  // pooled chunks can serve the targets
      if (in_use + need + s.budget / 32 > s.budget) continue;
      if (!recipe_valid(i, 0) || reads_offload_not_back(e.recipe)) continue;
      // A prefetch is an optimisation: it must neither fail the launch nor make the
      // pressure valve evict others to make room for it.
      prefetching = true;
      try {
        regenerate(i, stream, 0, true);
      } catch (const out_of_memory&) {
        // left to its restore point
      }
      prefetching = false;
      s = alloc.get_stats();
    }
  }
  prefetch_scan = horizon + 1;
}

}  // namespace sublinear::runtime
