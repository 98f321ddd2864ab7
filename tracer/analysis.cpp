// Graph and liveness inference (Note [Iteration analysis] in analysis.hpp).
#include "tracer/analysis.hpp"

#include <algorithm>
#include <set>
#include <string>

#include "policy/recipe.hpp"
#include "sublinear/error.hpp"
#include "tracer/iterations.hpp"
#include "tracer/pointer_scan.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::tracer {

namespace {

using policy::buffer_id;
using policy::launch_id;
using policy::none;

class builder {
 public:
  builder(const trace& t, const analysis_options& o) : t_(t), o_(o) {
    out_.graph.kernel_names.reserve(t.kernels.size() + 2);
    for (const kernel_info& k : t.kernels) out_.graph.kernel_names.push_back(k.name);
    const std::size_t g = o.granularity != 0 ? o.granularity : static_cast<std::size_t>(t.granularity);
    out_.graph.granularity = g != 0 ? g : 1;
  }

  // Blocks live before the iteration: replay the allocations and frees that precede it.
  void prologue(std::size_t begin) {
    for (std::size_t i = 0; i < begin; ++i) {
      const event& e = t_.events[i];
      if (e.kind == event_kind::alloc) {
        before_.insert(e.address, std::max<std::uint64_t>(e.bytes, 1), static_cast<std::uint32_t>(i));
      } else if (e.kind == event_kind::free) {
        before_.erase(e.address);
      }
    }
    std::vector<block_map::entry> live = before_.entries();
    // In allocation order, so buffer ids follow the program's order.
    std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (const auto& b : live) new_buffer(t_.events[b.id], /*in_iteration=*/false);
  }

  void walk(event_range r) {
    for (std::size_t i = r.begin; i < r.end; ++i) {
      const event& e = t_.events[i];
      switch (e.kind) {
        case event_kind::alloc:
          new_buffer(e, (e.flags & event_flags::preexisting) == 0);
          break;
        case event_kind::free:
          if (const block_map::entry* b = live_.at(e.address)) {
            out_.graph.buffers[b->id].free_at = launch_count();
            live_.erase(e.address);
          }
          break;
        case event_kind::launch: kernel_launch(i, e); break;
        case event_kind::memcpy:
        case event_kind::memset: copy_or_set(i, e); break;
        default: break;  // event record/wait, markers: ordering only
      }
    }
  }

  // Note [Write generalization]: an observed write set is data-dependent. A ReLU applied
  // in place to values that happen to be non-negative (a residual branch whose last
  // BatchNorm starts with zero gain) changes nothing on the traced iteration but does on
  // later ones. So a write seen through a parameter slot of a kernel counts for every
  // launch of that kernel through that slot, and slots seen written in an earlier traced
  // iteration count too: a bias added in place while it is still zero (as initialised)
  // writes nothing in iteration 1 but does once the optimizer has moved it. The engine
  // traces two iterations by default for this reason; validation catches what is left.
  void generalize_writes() {
    policy::iteration& g = out_.graph;
    std::set<std::pair<std::uint32_t, std::uint32_t>> writing_slots(o_.known_writing_slots.begin(),
                                                                     o_.known_writing_slots.end());
    for (launch_id l = 0; l < g.launches.size(); ++l) {
      const policy::launch& L = g.launches[l];
      if (L.kind != policy::launch_kind::kernel) continue;
      for (const touch& t : out_.touches[l])
        if (std::binary_search(L.written.begin(), L.written.end(), t.buffer))
          writing_slots.emplace(L.kernel, t.param_offset);
    }
    out_.writing_slots.assign(writing_slots.begin(), writing_slots.end());
    for (launch_id l = 0; l < g.launches.size(); ++l) {
      policy::launch& L = g.launches[l];
      if (L.kind != policy::launch_kind::kernel) continue;
      bool added = false;
      for (const touch& t : out_.touches[l]) {
        if (writing_slots.count({L.kernel, t.param_offset}) == 0) continue;
        if (!std::binary_search(L.written.begin(), L.written.end(), t.buffer)) {
          L.written.push_back(t.buffer);
          added = true;
        }
      }
      if (added) {
        std::sort(L.written.begin(), L.written.end());
        L.written.erase(std::unique(L.written.begin(), L.written.end()), L.written.end());
      }
    }
  }

