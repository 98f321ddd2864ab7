// Costs of the host VMM backend's calls, per chunk size.
//
// BM_host_vmm_cycle: create + map + set_access + unmap + release_chunk, what the
//   allocator pays to give a chunk's pages back and get fresh ones (an eviction and a
//   restore), without touching the memory.
// BM_host_vmm_remap: map + set_access + unmap of an existing chunk, what it pays when
//   chunks are pooled.
// BM_host_vmm_cycle_touched: the cycle plus a write to every 4 KiB page, the price of
//   fresh pages (faults, zeroing, punching them out again) that the CPU pays and a GPU
//   does not in this form.
// Reservations are made once per benchmark: the allocator reserves once and keeps it.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>

#include "device/host/host_vmm.hpp"

namespace {

using sublinear::device::chunk_handle;
using sublinear::device::host_vmm;
using sublinear::device::host_vmm_options;
using sublinear::device::vmm_status;

constexpr std::size_t page = 4096;

void check(benchmark::State& state, vmm_status status, const host_vmm& device) {
  if (status != vmm_status::ok) {
    state.SkipWithError(device.last_error().c_str());
  }
}

void BM_host_vmm_cycle(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  host_vmm device(host_vmm_options{});
  void* base = nullptr;
  check(state, device.reserve(size, &base), device);
  for (auto _ : state) {
    chunk_handle h = 0;
    if (device.create_chunk(size, &h) != vmm_status::ok || device.map(base, size, h) != vmm_status::ok ||
        device.set_access(base, size) != vmm_status::ok || device.unmap(base, size) != vmm_status::ok ||
        device.release_chunk(h) != vmm_status::ok) {
      state.SkipWithError(device.last_error().c_str());
      break;
    }
  }
  device.release(base, size);
}

void BM_host_vmm_remap(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  host_vmm device(host_vmm_options{});
  void* base = nullptr;
  chunk_handle h = 0;
  check(state, device.reserve(size, &base), device);
  check(state, device.create_chunk(size, &h), device);
  for (auto _ : state) {
    if (device.map(base, size, h) != vmm_status::ok || device.set_access(base, size) != vmm_status::ok ||
        device.unmap(base, size) != vmm_status::ok) {
      state.SkipWithError(device.last_error().c_str());
      break;
    }
  }
  device.release_chunk(h);
  device.release(base, size);
}

void BM_host_vmm_cycle_touched(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  host_vmm device(host_vmm_options{});
  void* base = nullptr;
  check(state, device.reserve(size, &base), device);
  auto* bytes = static_cast<volatile unsigned char*>(base);
  for (auto _ : state) {
    chunk_handle h = 0;
    if (device.create_chunk(size, &h) != vmm_status::ok || device.map(base, size, h) != vmm_status::ok ||
        device.set_access(base, size) != vmm_status::ok) {
      state.SkipWithError(device.last_error().c_str());
      break;
    }
    for (std::size_t off = 0; off < size; off += page) bytes[off] = 1;
    if (device.unmap(base, size) != vmm_status::ok || device.release_chunk(h) != vmm_status::ok) {
      state.SkipWithError(device.last_error().c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  device.release(base, size);
}

// 64 KiB (the host granularity), 2 MiB (a GPU's), 20 MiB and 64 MiB (large segments).
void chunk_sizes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t bytes : {std::int64_t{64} << 10, std::int64_t{2} << 20,
                                   std::int64_t{20} << 20, std::int64_t{64} << 20}) {
    b->Arg(bytes);
  }
}

BENCHMARK(BM_host_vmm_cycle)->Apply(chunk_sizes);
BENCHMARK(BM_host_vmm_remap)->Apply(chunk_sizes);
BENCHMARK(BM_host_vmm_cycle_touched)->Apply(chunk_sizes);

}  // namespace
