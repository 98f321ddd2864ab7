// The host copy engine's achieved rate against its configured one (Note [Host copy
// engine]): copies of several sizes queued back to back in each direction, then both
// directions at once; prints configured and measured bandwidth per row. Figures, never
// assertions (the tests check bytes and order, not time).
//
//   build/bin/copy_engine_rate [copies per row, default 16]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device/host/copy_engine.hpp"
#include "device/host/device.hpp"

namespace host = sublinear::device::host;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds to move `copies` copies of `bytes` in the chosen directions, from the first
// queue to the last completion.
double run(host::device& dev, host::copy_engine& ce, std::size_t bytes, int copies, bool out, bool in) {
  std::vector<char> a(bytes, 1), b(bytes, 2), c(bytes, 3), d(bytes, 4);
  std::vector<sublinear::device::event_handle> done;
  const double t0 = now_s();
  for (int i = 0; i < copies; ++i) {
    if (out) done.push_back(ce.to_host(b.data(), a.data(), bytes, nullptr));
    if (in) done.push_back(ce.to_device(d.data(), c.data(), bytes, nullptr));
  }
  for (auto e : done) dev.synchronize(e);
  const double t = now_s() - t0;
  for (auto e : done) dev.release(e);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int copies = argc > 1 ? std::atoi(argv[1]) : 16;
  if (copies <= 0) {
    std::fprintf(stderr, "usage: copy_engine_rate [copies per row > 0]\n");
    return 2;
  }
  const host::link_rate def = host::host_link_default();
  std::printf("host copy engine: default %.1f MB/s per direction, %.0f us per copy; %d copies per row\n\n",
              def.bytes_per_s / 1e6, def.latency_s * 1e6, copies);
  std::printf("%-12s %-10s %12s %14s %14s %8s\n", "direction", "copy", "configured", "expected MB/s", "measured MB/s",
              "ratio");
  host::device dev;
  for (double rate : {def.bytes_per_s, 4 * def.bytes_per_s}) {
    host::copy_engine ce(dev, {rate, def.latency_s}, {rate, def.latency_s});
    for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{8} << 20}) {
      const double per_copy = def.latency_s + static_cast<double>(bytes) / rate;
      const double expected = static_cast<double>(bytes) / per_copy;
      for (int dir = 0; dir < 3; ++dir) {
        const bool out = dir != 1, in = dir != 0;
        const double t = run(dev, ce, bytes, copies, out, in);
        // Each direction moves copies * bytes in t (both directions: in parallel).
        const double measured = static_cast<double>(bytes) * copies / t;
        char configured[32], size[32];
        std::snprintf(configured, sizeof configured, "%.0f MB/s", rate / 1e6);
        std::snprintf(size, sizeof size, "%zu KiB", bytes >> 10);
        std::printf("%-12s %-10s %12s %14.1f %14.1f %8.3f\n", dir == 0 ? "to host" : dir == 1 ? "to device" : "both (each)",
                    size, configured, expected / 1e6, measured / 1e6, measured / expected);
      }
    }
  }
  return 0;
}
