// Steady-state malloc+free pairs, side by side in one run: the caching allocator, the
// uncached backend that maps and unmaps on every call (the cudaMalloc analogue), and
// glibc malloc/free. Figures only: the targets (<= 100 ns median for the caching pair,
// >= 50x faster than uncached) are read off the output, never asserted.
//
//   build/bin/bench_allocator --benchmark_format=json
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "allocator/caching_allocator.hpp"
#include "device/host/host_vmm.hpp"
#include "allocator/uncached_allocator.hpp"

namespace sublinear::allocator {
namespace {

device::host_vmm& device() {
  static device::host_vmm d{device::host_vmm_options{64 * KiB, 8 * GiB}};
  return d;
}

void BM_caching_malloc_free(benchmark::State& state) {
  device::immediate_events events;
  options o;
  o.reserve = 16 * GiB;
  caching_allocator a(device(), events, o);
  const auto size = static_cast<std::size_t>(state.range(0));
  a.deallocate(a.allocate(size, nullptr));  // warm: the segment is mapped and cached
  for (auto _ : state) {
    void* p = a.allocate(size, nullptr);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
  state.counters["map_calls"] = static_cast<double>(a.get_stats().map_calls);
}

void BM_uncached_malloc_free(benchmark::State& state) {
  uncached_allocator a(device());
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = a.allocate(size);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
}

void BM_glibc_malloc_free(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}

constexpr int kRepetitions = 5;

#define SIZES ->Arg(512)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)
BENCHMARK(BM_caching_malloc_free) SIZES->Repetitions(kRepetitions)->ReportAggregatesOnly(true);
BENCHMARK(BM_uncached_malloc_free) SIZES->Repetitions(kRepetitions)->ReportAggregatesOnly(true);
BENCHMARK(BM_glibc_malloc_free) SIZES->Repetitions(kRepetitions)->ReportAggregatesOnly(true);
#undef SIZES

}  // namespace
}  // namespace sublinear::allocator