  analysed_iteration finish() {
    policy::iteration& g = out_.graph;
    const std::size_t n = g.launches.size();
    generalize_writes();
    // Users.
    for (launch_id l = 0; l < n; ++l) {
      for (buffer_id b : g.launches[l].touched) g.buffers[b].users.push_back(l);
    }
    // Note [Unknown producers]: a block allocated in the iteration whose first user does
    // not write it holds bytes no recorded launch produced. Either the program reads
    // memory it never wrote, or the tracer missed the write: the pointer sat where the
    // scan cannot see it (an opaque descriptor, a pointer in device memory), or the
    // write left the bytes as they were, which hashing cannot tell from no write. No
    // recipe can rebuild such a block, and a recipe that reads it through scratch would
    // read garbage; it is never evicted, and recipe building refuses to rebuild it
    // (Note [Recipe closure]). Counted, so that traces show what the tracer missed.
    // Unless the first user found it still filled as allocated (Note [Filled fresh
    // blocks] in block_hashes.hpp): then no one wrote it, seen or not, and what that
    // launch reads there is garbage a replay into scratch reproduces as well as any.
    for (buffer_id b = 0; b < g.buffers.size(); ++b) {
      policy::buffer& B = g.buffers[b];
      if (B.alloc_index == none || B.users.empty()) continue;
      const policy::launch& first = g.launches[B.users.front()];
      if (std::binary_search(first.written.begin(), first.written.end(), b)) continue;
      const std::vector<buffer_id>& fresh = fresh_[B.users.front()];
      if (std::binary_search(fresh.begin(), fresh.end(), b)) {
        B.unwritten_at_first_use = true;
        continue;
      }
      B.never_evict = true;
      out_.unproduced.push_back(b);
    }
    // Live bytes per position, the peak and the turning point.
    std::vector<std::int64_t> delta(n + 2, 0);
    for (const policy::buffer& b : g.buffers) {
      const auto size = static_cast<std::int64_t>(b.size);
      delta[b.alloc_at] += size;
      if (b.free_at != none) delta[b.free_at] -= size;
    }
    out_.live_bytes.resize(n + 1);
    std::int64_t level = 0;
    std::size_t peak_at = 0;
    for (std::size_t p = 0; p <= n; ++p) {
      level += delta[p];
      out_.live_bytes[p] = static_cast<std::size_t>(level);
      if (out_.live_bytes[p] > out_.live_bytes[peak_at]) peak_at = p;
    }
    g.peak_bytes = out_.live_bytes[peak_at];
    out_.live_peak_at = static_cast<launch_id>(n == 0 ? 0 : std::min(peak_at, n - 1));
    // The turning point: where the bytes held across (used before and after) peak.
    std::vector<std::int64_t> held_delta(n + 2, 0);
    for (const policy::buffer& b : g.buffers) {
      if (b.persistent() || b.users.size() < 2) continue;
      held_delta[b.users.front() + 1] += static_cast<std::int64_t>(b.size);
      held_delta[b.users.back()] -= static_cast<std::int64_t>(b.size);
    }
    std::int64_t held = 0, best_held = 0;
    g.turning_point = out_.live_peak_at;
    for (std::size_t p = 0; p < n; ++p) {
      held += held_delta[p];
      if (held > best_held) {
        best_held = held;
        g.turning_point = static_cast<launch_id>(p);
      }
    }
    out_.held_bytes_at_turning_point = static_cast<std::size_t>(best_held);
    // Producers and conservative inputs.
    out_.producer.assign(g.buffers.size(), none);
    out_.inputs.resize(n);
    for (launch_id l = 0; l < n; ++l) {
      const policy::launch& L = g.launches[l];
      for (buffer_id b : L.touched) {
        const bool writes = std::binary_search(L.written.begin(), L.written.end(), b);
        if (writes && out_.producer[b] == none) out_.producer[b] = l;
        if (!policy::writes_first(g, l, b)) out_.inputs[l].push_back(b);  // the recipes' rule too
      }
    }
    // Candidate activations.
    const launch_id tp = g.turning_point;
    for (buffer_id b = 0; b < g.buffers.size(); ++b) {
      const policy::buffer& B = g.buffers[b];
      if (B.persistent() || B.never_evict || B.users.empty()) continue;
      if (!(B.alloc_at <= tp && tp < B.free_at)) continue;
      auto after = std::upper_bound(B.users.begin(), B.users.end(), tp);
      if (after == B.users.begin() || after == B.users.end()) continue;
      const launch_id last_before = *std::prev(after);
      const launch_id first_after = *after;
      if (first_after - last_before - 1 >= o_.min_idle_gap) g.candidates.push_back(b);
    }
    return std::move(out_);
  }

