// The host-device collector (Notes [Host collector] and [Write observation]).
#include "tracer/host/host_collector.hpp"

#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace sublinear::tracer {

namespace {

kernel_info describe_host_kernel(const void* context) {
  const auto* k = static_cast<const device::host::kernel*>(context);
  kernel_info info;
  info.name = k->name;
  info.param_bytes = static_cast<std::uint32_t>(k->param_bytes);
  info.params.reserve(k->params.size());
  for (const device::host::param_info& p : k->params) info.params.push_back({p.offset, p.size});
  return info;
}

std::uint64_t hash_block(const block_extent& b) noexcept {
  return hash_bytes(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(b.base)), static_cast<std::size_t>(b.size));
}

// Shared by the two host functions that bracket one launch.
struct probe {
  recorder* rec = nullptr;
  std::uint64_t seq = no_seq;
  bool time = false;
  bool observe = false;
  kept_hashes* kept = nullptr;  // Note [Hash reuse]; null: hash every block before
  std::uint64_t epoch = 0;
  std::atomic<std::uint64_t>* hashed = nullptr;  // blocks hashed before the kernel
  std::atomic<std::uint64_t>* reused = nullptr;  // blocks whose kept hash served
  std::vector<block_extent> blocks;
  std::vector<std::uint64_t> before;
  std::vector<std::uint8_t> fresh;  // still filled as allocated (Note [Filled fresh blocks])
  std::uint64_t t0 = 0;

  void begin() {
    const std::uint64_t entered = observe ? now_ns() : 0;
    if (observe) {
      before.clear();
      before.reserve(blocks.size());
      fresh.assign(blocks.size(), 0);
      std::uint64_t reused_here = 0;
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        const block_extent& b = blocks[i];
        std::uint64_t h = 0;
        if (kept != nullptr && kept->find(b, epoch, h)) {
          ++reused_here;
        } else {
          h = hash_block(b);
          fresh[i] = all_bytes_are(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(b.base)),
                                   static_cast<std::size_t>(b.size), fresh_fill_byte)
                         ? 1
                         : 0;
        }
        before.push_back(h);
      }
      reused->fetch_add(reused_here, std::memory_order_relaxed);
      hashed->fetch_add(blocks.size() - reused_here, std::memory_order_relaxed);
    }
    t0 = now_ns();
    if (observe) rec->add_observation_ns(t0 - entered);
  }
  void end() {
    const std::uint64_t t1 = now_ns();
    if (time) rec->set_duration(seq, t1 - t0);
    if (observe) {
      std::vector<std::uint64_t> written, untouched;
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        const std::uint64_t after = hash_block(blocks[i]);
        if (after != before[i]) {
          written.push_back(blocks[i].base);
        } else if (fresh[i] != 0) {
          untouched.push_back(blocks[i].base);
        }
        if (kept != nullptr) kept->keep(blocks[i], epoch, after);
      }
      rec->set_writes(seq, written, untouched);
      rec->add_observation_ns(now_ns() - t1);
    }
  }
};

// The probe opened at on_enter, waiting for its on_exit on the same thread. A stack,
// because a hook of another device may launch (and be intercepted) in between.
struct open_probe {
  const host_collector* owner;
  std::uint64_t correlation;
  std::shared_ptr<probe> state;
};
thread_local std::vector<open_probe> t_open;

}  // namespace

host_collector::host_collector(device::host::device& dev, recorder& rec, host_collector_options options)
    : dev_(dev), rec_(rec), options_(options), default_stream_(dev.default_stream()) {
  dev_.add_hook(this);
}

host_collector::~host_collector() {
  dev_.synchronize();
  dev_.remove_hook(this);
}

