// What the CUDA VMM calls cost by chunk size, through the allocator's CUDA backend
// (device/cuda/cuda_vmm.hpp), printed as one JSON object.
//
// Note [VMM call costs]
// Rationale: the allocator's chunk size and its one-access-call-per-range rule
//   (docs/allocator.md) rest on how cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap and
//   cuMemRelease scale with the size of a chunk and with the number of chunks in a range.
//   Published figures (research/allocator_anchors.md) are for other GPUs and drivers;
//   this measures the machine at hand.
// Approach: for each chunk size from 2 MiB to 1 GiB (doubling), one reservation is made
//   and each call of the create / map / set_access / unmap / release cycle is timed on its
//   own, `repeats` times; the JSON gives median, min and max in microseconds. A second
//   figure maps a range from many 2 MiB chunks and times one set_access over the whole
//   range against one call per chunk. Calls go through cuda_vmm, so the figures include
//   its ledger check (a map lookup, well under a microsecond).
// Limitations: wall-clock time on the calling thread with an idle device; the driver may
//   defer work (page-table updates) past the call's return, which these figures miss.
//
// Usage: gpu_vmm_bench [--quick] [--repeats N]. Exit status 0, 77 without a GPU (the JSON
// then says why), 1 when a call fails.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "device/cuda/cuda_vmm.hpp"
#include "device/vmm.hpp"

namespace {

using sublinear::device::chunk_handle;
using sublinear::device::cuda_vmm;
using sublinear::device::vmm_status;

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr int skip_exit_code = 77;

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out + "\"";
}

struct failure {
  std::string what;
};

