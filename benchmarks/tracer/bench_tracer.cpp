// Figures for the tracer: interception cost per launch, pointer-scan cost, trace size and
// analysis time per iteration on ResNet-200. Google Benchmark; figures, never assertions.
//
//   bench_tracer --benchmark_filter=Intercept   cost the host collector adds per launch
//   bench_tracer --benchmark_filter=ResNet      trace size and analysis time per iteration
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "device/host/device.hpp"
#include "workloads/host_session.hpp"
#include "workloads/models/resnet.hpp"
#include "workloads/training.hpp"
#include "tracer/analysis.hpp"
#include "tracer/host/host_collector.hpp"
#include "tracer/iterations.hpp"
#include "tracer/pointer_scan.hpp"
#include "tracer/recorder.hpp"
#include "tracer/trace_file.hpp"

namespace sublinear::tracer {
namespace {

// A kernel whose parameter block is `Bytes` long: `Pointers` pointer words first, then
// scalars. The body does nothing: the benchmarks measure the launch path.
template <std::size_t Bytes>
struct block_params {
  std::array<std::uint64_t, Bytes / 8> words;
};

template <std::size_t Bytes>
void empty_body(const device::host::launch_config&, const block_params<Bytes>&) {}

template <std::size_t Bytes>
const device::host::kernel& block_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<block_params<Bytes>, &empty_body<Bytes>>(
      "bench_tracer.block_" + std::to_string(Bytes), {device::host::param_info{0, static_cast<std::uint32_t>(Bytes)}});
  return k;
}

// Live blocks like a training process has: `count` blocks of 4 KiB in one region.
struct live_blocks {
  explicit live_blocks(recorder& rec, std::size_t count) : base(0x7f0000000000ULL) {
    for (std::size_t i = 0; i < count; ++i) {
      rec.on_allocate(reinterpret_cast<void*>(base + i * 4096), 4096, nullptr, false);
    }
  }
  std::uint64_t base;
};

template <std::size_t Bytes>
block_params<Bytes> make_params(std::uint64_t base, std::size_t pointers, std::size_t blocks) {
  block_params<Bytes> p{};
  for (std::size_t i = 0; i < p.words.size(); ++i) {
    p.words[i] = i < pointers ? base + ((i * 7919) % blocks) * 4096 + 64 : i * 3 + 1;  // pointers, then scalars
  }
  return p;
}

// ---- interception: what the host collector adds to one launch ---------------------------------

// The hook pair as the device calls it, on a synthetic launch record (no queueing): the cost
// a traced launch pays over an untraced one. Arg 0: parameter bytes; arg 1: pointer words.
template <std::size_t Bytes>
void BM_InterceptLaunch(benchmark::State& state) {
  recorder rec;
  const live_blocks blocks(rec, 10000);
  device::host::device dev(device::host::device_options{true});
  host_collector collector(dev, rec);
  const auto params = make_params<Bytes>(blocks.base, static_cast<std::size_t>(state.range(0)), 10000);
  device::host::launch_record r;
  r.fn = &block_kernel<Bytes>();
  r.config.grid = {64, 1, 1};
  r.on = dev.default_stream();
  r.params = reinterpret_cast<const std::byte*>(&params);
  r.param_bytes = Bytes;
  std::int64_t n = 0;
  for (auto _ : state) {
    r.correlation_id = static_cast<std::uint64_t>(++n);
    collector.on_enter(r);
    collector.on_exit(r);
    if ((n & 0x3FFF) == 0) {
      state.PauseTiming();
      static_cast<void>(rec.take());  // bound the trace's memory
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["param_bytes"] = static_cast<double>(Bytes);
}
BENCHMARK_TEMPLATE(BM_InterceptLaunch, 64)->Arg(3);
BENCHMARK_TEMPLATE(BM_InterceptLaunch, 256)->Arg(6);
BENCHMARK_TEMPLATE(BM_InterceptLaunch, 1024)->Arg(8)->Arg(96);
BENCHMARK_TEMPLATE(BM_InterceptLaunch, 4096)->Arg(8);

// The same launches through the device (synchronous: the empty kernel runs inline), with
// and without the collector: the interception cost in place. Arg: 1 with the collector.
template <std::size_t Bytes>
void BM_DeviceLaunch(benchmark::State& state) {
  recorder rec;
  const live_blocks blocks(rec, 10000);
  device::host::device dev(device::host::device_options{true});
  std::unique_ptr<host_collector> collector;
  if (state.range(0) != 0) collector = std::make_unique<host_collector>(dev, rec);
  const auto params = make_params<Bytes>(blocks.base, 8, 10000);
  const device::host::kernel& k = block_kernel<Bytes>();
  device::host::launch_config cfg;
  std::int64_t n = 0;
  for (auto _ : state) {
    dev.launch(k, cfg, nullptr, &params);
    if ((++n & 0x3FFF) == 0) {
      state.PauseTiming();
      static_cast<void>(rec.take());
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_TEMPLATE(BM_DeviceLaunch, 1024)->Arg(0)->Arg(1);

// Recording plus a scan of the parameter block against the live blocks at launch time
// (what write observation and the runtime's launch gate need). Arg 0: pointer words.
template <std::size_t Bytes>
void BM_RecordAndScan(benchmark::State& state) {
  recorder rec;
  const live_blocks blocks(rec, 10000);
  const auto params = make_params<Bytes>(blocks.base, static_cast<std::size_t>(state.range(0)), 10000);
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(&params), Bytes);
  const kernel_info info{"bench", 0, Bytes, {{0, Bytes}}, false};
  launch_args a;
  a.params = bytes;
  std::vector<scan_hit> hits;
  std::int64_t n = 0;
  for (auto _ : state) {
    a.correlation = static_cast<std::uint64_t>(++n);
    benchmark::DoNotOptimize(rec.record_launch(a, [](const void* c) { return *static_cast<const kernel_info*>(c); }, &info));
    hits.clear();
    rec.scan(bytes, hits);
    benchmark::DoNotOptimize(hits.data());
    if ((n & 0x3FFF) == 0) {
      state.PauseTiming();
      static_cast<void>(rec.take());
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["hits"] = static_cast<double>(hits.size());
}
BENCHMARK_TEMPLATE(BM_RecordAndScan, 1024)->Arg(8)->Arg(96)->Arg(128);

// The scan alone: one lookup per word. Args: pointer words in a 1 KiB block, live blocks.
void BM_ScanParams(benchmark::State& state) {
  block_map m;
  const auto live = static_cast<std::size_t>(state.range(1));
  const std::uint64_t base = 0x7f0000000000ULL;
  for (std::size_t i = 0; i < live; ++i) m.insert(base + i * 4096, 4096, static_cast<std::uint32_t>(i));
  const auto params = make_params<1024>(base, static_cast<std::size_t>(state.range(0)), live);
  std::vector<scan_hit> hits;
  for (auto _ : state) {
    hits.clear();
    scan_params({reinterpret_cast<const std::byte*>(&params), 1024}, m, hits);
    benchmark::DoNotOptimize(hits.data());
  }
  state.SetItemsProcessed(state.iterations() * 128);  // words
}
BENCHMARK(BM_ScanParams)->Args({8, 10000})->Args({128, 1000})->Args({128, 100000});

// ---- a real workload: ResNet-200 on the host device ----------------------------------------------

// One training iteration of ResNet-`depth` (default sizes of resnet_config): the trace
// begins with a preexisting alloc for every live block (parameters, gradients, optimizer
// state), then holds the third iteration's events and ends with its marker.
const trace& resnet_iteration(std::int64_t depth) {
  static std::map<std::int64_t, trace> cache;
  if (auto it = cache.find(depth); it != cache.end()) return it->second;
  workloads::host_session session;
  recorder_options ro;
  ro.granularity = 64 << 10;
  recorder rec(ro);
  session.allocator().set_observer(&rec);
  {
    host_collector collector(session.device(), rec);
    auto ctx = session.make_context();
    workloads::models::resnet_config c;
    c.depth = depth;
    workloads::models::resnet m(c);
    workloads::training_options o;
    o.iterations = 3;
    int done = 0;
    o.on_iteration_end = [&](const workloads::iteration_figures&) {
      if (++done == 2) static_cast<void>(rec.take());  // the next trace is the third iteration
      if (done == 3) rec.mark_iteration();
    };
    static_cast<void>(workloads::train(ctx, m, o));
    m.release();
    session.device().synchronize();
  }
  trace t = rec.take();
  session.allocator().set_observer(nullptr);
  std::size_t end = 0;
  while (end < t.events.size() && t.events[end].kind != event_kind::marker) ++end;
  t.events.resize(std::min(end + 1, t.events.size()));  // drop the model's teardown
  return cache.emplace(depth, std::move(t)).first->second;
}

void BM_ResNetTraceSize(benchmark::State& state) {
  const trace& t = resnet_iteration(state.range(0));
  std::vector<std::byte> bytes;
  for (auto _ : state) {
    bytes = encode_trace(t);
    benchmark::DoNotOptimize(bytes.data());
  }
  std::size_t launches = 0;
  for (const event& e : t.events) launches += e.kind == event_kind::launch ? 1 : 0;
  state.counters["file_bytes_per_iteration"] = static_cast<double>(bytes.size());
  state.counters["events"] = static_cast<double>(t.events.size());
  state.counters["launches"] = static_cast<double>(launches);
  state.counters["arena_bytes"] = static_cast<double>(t.arena.size());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes.size()));
}
BENCHMARK(BM_ResNetTraceSize)->Arg(200)->Arg(1000)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_ResNetAnalyse(benchmark::State& state) {
  const trace& t = resnet_iteration(state.range(0));
  const event_range r{0, t.events.size() - 1};
  std::size_t candidates = 0;
  for (auto _ : state) {
    const analysed_iteration it = analyse(t, r);
    candidates = it.graph.candidates.size();
    benchmark::DoNotOptimize(it.graph.launches.data());
  }
  state.counters["candidates"] = static_cast<double>(candidates);
}
BENCHMARK(BM_ResNetAnalyse)->Arg(200)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_ResNetDecode(benchmark::State& state) {
  const std::vector<std::byte> bytes = encode_trace(resnet_iteration(state.range(0)));
  for (auto _ : state) {
    const trace t = decode_trace(bytes);
    benchmark::DoNotOptimize(t.events.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes.size()));
}
BENCHMARK(BM_ResNetDecode)->Arg(200)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sublinear::tracer