void host_collector::on_enter(const device::host::launch_record& r) {
  // The clock only while recording: untraced iterations take this path on every launch.
  const std::uint64_t entered = rec_.recording() ? now_ns() : 0;
  launch_args a;
  a.kernel_handle = r.fn->id;
  a.grid = {r.config.grid.x, r.config.grid.y, r.config.grid.z};
  a.block = {r.config.block.x, r.config.block.y, r.config.block.z};
  a.shared_mem = r.config.shared_mem;
  a.stream = handle_of(r.on);
  a.params = {r.params, r.param_bytes};
  a.attributes = r.config.attributes;
  a.correlation = r.correlation_id;
  const std::uint64_t seq = rec_.record_launch(a, &describe_host_kernel, r.fn);
  if (seq == no_seq) {
    // An unobserved kernel may write anything: hashes kept so far are stale once it runs.
    // (A plain load first: untraced iterations take this path on every launch.)
    if (kept_in_epoch_.load(std::memory_order_relaxed) && kept_in_epoch_.exchange(false, std::memory_order_relaxed)) {
      epoch_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  if (!options_.time_launches && !options_.observe_writes) {
    if (entered != 0) rec_.add_recording_ns(now_ns() - entered);
    return;
  }

  auto p = std::make_shared<probe>();
  p->rec = &rec_;
  p->seq = seq;
  p->time = options_.time_launches;
  p->observe = options_.observe_writes;
  p->hashed = &hashed_;
  p->reused = &reused_;
  if (p->observe) {
    p->blocks = rec_.touched_blocks(a.params);
    if (options_.reuse_hashes) {
      p->kept = &kept_;
      p->epoch = epoch_.load(std::memory_order_relaxed);
      kept_in_epoch_.store(true, std::memory_order_relaxed);
    }
  }
  dev_.host_func(r.on, [p] { p->begin(); });
  t_open.push_back({this, r.correlation_id, std::move(p)});
  if (entered != 0) rec_.add_recording_ns(now_ns() - entered);
}

host_collector::before_counts host_collector::before_hashes() const {
  return {hashed_.load(std::memory_order_relaxed), reused_.load(std::memory_order_relaxed)};
}

void host_collector::on_exit(const device::host::launch_record& r) {
  for (auto it = t_open.rbegin(); it != t_open.rend(); ++it) {
    if (it->owner == this && it->correlation == r.correlation_id) {
      const std::uint64_t entered = now_ns();
      std::shared_ptr<probe> p = std::move(it->state);
      t_open.erase(std::next(it).base());
      dev_.host_func(r.on, [p] { p->end(); });
      rec_.add_recording_ns(now_ns() - entered);
      return;
    }
  }
}

// Copies and sets are recorded at their ENTER, whoever issued them; the device has no EXIT
// for them, so they are not timed (analysis estimates their cost from their bytes).
void host_collector::on_memory_op(const device::host::memory_op_record& r) {
  const std::uint64_t entered = rec_.recording() ? now_ns() : 0;
  if (options_.observe_writes && options_.reuse_hashes) {
    // Its destination's kept hashes go stale when it runs (Note [Hash reuse]).
    const auto dst = reinterpret_cast<std::uint64_t>(r.dst);
    dev_.host_func(r.on, [kept = &kept_, dst, bytes = static_cast<std::uint64_t>(r.bytes)] { kept->drop(dst, bytes); });
  }
  if (r.op == device::host::memory_op_record::kind::copy) {
    rec_.record_memcpy(r.dst, r.src, r.bytes, handle_of(r.on));
  } else {
    rec_.record_memset(r.dst, r.value, r.bytes, handle_of(r.on));
  }
  if (entered != 0) rec_.add_recording_ns(now_ns() - entered);
}

void host_collector::on_event_op(const device::host::event_op_record& r) {
  if (r.op == device::host::event_op_record::kind::record) {
    rec_.record_event_record(reinterpret_cast<std::uintptr_t>(r.e), handle_of(r.on));
  } else {
    rec_.record_event_wait(reinterpret_cast<std::uintptr_t>(r.e), handle_of(r.on));
  }
}

}  // namespace sublinear::tracer
