// The recorder (Note [Recorder] in recorder.hpp).
#include "tracer/recorder.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace sublinear::tracer {

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

namespace {

std::uint64_t address_of(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

std::atomic<recorder*> g_default{nullptr};

}  // namespace

struct recorder::impl {
  struct live_info {
    std::uint64_t size = 0;
    device::stream_handle stream = nullptr;
    bool evictable = false;
  };

  explicit impl(const recorder_options& o) {
    current.device = o.device;
    current.granularity = o.granularity;
    current.streams.push_back(0);  // index 0 is always the default stream
    stream_index.emplace(nullptr, 0);
  }

  mutable std::mutex mutex;
  trace current;
  std::uint64_t next_seq = 0;
  std::uint64_t markers = 0;

  std::unordered_map<std::uint64_t, std::uint32_t> kernel_by_handle;
  std::uint64_t last_handle = ~std::uint64_t{0};
  std::uint32_t last_kernel = 0;

  std::unordered_map<device::stream_handle, std::uint32_t> stream_index;
  device::stream_handle last_stream = nullptr;
  std::uint32_t last_stream_index = 0;

  std::unordered_map<std::uint64_t, live_info> live;
  block_map blocks;
  std::uint32_t next_block_id = 0;
  // Frees still to come for blocks closed by an alloc at the same address.
  std::unordered_map<std::uint64_t, std::uint32_t> orphan_frees;

  // Precondition: mutex held.
  std::uint32_t stream_of(device::stream_handle s) {
    if (s == last_stream) return last_stream_index;
    auto [it, fresh] = stream_index.try_emplace(s, static_cast<std::uint32_t>(current.streams.size()));
    if (fresh) current.streams.push_back(address_of(s));
    last_stream = s;
    last_stream_index = it->second;
    return it->second;
  }

  // Precondition: mutex held and recording.
  event& append(event_kind kind, device::stream_handle s) {
    event& e = current.events.emplace_back();
    e.seq = next_seq++;
    e.time_ns = now_ns();
    e.kind = kind;
    e.stream = stream_of(s);
    return e;
  }

  // Precondition: mutex held. The event with sequence number `seq` in the current trace.
  event* by_seq(std::uint64_t seq) {
    if (current.events.empty()) return nullptr;
    const std::uint64_t first = current.events.front().seq;
    if (seq < first || seq - first >= current.events.size()) return nullptr;
    event& e = current.events[static_cast<std::size_t>(seq - first)];
    return e.seq == seq ? &e : nullptr;
  }

  // Precondition: mutex held and recording.
  void emit_preexisting() {
    std::vector<std::pair<std::uint64_t, live_info>> sorted(live.begin(), live.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [base, info] : sorted) {
      event& e = append(event_kind::alloc, info.stream);
      e.address = base;
      e.bytes = info.size;
      e.flags = event_flags::preexisting | (info.evictable ? event_flags::evictable : 0);
    }
  }