 private:
  [[nodiscard]] launch_id launch_count() const { return static_cast<launch_id>(out_.graph.launches.size()); }

  void new_buffer(const event& e, bool in_iteration) {
    // An alloc at a live address closes the old block (the recorder reports it that way).
    if (const block_map::entry* old = live_.at(e.address)) {
      out_.graph.buffers[old->id].free_at = launch_count();
      live_.erase(e.address);
    }
    policy::buffer b;
    b.size = static_cast<std::size_t>(e.bytes);
    b.stream = dense_stream(e.stream);
    if (in_iteration) {
      b.alloc_index = next_alloc_index_++;
      b.alloc_at = launch_count();
    }
    const auto id = static_cast<buffer_id>(out_.graph.buffers.size());
    out_.graph.buffers.push_back(std::move(b));
    out_.buffer_addresses.push_back(e.address);
    live_.insert(e.address, std::max<std::uint64_t>(e.bytes, 1), id);
  }

  std::uint32_t dense_stream(std::uint32_t trace_stream) {
    for (std::size_t i = 0; i < out_.streams.size(); ++i) {
      if (out_.streams[i] == trace_stream) return static_cast<std::uint32_t>(i);
    }
    out_.streams.push_back(trace_stream);
    return static_cast<std::uint32_t>(out_.streams.size() - 1);
  }

  std::uint32_t pseudo_kernel(const char* name, std::uint32_t& slot) {
    if (slot == none) {
      slot = static_cast<std::uint32_t>(out_.graph.kernel_names.size());
      out_.graph.kernel_names.emplace_back(name);
    }
    return slot;
  }

  double estimated_cost(const std::vector<buffer_id>& touched) const {
    std::size_t bytes = 0;
    for (buffer_id b : touched) bytes += out_.graph.buffers[b].size;
    return static_cast<double>(bytes) * o_.unmeasured_cost_per_byte;
  }

  void add_launch(std::size_t event_index, const event& e, policy::launch&& L, std::vector<touch>&& touches,
                  std::vector<buffer_id>&& fresh = {}) {
    std::sort(L.touched.begin(), L.touched.end());
    L.touched.erase(std::unique(L.touched.begin(), L.touched.end()), L.touched.end());
    std::sort(L.written.begin(), L.written.end());
    L.written.erase(std::unique(L.written.begin(), L.written.end()), L.written.end());
    L.stream = dense_stream(e.stream);
    if ((e.flags & event_flags::timed) != 0) {
      L.cost_s = static_cast<double>(e.duration_ns) * 1e-9;
      ++out_.timed_launches;
    } else {
      L.cost_s = estimated_cost(L.touched);
    }
    if (!L.replayable) {
      for (buffer_id b : L.touched) out_.graph.buffers[b].never_evict = true;
    }
    out_.graph.launches.push_back(std::move(L));
    out_.touches.push_back(std::move(touches));
    out_.launch_events.push_back(event_index);
    fresh_.push_back(std::move(fresh));
  }

  // Note [Graph launches]
  // Rationale: a CUDA graph launch (torch.compile's reduce-overhead mode, a captured
  //   optimizer step) runs kernels whose parameters the collector never sees: its nodes
  //   were captured earlier and cuGraphLaunch names only the executable graph. Taken as
  //   touching nothing, every buffer it reads could be evicted under it and the graph
  //   would compute on missing bytes.
  // Approach: a launch of the kernel named graph_launch_kernel_name (how the CUPTI
  //   collector records a cuGraphLaunch) touches and writes every block live when it is
  //   launched, and is not replayable; so every buffer it may touch is never evicted
  //   (add_launch) and is taken as produced there. Buffers live only between graph
  //   launches can still be planned. Counted in graph_launches for the plan preview.
  // Limitations: conservative: a graph that touches a few buffers pins all live ones, and
  //   with reduce-overhead over the whole step nothing is left to evict. Memory a graph
  //   allocates itself (graph memory nodes) is not sublinear's and is not seen.
  void graph_launch(std::size_t i, const event& e) {
    policy::launch L;
    L.kind = policy::launch_kind::kernel;
    L.kernel = e.kernel;
    L.replayable = false;
    for (const block_map::entry& b : live_.entries()) L.touched.push_back(b.id);
    L.written = L.touched;
    ++out_.graph_launches;
    add_launch(i, e, std::move(L), {});
  }