class stopwatch {
 public:
  stopwatch() : start_(std::chrono::steady_clock::now()) {}
  [[nodiscard]] double micros() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

std::string summary(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  std::ostringstream s;
  s.precision(4);
  s << std::fixed << "{\"median\": " << samples[samples.size() / 2] << ", \"min\": " << samples.front()
    << ", \"max\": " << samples.back() << "}";
  return s.str();
}

void check(cuda_vmm& device, vmm_status status, const char* call) {
  if (status != vmm_status::ok) {
    throw failure{std::string(call) + " failed: " + sublinear::device::to_string(status) + ": " +
                  device.last_error()};
  }
}

// One chunk size: each call of the cycle timed separately.
std::string measure_chunk(cuda_vmm& device, std::size_t size, int repeats) {
  void* base = nullptr;
  check(device, device.reserve(size, &base), "reserve");
  std::vector<double> create, map, access, unmap, release;
  for (int r = 0; r < repeats; ++r) {
    chunk_handle h = 0;
    {
      const stopwatch t;
      check(device, device.create_chunk(size, &h), "create_chunk (cuMemCreate)");
      create.push_back(t.micros());
    }
    {
      const stopwatch t;
      check(device, device.map(base, size, h), "map (cuMemMap)");
      map.push_back(t.micros());
    }
    {
      const stopwatch t;
      check(device, device.set_access(base, size), "set_access (cuMemSetAccess)");
      access.push_back(t.micros());
    }
    {
      const stopwatch t;
      check(device, device.unmap(base, size), "unmap (cuMemUnmap)");
      unmap.push_back(t.micros());
    }
    {
      const stopwatch t;
      check(device, device.release_chunk(h), "release_chunk (cuMemRelease)");
      release.push_back(t.micros());
    }
  }
  check(device, device.release(base, size), "release (cuMemAddressFree)");
  std::ostringstream s;
  s << "{\"chunk_bytes\": " << size << ", \"repeats\": " << repeats << ", \"create_us\": " << summary(create)
    << ", \"map_us\": " << summary(map) << ", \"set_access_us\": " << summary(access)
    << ", \"unmap_us\": " << summary(unmap) << ", \"release_us\": " << summary(release) << "}";
  return s.str();
}

// A range of `chunks` chunks of `chunk` bytes: one set_access over all of it against one
// call per chunk (what the allocator's one-call-per-range rule saves).
std::string measure_access_range(cuda_vmm& device, std::size_t chunk, std::size_t chunks, int repeats) {
  const std::size_t range = chunk * chunks;
  void* base = nullptr;
  check(device, device.reserve(range, &base), "reserve");
  std::vector<chunk_handle> handles(chunks);
  for (auto& h : handles) check(device, device.create_chunk(chunk, &h), "create_chunk (cuMemCreate)");
  auto at = [&](std::size_t i) { return static_cast<void*>(static_cast<char*>(base) + i * chunk); };
  std::vector<double> one_call, per_chunk, map_all, unmap_all;
  for (int r = 0; r < repeats; ++r) {
    for (int mode = 0; mode < 2; ++mode) {
      {
        const stopwatch t;
        for (std::size_t i = 0; i < chunks; ++i) check(device, device.map(at(i), chunk, handles[i]), "map");
        map_all.push_back(t.micros());
      }
      {
        const stopwatch t;
        if (mode == 0) {
          check(device, device.set_access(base, range), "set_access over the range");
        } else {
          for (std::size_t i = 0; i < chunks; ++i) check(device, device.set_access(at(i), chunk), "set_access");
        }
        (mode == 0 ? one_call : per_chunk).push_back(t.micros());
      }
      {
        const stopwatch t;
        for (std::size_t i = 0; i < chunks; ++i) check(device, device.unmap(at(i), chunk), "unmap");
        unmap_all.push_back(t.micros());
      }
    }
  }
  for (const auto h : handles) check(device, device.release_chunk(h), "release_chunk");
  check(device, device.release(base, range), "release");
  std::ostringstream s;
  s << "{\"range_bytes\": " << range << ", \"chunk_bytes\": " << chunk << ", \"chunks\": " << chunks
    << ", \"set_access_one_call_us\": " << summary(one_call)
    << ", \"set_access_per_chunk_us\": " << summary(per_chunk) << ", \"map_all_us\": " << summary(map_all)
    << ", \"unmap_all_us\": " << summary(unmap_all) << "}";
  return s.str();
}

int usage(const char* why) {
  std::fprintf(stderr, "gpu_vmm_bench: %s\nusage: gpu_vmm_bench [--quick] [--repeats N]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int repeats = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
      if (repeats <= 0) return usage("--repeats needs a positive count");
    } else {
      return usage((std::string("unknown argument '") + argv[i] + "'").c_str());
    }
  }
  std::string why;
  const std::unique_ptr<cuda_vmm> device = sublinear::device::make_cuda_vmm(0, &why);
  if (device == nullptr) {
    std::printf("{\"status\": \"skipped\", \"reason\": %s}\n", quoted("no CUDA driver: " + why).c_str());
    return skip_exit_code;
  }
  try {
    std::ostringstream out;
    out << "{\"status\": \"passed\", \"device\": " << device->device() << ", \"granularity\": "
        << device->granularity() << ", \"capacity\": " << device->physical_capacity() << ", \"sizes\": [";
    bool first = true;
    for (std::size_t size = 2 * mib; size <= 1024 * mib; size *= 2) {
      if (size % device->granularity() != 0) continue;
      // Fewer repetitions of the large sizes: their cost is dominated by the size itself.
      const int n = repeats > 0 ? repeats : (quick ? (size <= 64 * mib ? 5 : 2) : (size <= 64 * mib ? 20 : 5));
      out << (first ? "" : ", ") << measure_chunk(*device, size, n);
      first = false;
    }
    const std::size_t chunk = std::max(2 * mib, device->granularity());
    out << "], \"access_range\": " << measure_access_range(*device, chunk, quick ? 64 : 512, quick ? 2 : 5) << "}";
    std::printf("%s\n", out.str().c_str());
    return 0;
  } catch (const failure& f) {
    std::printf("{\"status\": \"failed\", \"reason\": %s}\n", quoted(f.what).c_str());
    return 1;
  }
}
