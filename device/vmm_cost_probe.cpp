// Note [VMM cost probe] is in vmm_cost_probe.hpp.
#include "device/vmm_cost_probe.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

namespace sublinear::device {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One cycle of `chunk` at `address`: map, set access, unmap. Its time, or < 0 on a failure.
double cycle(vmm& device, void* address, std::size_t bytes, chunk_handle chunk, std::string& error) {
  const double t0 = now_s();
  vmm_status s = device.map(address, bytes, chunk);
  if (s != vmm_status::ok) {
    error = std::string("map: ") + to_string(s) + " " + device.last_error();
    return -1.0;
  }
  s = device.set_access(address, bytes);
  const vmm_status u = device.unmap(address, bytes);
  if (s == vmm_status::ok) s = u;
  if (s != vmm_status::ok) {
    error = std::string("set_access or unmap: ") + to_string(s) + " " + device.last_error();
    return -1.0;
  }
  return now_s() - t0;
}

}  // namespace

vmm_cycle_cost probe_vmm_cycle_cost(vmm& device, std::size_t large_granules, int rounds) {
  vmm_cycle_cost out;
  out.device = device.name();
  const std::size_t g = device.granularity();
  large_granules = std::max<std::size_t>(large_granules, 2);
  rounds = std::max(rounds, 1);
  const std::size_t small = g, large = g * large_granules;
  void* address = nullptr;
  if (vmm_status s = device.reserve(large, &address); s != vmm_status::ok) {
    out.error = std::string("reserve: ") + to_string(s) + " " + device.last_error();
    return out;
  }
  double median[2] = {0.0, 0.0};
  const std::size_t sizes[2] = {small, large};
  for (int k = 0; k < 2 && out.error.empty(); ++k) {
    chunk_handle chunk = 0;
    if (vmm_status s = device.create_chunk(sizes[k], &chunk); s != vmm_status::ok) {
      out.error = std::string("create_chunk: ") + to_string(s) + " " + device.last_error();
      break;
    }
    std::vector<double> times;
    for (int i = 0; i < rounds; ++i) {
      const double t = cycle(device, address, sizes[k], chunk, out.error);
      if (t < 0.0) break;
      times.push_back(t);
    }
    (void)device.release_chunk(chunk);
    if (!out.error.empty()) break;
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    median[k] = times[times.size() / 2];
  }
  (void)device.release(address, large);
  if (!out.error.empty()) return out;
  out.byte_s = std::max(0.0, (median[1] - median[0]) / static_cast<double>(large - small));
  out.cycle_s = std::max(0.0, median[0] - out.byte_s * static_cast<double>(small));
  return out;
}

}  // namespace sublinear::device