  // Precondition: mutex held. Starts an empty trace that keeps the tables.
  trace fresh_trace(const trace& from) {
    trace t;
    t.device = from.device;
    t.granularity = from.granularity;
    t.kernels = from.kernels;
    t.streams = from.streams;
    return t;
  }
};

recorder::recorder(recorder_options options)
    : impl_(std::make_unique<impl>(options)), options_(std::move(options)) {
  if (options_.start_recording) start();
}

void recorder::set_granularity(std::uint64_t granularity) {
  std::lock_guard lock(impl_->mutex);
  impl_->current.granularity = granularity;
}

recorder::~recorder() {
  // Do not leave a dangling default behind.
  recorder* self = this;
  g_default.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
}

// ---- allocation observer -------------------------------------------------------------------

bool recorder::place_evictable(std::size_t size, device::stream_handle stream) {
  allocation_observer* next = next_.load(std::memory_order_acquire);
  return next != nullptr && next->place_evictable(size, stream);
}

std::optional<allocator::pack_slot> recorder::pack_slot_for(std::size_t size, device::stream_handle stream) {
  allocation_observer* next = next_.load(std::memory_order_acquire);
  return next != nullptr ? next->pack_slot_for(size, stream) : std::nullopt;
}

bool recorder::defer_free(void* ptr, std::size_t size, device::stream_handle stream) {
  allocation_observer* next = next_.load(std::memory_order_acquire);
  return next != nullptr && next->defer_free(ptr, size, stream);
}

void recorder::on_allocate(void* ptr, std::size_t size, device::stream_handle stream, bool evictable) {
  {
    std::lock_guard lock(impl_->mutex);
    const std::uint64_t base = address_of(ptr);
    const bool rec = recording();
    if (auto it = impl_->live.find(base); it != impl_->live.end()) {
      // The free of the previous block at this address has not been reported yet
      // (Note [Recorder], Limitations): close it now and drop that free when it comes.
      if (rec) {
        event& f = impl_->append(event_kind::free, it->second.stream);
        f.address = base;
        f.bytes = it->second.size;
      }
      ++impl_->orphan_frees[base];
      impl_->live.erase(it);
      impl_->blocks.erase(base);
    }
    impl_->live.emplace(base, impl::live_info{size, stream, evictable});
    impl_->blocks.insert(base, size, impl_->next_block_id++);
    if (rec) {
      event& e = impl_->append(event_kind::alloc, stream);
      e.address = base;
      e.bytes = size;
      e.flags = evictable ? event_flags::evictable : 0;
    }
  }
  if (allocation_observer* next = next_.load(std::memory_order_acquire)) {
    next->on_allocate(ptr, size, stream, evictable);
  }
}

void recorder::on_free(void* ptr, std::size_t size, device::stream_handle stream) {
  {
    std::lock_guard lock(impl_->mutex);
    const std::uint64_t base = address_of(ptr);
    if (auto o = impl_->orphan_frees.find(base); o != impl_->orphan_frees.end()) {
      if (--o->second == 0) impl_->orphan_frees.erase(o);
    } else if (auto it = impl_->live.find(base); it != impl_->live.end()) {
      if (recording()) {
        event& e = impl_->append(event_kind::free, it->second.stream);
        e.address = base;
        e.bytes = it->second.size;
      }
      impl_->live.erase(it);
      impl_->blocks.erase(base);
    }
    // Otherwise: a block allocated before this recorder was installed; nothing to close.
  }
  if (allocation_observer* next = next_.load(std::memory_order_acquire)) {
    next->on_free(ptr, size, stream);
  }
}

// ---- reports ------------------------------------------------------------------------------------

std::uint64_t recorder::record_launch(const launch_args& args, describe_kernel_fn describe,
                                      const void* context) {
  if (!recording()) return no_seq;
  std::lock_guard lock(impl_->mutex);
  if (!recording()) return no_seq;
  trace& t = impl_->current;
  std::uint32_t k = impl_->last_kernel;
  if (args.kernel_handle != impl_->last_handle) {
    auto it = impl_->kernel_by_handle.find(args.kernel_handle);
    if (it == impl_->kernel_by_handle.end()) {
      kernel_info info = describe(context);
      info.handle = args.kernel_handle;
      info.never_replay = info.never_replay || options_.never_replay.matches(info.name);
      it = impl_->kernel_by_handle.emplace(args.kernel_handle, static_cast<std::uint32_t>(t.kernels.size())).first;
      t.kernels.push_back(std::move(info));
    }
    k = it->second;
    impl_->last_handle = args.kernel_handle;
    impl_->last_kernel = k;
  }
  event& e = impl_->append(event_kind::launch, args.stream);
  e.kernel = k;
  e.grid = args.grid;
  e.block = args.block;
  e.shared_mem = args.shared_mem;
  e.correlation = args.correlation;
  e.flags = static_cast<std::uint8_t>((args.flags & event_flags::names_event) |
                                      (t.kernels[k].never_replay ? event_flags::never_replay : 0));
  for (const device::launch_attribute& a : args.attributes) {
    if (a.id == device::launch_attribute_id::ignore) continue;
    t.launch_attributes.push_back({e.seq, a});
    if (!device::verdict_for(a.id).replayable) e.flags |= event_flags::names_event;
  }
  // 8-aligned offsets, so scanners may treat a block's words as aligned.
  const std::size_t pad = (arena_alignment - t.arena.size() % arena_alignment) % arena_alignment;
  const std::size_t offset = t.arena.size() + pad;
  if (t.arena.capacity() < offset + args.params.size()) {
    t.arena.reserve(std::max(t.arena.capacity() * 2, offset + args.params.size() + 4096));
  }
  t.arena.resize(offset);
  t.arena.insert(t.arena.end(), args.params.begin(), args.params.end());
  e.param_offset = offset;
  e.bytes = args.params.size();
  return e.seq;
}

std::uint64_t recorder::record_memcpy(const void* dst, const void* src, std::size_t bytes,
                                      device::stream_handle stream, copy_kind kind) {
  if (!recording()) return no_seq;
  std::lock_guard lock(impl_->mutex);
  if (!recording()) return no_seq;
  if (kind == copy_kind::unknown) {
    const bool d = impl_->blocks.find(address_of(dst)) != nullptr;
    const bool s = impl_->blocks.find(address_of(src)) != nullptr;
    kind = d ? (s ? copy_kind::device_to_device : copy_kind::host_to_device)
             : (s ? copy_kind::device_to_host : copy_kind::host_to_host);
  }
  event& e = impl_->append(event_kind::memcpy, stream);
  e.address = address_of(dst);
  e.source = address_of(src);
  e.bytes = bytes;
  e.copy = kind;
  return e.seq;
}

std::uint64_t recorder::record_memset(const void* dst, int value, std::size_t bytes,
                                      device::stream_handle stream) {
  if (!recording()) return no_seq;
  std::lock_guard lock(impl_->mutex);
  if (!recording()) return no_seq;
  event& e = impl_->append(event_kind::memset, stream);
  e.address = address_of(dst);
  e.source = static_cast<std::uint8_t>(value);  // cudaMemset uses the low byte
  e.bytes = bytes;
  return e.seq;
}

std::uint64_t recorder::record_event_record(std::uint64_t event_handle, device::stream_handle stream) {
  if (!recording()) return no_seq;
  std::lock_guard lock(impl_->mutex);
  if (!recording()) return no_seq;
  event& e = impl_->append(event_kind::event_record, stream);
  e.address = event_handle;
  return e.seq;
}

std::uint64_t recorder::record_event_wait(std::uint64_t event_handle, device::stream_handle stream) {
  if (!recording()) return no_seq;
  std::lock_guard lock(impl_->mutex);
  if (!recording()) return no_seq;
  event& e = impl_->append(event_kind::event_wait, stream);
  e.address = event_handle;
  return e.seq;
}

std::uint64_t recorder::mark_iteration() {
  std::lock_guard lock(impl_->mutex);
  const std::uint64_t number = impl_->markers++;
  if (!recording()) return no_seq;
  event& e = impl_->append(event_kind::marker, nullptr);
  e.address = number;
  return e.seq;
}

void recorder::set_duration(std::uint64_t seq, std::uint64_t duration_ns) {
  std::lock_guard lock(impl_->mutex);
  if (event* e = impl_->by_seq(seq)) {
    e->duration_ns = duration_ns;
    e->flags |= event_flags::timed;
  }
}

void recorder::set_writes(std::uint64_t seq, std::span<const std::uint64_t> block_bases,
                          std::span<const std::uint64_t> fresh) {
  std::lock_guard lock(impl_->mutex);
  if (event* e = impl_->by_seq(seq)) {
    if ((e->flags & event_flags::writes_observed) != 0) return;  // reported once
    e->flags |= event_flags::writes_observed;
    for (std::uint64_t base : block_bases) impl_->current.writes.push_back({seq, base});
    for (std::uint64_t base : fresh) impl_->current.fresh.push_back({seq, base});
  }
}

// ---- scan -----------------------------------------------------------------------------------------

void recorder::scan(std::span<const std::byte> params, std::vector<scan_hit>& out) const {
  std::lock_guard lock(impl_->mutex);
  scan_params(params, impl_->blocks, out);
}

std::vector<block_extent> recorder::touched_blocks(std::span<const std::byte> params) const {
  std::vector<scan_hit> hits;
  std::vector<block_extent> out;
  std::lock_guard lock(impl_->mutex);
  scan_params(params, impl_->blocks, hits);
  for (const scan_hit& h : hits) {
    const block_map::entry* e = impl_->blocks.at(h.base);
    out.push_back({h.base, e->end - e->base, e->id});
  }
  std::sort(out.begin(), out.end(), [](const block_extent& a, const block_extent& b) { return a.base < b.base; });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::size_t recorder::live_blocks() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->live.size();
}

// ---- control --------------------------------------------------------------------------------------

void recorder::start() {
  std::lock_guard lock(impl_->mutex);
  impl_->current = impl_->fresh_trace(impl_->current);
  recording_.store(true, std::memory_order_release);
  impl_->emit_preexisting();
}

void recorder::stop() {
  std::lock_guard lock(impl_->mutex);
  recording_.store(false, std::memory_order_release);
}

trace recorder::take() {
  std::lock_guard lock(impl_->mutex);
  // Copied out, not moved: the recorder keeps its buffers' capacity (and their pages), so
  // the next trace appends without reallocating or faulting pages in on the launch path.
  trace& cur = impl_->current;
  trace out = impl_->fresh_trace(cur);
  out.events.assign(cur.events.begin(), cur.events.end());
  out.arena.assign(cur.arena.begin(), cur.arena.end());
  out.writes.assign(cur.writes.begin(), cur.writes.end());
  std::sort(out.writes.begin(), out.writes.end());
  out.fresh.assign(cur.fresh.begin(), cur.fresh.end());
  std::sort(out.fresh.begin(), out.fresh.end());
  out.launch_attributes.assign(cur.launch_attributes.begin(), cur.launch_attributes.end());
  cur.events.clear();
  cur.arena.clear();
  cur.writes.clear();
  cur.fresh.clear();
  cur.launch_attributes.clear();
  if (recording()) impl_->emit_preexisting();
  return out;
}

trace recorder::snapshot() const {
  std::lock_guard lock(impl_->mutex);
  trace out = impl_->current;
  std::sort(out.writes.begin(), out.writes.end());
  std::sort(out.fresh.begin(), out.fresh.end());
  return out;
}

std::size_t recorder::event_count() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->current.events.size();
}

// ---- default recorder ---------------------------------------------------------------------------

recorder* default_recorder() noexcept { return g_default.load(std::memory_order_acquire); }

recorder* set_default_recorder(recorder* r) noexcept { return g_default.exchange(r, std::memory_order_acq_rel); }

}  // namespace sublinear::tracer

extern "C" void sublinear_mark_iteration(void) {
  try {
    if (sublinear::tracer::recorder* r = sublinear::tracer::default_recorder()) r->mark_iteration();
  } catch (const std::exception& e) {
    // A C entry point must not throw; the only failure is running out of memory.
    std::fprintf(stderr, "sublinear: sublinear_mark_iteration failed: %s\n", e.what());
  }
}
