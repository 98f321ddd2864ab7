// Writes the trace did not see: the hashes the engine takes in planned iterations so that
// a regeneration never silently differs from what the program computed.
//
// Note [Unseen writes]
// Rationale: write observation hashes blocks around each kernel of the traced iterations
//   only. A kernel whose writes depend on the data (a clamp_ whose input exceeds its range
//   only later, a masked update, an overflow flag set only on overflow) leaves every byte
//   as it was while traced and is taken for a reader. Once the data changes it writes, and
//   nothing counts that write: a regenerated buffer lacks it, a recipe reads an input that
//   changed under it, or a replayed launch sets its flag again. Versions cannot see it;
//   validation can, but only while it keeps copies.
// Approach: in planned iterations the engine hashes on the stream (replay_device::hash)
//   what a regeneration relies on: each target of a recipe after the recipe's last write
//   to it, and each block a recipe launch reads in place before and after that launch. At
//   a release (a planned eviction or the valve's) it hashes the target and the inputs of
//   the recipe launches run so far again, and waits: a difference with no recorded write
//   in between is a write the trace did not see. The target is then not evicted (its bytes
//   are intact), never evicted again (the plan is made again), reported
//   (iteration_report::unseen_writes, one warning per buffer), and later replays of that
//   recipe write kept targets and read its inputs in scratch. After a regeneration the
//   target is hashed again and compared with its bytes at the release; where a launch in
//   between touched a recipe input, that input is hashed around the replay too, which must
//   not change it. Those compare when the stream gets there, at the latest at the
//   iteration's end; a difference is an error naming the buffer (the bytes are gone;
//   validation's copy restores them). Hashes of a block with no launch touching it in
//   between are taken once (iteration_report::hashed_bytes counts what was hashed).
// Limitations: writes through pointers the scan cannot see (Note [Pointer scan]) touch
//   no block the engine watches; a write between a release and the regeneration that
//   changes the result is caught, not undone, unless validation keeps copies. Hashes
//   collide with probability 2^-64. The release waits for the stream.
#include "common/text.hpp"
#include "runtime/detail/engine_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tracer/block_hashes.hpp"