  void kernel_launch(std::size_t i, const event& e) {
    if (t_.kernels[e.kernel].name == graph_launch_kernel_name) {
      graph_launch(i, e);
      return;
    }
    hits_.clear();
    scan_params(t_.params(e), live_, hits_);
    policy::launch L;
    L.kind = policy::launch_kind::kernel;
    L.kernel = e.kernel;
    L.replayable = (e.flags & (event_flags::never_replay | event_flags::names_event)) == 0;
    std::vector<touch> touches;
    touches.reserve(hits_.size());
    for (const scan_hit& h : hits_) {
      L.touched.push_back(h.block);
      touches.push_back({h.block, h.param_offset, h.offset});
    }
    std::vector<buffer_id> fresh;
    if ((e.flags & event_flags::writes_observed) != 0) {
      ++out_.observed_launches;
      for (const write_record& w : t_.writes_of(e.seq)) {
        if (const block_map::entry* b = live_.at(w.address)) L.written.push_back(b->id);
      }
      // Only what the parameters reach can have been written.
      std::vector<buffer_id> touched = L.touched;
      std::sort(touched.begin(), touched.end());
      std::erase_if(L.written, [&](buffer_id b) { return !std::binary_search(touched.begin(), touched.end(), b); });
      for (const write_record& w : t_.fresh_of(e.seq)) {
        if (const block_map::entry* b = live_.at(w.address)) fresh.push_back(b->id);
      }
      std::sort(fresh.begin(), fresh.end());
    } else {
      L.written = L.touched;
    }
    add_launch(i, e, std::move(L), std::move(touches), std::move(fresh));
  }

  void copy_or_set(std::size_t i, const event& e) {
    policy::launch L;
    std::vector<touch> touches;
    if (const block_map::entry* d = live_.find(e.address)) {
      L.touched.push_back(d->id);
      L.written.push_back(d->id);
      touches.push_back({d->id, 0, e.address - d->base});
    }
    if (e.kind == event_kind::memcpy) {
      L.kind = policy::launch_kind::memcpy;
      L.kernel = pseudo_kernel("memcpy", memcpy_kernel_);
      if (const block_map::entry* s = live_.find(e.source)) {
        L.touched.push_back(s->id);
        touches.push_back({s->id, 8, e.source - s->base});
      }
      // A copy from or to host memory cannot be repeated faithfully later.
      L.replayable = e.copy == copy_kind::device_to_device;
    } else {
      L.kind = policy::launch_kind::memset;
      L.kernel = pseudo_kernel("memset", memset_kernel_);
      L.replayable = true;
    }
    add_launch(i, e, std::move(L), std::move(touches));
  }

  const trace& t_;
  const analysis_options& o_;
  analysed_iteration out_;
  block_map before_;
  block_map live_;  // ids are buffer ids
  std::vector<scan_hit> hits_;
  // Per launch: touched blocks it found still filled as allocated (Note [Filled fresh
  // blocks] in block_hashes.hpp), ascending.
  std::vector<std::vector<buffer_id>> fresh_;
  std::uint32_t next_alloc_index_ = 0;
  std::uint32_t memcpy_kernel_ = none;
  std::uint32_t memset_kernel_ = none;
};

}  // namespace

analysed_iteration analyse(const trace& t, event_range iteration, const analysis_options& options) {
  validate(t);
  if (iteration.begin > iteration.end || iteration.end > t.events.size()) {
    throw trace_format_error("analyse: events [" + std::to_string(iteration.begin) + ", " +
                             std::to_string(iteration.end) + ") lie outside the trace of " +
                             std::to_string(t.events.size()) + " events");
  }
  builder b(t, options);
  b.prologue(iteration.begin);
  b.walk(iteration);
  return b.finish();
}

analysed_iteration analyse_last_iteration(const trace& t, const analysis_options& options) {
  std::vector<event_range> marked = t.marked_iterations();
  if (!marked.empty()) return analyse(t, marked.back(), options);
  detected_iterations found = detect_iterations(t);
  if (!found.found()) {
    throw config_error("analyse: the trace has no iteration markers and no iteration could be detected: " +
                       found.reason);
  }
  return analyse(t, found.iterations.back(), options);
}

}  // namespace sublinear::tracer