namespace sublinear::runtime {

namespace {

using policy::buffer_id;
using policy::launch_id;
using policy::none;

// Stamps order hashes against launches: 2l is just before launch l, 2l + 1 just after it.
constexpr std::uint32_t before_stamp(std::size_t l) { return static_cast<std::uint32_t>(2 * l); }
constexpr std::uint32_t after_stamp(std::size_t l) { return static_cast<std::uint32_t>(2 * l + 1); }

bool ready(const std::shared_future<std::uint64_t>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

}  // namespace

// The device's default: a copy to the host, hashed there (it waits for the stream).
std::shared_future<std::uint64_t> replay_device::hash(const void* device_src, std::size_t bytes,
                                                      device::stream_handle stream) {
  std::vector<std::byte> copy(bytes);
  download(copy.data(), device_src, bytes, stream);
  std::promise<std::uint64_t> done;
  done.set_value(tracer::hash_bytes(copy.data(), bytes));
  return done.get_future().share();
}

// Which blocks to hash where (Note [Unseen writes]), from the plan: each carrier's targets
// after the recipe's last write to them, and every block its launches read in place (not
// written by the recipe, not a temporary) before and after each launch touching it.
void engine::impl::index_write_checks() {
  const auto& g = graph();
  const std::size_t n = g.launches.size();
  hash_before_at.assign(n + 1, {});
  hash_after_at.assign(n + 1, {});
  guarded_inputs.assign(plan.evictions.size(), {});
  productions.assign(plan.evictions.size(), {});
  for (std::size_t i = 0; i < plan.evictions.size(); ++i) {
    const auto& e = plan.evictions[i];
    if (e.recipe.empty()) continue;
    std::unordered_set<buffer_id> made(e.temporaries.begin(), e.temporaries.end());
    made.insert(e.target);
    made.insert(e.also_regenerates.begin(), e.also_regenerates.end());
    for (launch_id l : e.recipe) made.insert(g.launches[l].written.begin(), g.launches[l].written.end());
    std::unordered_map<buffer_id, launch_id> first_read, last_write_of;
    for (launch_id l : e.recipe) {
      for (buffer_id u : g.launches[l].touched) {
        if (made.count(u) != 0) continue;
        hash_before_at[l].push_back(u);
        hash_after_at[l].push_back(u);
        first_read.emplace(u, l);
      }
      for (buffer_id w : g.launches[l].written) last_write_of[w] = l;
    }
    auto& guarded = guarded_inputs[i];
    guarded.assign(first_read.begin(), first_read.end());
    std::sort(guarded.begin(), guarded.end());
    auto note_production = [&](buffer_id t) {
      const auto w = last_write_of.find(t);
      if (w == last_write_of.end()) return;
      productions[i].emplace_back(t, w->second);
      hash_after_at[w->second].push_back(t);
    };
    note_production(e.target);
    for (buffer_id t : e.also_regenerates) note_production(t);
  }
  for (auto* lists : {&hash_before_at, &hash_after_at})
    for (auto& v : *lists) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
}

void engine::impl::reset_write_checks() {
  const std::size_t nb = graph().buffers.size();
  observations.assign(nb, {});
  engine_writes.assign(nb, 0);
  unseen_written.assign(nb, 0);
  released_at.assign(nb, none);
  release_hash.assign(nb, {});
  tainted.assign(plan.evictions.size(), 0);
  pending_checks.clear();
  read_from_copy.clear();
  kept_unseen = 0;
}

// Whether a launch of the trace touching `b` runs between the hashes stamped `from` and
// `to` (the only way its bytes can change, for pointers the scan sees).
bool engine::impl::touched_between(buffer_id b, std::uint32_t from, std::uint32_t to) const {
  const auto& u = uses[b];
  const auto it = std::lower_bound(u.begin(), u.end(), static_cast<launch_id>((from + 1) / 2));
  return it != u.end() && after_stamp(*it) <= to;
}

// Hashes `b` on `stream` at `stamp`, or repeats the last hash when nothing can have
// changed it since.
void engine::impl::observe(buffer_id b, std::uint32_t stamp, device::stream_handle stream) {
  if (addr[b] == nullptr || freed[b] || evicted[b]) return;
  auto& seen = observations[b];
  if (!seen.empty()) {
    const observation& last = seen.back();
    if (last.stamp == stamp) return;
    if (last.version == version[b] && last.engine_writes == engine_writes[b] && !touched_between(b, last.stamp, stamp)) {
      seen.push_back({stamp, last.version, last.engine_writes, last.hash});
      return;
    }
  }
  const std::size_t size = graph().buffers[b].size;
  seen.push_back({stamp, version[b], engine_writes[b], dev.hash(addr[b], size, stream)});
  current.hashed_bytes += size;
}

void engine::impl::observe_before(const launch_view& op) {
  if (pos >= hash_before_at.size()) return;
  for (buffer_id b : hash_before_at[pos]) observe(b, before_stamp(pos), op.stream);
}

void engine::impl::observe_after(const launch_view& op) {
  if (pos >= hash_after_at.size()) return;
  for (buffer_id b : hash_after_at[pos]) observe(b, after_stamp(pos), op.stream);
}

// The first hash of `b` from `from` on that differs from the one at `from` (versions
// equal: a recorded write is the versions' business), or nullptr. Waits for the hashes.
const engine::impl::observation* engine::impl::first_change(buffer_id b, std::uint32_t from) const {
  const observation* base = nullptr;
  for (const observation& o : observations[b]) {
    if (o.stamp < from) continue;
    if (base == nullptr) {
      base = &o;
      continue;
    }
    if (o.version != base->version) {
      base = &o;
      continue;
    }
    if (o.hash.get() != base->hash.get()) return &o;
  }
  return nullptr;
}

// At the release of `b` by plan entry `entry` (its recipe or its carrier's regenerates it):
// true when nothing the regeneration relies on was written unseen since it was produced
// or read; false keeps it resident (Note [Unseen writes]).
bool engine::impl::release_check(buffer_id b, std::size_t entry, std::uint32_t stamp, device::stream_handle stream) {
  std::int32_t c = plan.evictions[entry].recipe.empty() ? entry_of[b] : static_cast<std::int32_t>(entry);
  if (c < 0 || plan.evictions[static_cast<std::size_t>(c)].recipe.empty()) return true;  // no regeneration
  const auto carrier = static_cast<std::size_t>(c);
  launch_id produced = none;
  for (const auto& [t, l] : productions[carrier])
    if (t == b) produced = l;
  observe(b, stamp, stream);
  for (const pending_check& p : pending_checks)
    if (p.buffer == b) p.got.wait();  // its pages must outlive the hash of its last regeneration
  std::vector<std::pair<buffer_id, launch_id>> inputs;
  for (const auto& [u, first] : guarded_inputs[carrier])
    if (before_stamp(first) < stamp) {
      observe(u, stamp, stream);
      inputs.emplace_back(u, first);
    }
  release_hash[b] = observations[b].empty() ? std::shared_future<std::uint64_t>{} : observations[b].back().hash;
  released_at[b] = static_cast<std::uint32_t>(pos);
  std::string why;
  if (produced == none || observations[b].empty() || observations[b].front().stamp > after_stamp(produced)) {
    why.clear();  // nothing to compare with (its production was not hashed): unverified
    if (opts.config.log >= log_level::debug)
      log_debug("iteration " + std::to_string(iteration_index) + ": buffer " + std::to_string(b) +
                " has no hash from its production; kept resident");
    return false;
  }
  if (const observation* o = first_change(b, after_stamp(produced)); o != nullptr) {
    why = "its bytes changed after " + launch_name(produced) + " produced it, by a launch in " +
          suspects(b, after_stamp(produced), o->stamp);
  }
  for (const auto& [u, first] : inputs) {
    if (!why.empty()) break;
    if (const observation* o = first_change(u, before_stamp(first)); o != nullptr)
      why = "its recipe reads buffer " + std::to_string(u) + " in place from " + launch_name(first) +
            " on, and that buffer changed, by a launch in " + suspects(u, before_stamp(first), o->stamp);
  }
  settle_write_checks(false);
  if (why.empty()) return true;
  unseen_written[b] = 1;
  kept_resident[b] = 1;  // the valve and later evictions leave it alone
  tainted[carrier] = 1;
  ++current.unseen_writes;
  ++kept_unseen;
  const auto alloc_index = graph().buffers[b].alloc_index;
  never_evict_allocs.insert(alloc_index);
  auto& r = record_for(b);
  r.never_evict = true;
  if (warned_unseen.insert(alloc_index).second)
    log_warn("iteration " + std::to_string(iteration_index) + ": buffer #" + std::to_string(alloc_index) + " (" +
             format_bytes(graph().buffers[b].size) + ", produced by " + r.producer + ") was not evicted: " + why +
             ", which the trace did not see writing it. It stays resident and is never evicted again (Note "
             "[Unseen writes])");
  return false;
}

// At the release of `b`: each block its recipe reads in place that the iteration allocated
// and that a kernel the trace did not see writing it touches before `b`'s next use (its
// regeneration at the latest) is copied to host memory, once per version: if such a
// kernel writes it, the replay reads the copy (isolate_changed_inputs). The release check
// has just shown that its bytes are still those the recipe's launches read.
void engine::impl::keep_input_copies(buffer_id b, std::size_t entry, bool planned, device::stream_handle stream) {
  std::int32_t c = plan.evictions[entry].recipe.empty() ? entry_of[b] : static_cast<std::int32_t>(entry);
  if (c < 0 || (!planned && pos == 0)) return;
  const auto& g = graph();
  const auto& ub = uses[b];
  const auto next = std::upper_bound(ub.begin(), ub.end(), static_cast<launch_id>(planned ? pos : pos - 1));
  if (next == ub.end()) return;
  const auto from = static_cast<launch_id>(planned ? pos + 1 : pos);
  for (const auto& [u, first] : guarded_inputs[static_cast<std::size_t>(c)]) {
    if (g.buffers[u].persistent() || evicted[u] || freed[u] || addr[u] == nullptr) continue;  // see isolate_changed_inputs
    if (const auto kept = input_copies.find(u); kept != input_copies.end() && kept->second.version == version[u]) continue;
    const observation* read = nullptr;
    for (const observation& o : observations[u])
      if (o.stamp >= before_stamp(first)) {
        read = &o;
        break;
      }
    if (read == nullptr) continue;
    bool exposed = false;
    const auto& uu = uses[u];
    for (auto l = std::lower_bound(uu.begin(), uu.end(), from); l != uu.end() && *l < *next && !exposed; ++l) {
      const auto& launch = g.launches[*l];
      exposed = launch.kind == policy::launch_kind::kernel &&
                !std::binary_search(launch.written.begin(), launch.written.end(), u);
    }
    if (!exposed) continue;
    input_copy& copy = input_copies[u];
    copy.version = version[u];
    copy.hash = read->hash.get();
    copy.bytes.resize(g.buffers[u].size);
    dev.download(copy.bytes.data(), addr[u], copy.bytes.size(), stream);
    current.copied_bytes += copy.bytes.size();
  }
}

// The launches that touch `b` between two stamps, named for a message.
std::string engine::impl::suspects(buffer_id b, std::uint32_t from, std::uint32_t to) const {
  std::string names;
  std::size_t count = 0;
  for (launch_id l : uses[b]) {
    if (before_stamp(l) < from || after_stamp(l) > to) continue;
    if (count++ < 4) names += (names.empty() ? "" : ", ") + launch_name(l);
  }
  if (count > 4) names += " and " + std::to_string(count - 4) + " more";
  return names.empty() ? std::string("(no launch: the engine's own work)") : names;
}

// Before a replay of entry `entry`: kept targets, and the inputs of a recipe found read
// after an unseen write, go to scratch so that the replay writes nothing the program owns.
void engine::impl::add_unseen_temporaries(std::size_t entry, const std::vector<buffer_id>& targets,
                                          std::unordered_set<buffer_id>& temps) const {
  for (buffer_id b : targets)
    if (unseen_written[b] && !evicted[b] && !freed[b]) temps.insert(b);
  if (!tainted[entry]) return;
  for (const auto& [u, first] : guarded_inputs[entry])
    if (!evicted[u] && !freed[u] && addr[u] != nullptr) temps.insert(u);
}

// Before a replay of `entry`: a recipe input that some launch of the trace touched after
// the first of `restored` was released, and whose bytes are no longer those the original
// launches read, is read in scratch, so that nothing the replay writes reaches it: from
// the copy kept at the release when there is one (keep_input_copies), else from its bytes
// now (the check after the regeneration then says whether the result still holds). Waits
// for the stream (only where such a launch ran).
void engine::impl::isolate_changed_inputs(std::size_t entry, const std::vector<buffer_id>& restored,
                                          std::unordered_set<buffer_id>& temps, device::stream_handle stream) {
  read_from_copy.clear();
  std::uint32_t from = none;
  for (buffer_id b : restored)
    if (released_at[b] != none) from = std::min(from, released_at[b]);
  if (from == none) return;
  for (const auto& [u, first] : guarded_inputs[entry]) {
    if (temps.count(u) != 0 || evicted[u] || freed[u] || addr[u] == nullptr) continue;
    if (!touched_between(u, after_stamp(from), before_stamp(pos))) continue;
    const std::size_t size = graph().buffers[u].size;
    observe(u, before_stamp(pos), stream);
    const std::uint64_t now = observations[u].back().hash.get();
    const observation* read = nullptr;  // what the original launches read
    for (const observation& o : observations[u])
      if (o.stamp >= before_stamp(first)) {
        read = &o;
        break;
      }
    if (read != nullptr && read->hash.get() == now) continue;
    temps.insert(u);
    const auto kept = input_copies.find(u);
    if (read == nullptr || kept == input_copies.end() || kept->second.hash != read->hash.get()) continue;
    read_from_copy[u] = &kept->second;
    ++current.unseen_writes;
    const auto alloc_index = graph().buffers[u].alloc_index;
    if (warned_unseen.insert(alloc_index).second)
      log_warn("iteration " + std::to_string(iteration_index) + ": buffer #" + std::to_string(alloc_index) + " (" +
               format_bytes(size) + ") changed after " + launch_name(first) + " read it, by a launch the trace did "
               "not see writing it; recipes that read it use the copy kept at their release (Note [Unseen writes])");
  }
}

// After a replay: what it regenerated must hash as it did at the release (compared when
// the stream gets there).
void engine::impl::check_replay(const std::vector<buffer_id>& restored, device::stream_handle stream) {
  const auto& g = graph();
  for (buffer_id b : restored) {
    if (freed[b] || !release_hash[b].valid() || backups.count(b) != 0) continue;  // a copy compares bytes
    pending_checks.push_back({b, release_hash[b], dev.hash(addr[b], g.buffers[b].size, stream)});
    current.hashed_bytes += g.buffers[b].size;
  }
}

// Compares the checks the stream has reached (all of them with `wait`); a difference is
// an error: a regenerated buffer is not what the program had (Note [Unseen writes]).
void engine::impl::settle_write_checks(bool wait) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending_checks.size(); ++i) {
    pending_check& p = pending_checks[i];
    if (!wait && !(ready(p.expected) && ready(p.got))) {
      if (kept != i) pending_checks[kept] = std::move(p);
      ++kept;
      continue;
    }
    if (p.expected.get() == p.got.get()) continue;
    const auto& buf = graph().buffers[p.buffer];
    pending_checks.clear();
    throw error("sublinear: buffer #" + std::to_string(buf.alloc_index) + " (" + format_bytes(buf.size) +
                ", produced by " + record_for(p.buffer).producer +
                ") came back with other bytes than it had when it was evicted: a launch between its eviction and its "
                "regeneration changed what its recipe reads, and the trace did not see it write (Note [Unseen "
                "writes]). Its bytes are gone; rerun with SUBLINEAR_VALIDATE=always, which keeps a copy of every "
                "evicted buffer and recovers, or with a larger budget");
  }
  pending_checks.resize(kept);
}

}  // namespace sublinear::runtime
