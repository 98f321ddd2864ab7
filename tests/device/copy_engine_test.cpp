// The host copy engine (Note [Host copy engine]): bytes arrive intact, a copy follows the
// work queued before it on the stream it was given, a stream told to wait for a copy
// sees its bytes, and the figures count what was copied. No timing thresholds: the rate
// is measured by benchmarks/runtime/copy_engine_rate.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "device/host/copy_engine.hpp"
#include "device/host/device.hpp"
#include "sublinear/error.hpp"

namespace sublinear::device::host {
namespace {

constexpr link_rate kFast{8e9, 0.0};

TEST(CopyEngine, BytesArriveIntactBothWays) {
  device dev;
  copy_engine ce(dev, kFast, kFast);
  std::vector<std::uint8_t> src(1 << 20), host(src.size()), back(src.size());
  std::iota(src.begin(), src.end(), std::uint8_t{3});
  event_handle out = ce.to_host(host.data(), src.data(), src.size(), nullptr);
  dev.synchronize(out);
  dev.release(out);
  EXPECT_EQ(host, src);
  event_handle in = ce.to_device(back.data(), host.data(), host.size(), nullptr);
  dev.synchronize(in);
  dev.release(in);
  EXPECT_EQ(back, src);
  const copy_figures f = ce.figures();
  EXPECT_EQ(f.to_host_bytes, src.size());
  EXPECT_EQ(f.to_device_bytes, src.size());
  EXPECT_EQ(f.to_host_copies, 1u);
  EXPECT_EQ(f.to_device_copies, 1u);
  EXPECT_GT(f.to_host_busy_s, 0.0);
}

TEST(CopyEngine, ACopyFollowsTheWorkQueuedBeforeItOnItsStream) {
  device dev;
  stream* compute = dev.create_stream();
  copy_engine ce(dev, kFast, kFast);
  std::vector<int> buffer(4096, 0), host(4096, -1);
  // The compute stream is held up, then writes the buffer: the copy must see the write.
  dev.host_func(compute, [] {
    volatile std::uint64_t spin = 0;
    for (int i = 0; i < 2'000'000; ++i) spin = spin + static_cast<std::uint64_t>(i);
  });
  dev.host_func(compute, [&buffer] { std::fill(buffer.begin(), buffer.end(), 7); });
  event_handle out = ce.to_host(host.data(), buffer.data(), buffer.size() * sizeof(int), compute);
  dev.synchronize(out);
  dev.release(out);
  EXPECT_EQ(host, std::vector<int>(4096, 7));
  dev.destroy_stream(compute);
}

TEST(CopyEngine, AStreamThatWaitsForACopySeesItsBytes) {
  device dev;
  stream* compute = dev.create_stream();
  // A slow link, so that the wait is real: 4 MiB at 200 MB/s take about 20 ms.
  copy_engine ce(dev, kFast, link_rate{200e6, 1e-4});
  std::vector<std::uint8_t> host(4 << 20, 42), dst(host.size(), 0);
  event_handle in = ce.to_device(dst.data(), host.data(), host.size(), compute);
  ce.stream_wait_copy(compute, in);
  dev.release(in);
  std::uint8_t seen_first = 0, seen_last = 0;
  dev.host_func(compute, [&] {
    seen_first = dst.front();
    seen_last = dst.back();
  });
  dev.synchronize(compute);
  EXPECT_EQ(seen_first, 42);
  EXPECT_EQ(seen_last, 42);
  ce.synchronize();
  EXPECT_GE(ce.figures().stall_s, 0.0);
  dev.destroy_stream(compute);
}

TEST(CopyEngine, CopiesOfOneDirectionRunInOrder) {
  device dev;
  copy_engine ce(dev, kFast, kFast);
  std::vector<int> a(1024, 1), b(1024, 2), host(1024, 0);
  event_handle first = ce.to_host(host.data(), a.data(), a.size() * sizeof(int), nullptr);
  event_handle second = ce.to_host(host.data(), b.data(), b.size() * sizeof(int), nullptr);
  dev.synchronize(second);
  EXPECT_TRUE(dev.query(first)) << "the first copy completes before the second";
  EXPECT_EQ(host, b) << "and the second's bytes are the last written";
  dev.release(first);
  dev.release(second);
}

TEST(CopyEngine, ABadRateOrANullPointerIsRefused) {
  device dev;
  EXPECT_THROW(copy_engine(dev, link_rate{0.0, 0.0}, kFast), config_error);
  EXPECT_THROW(copy_engine(dev, kFast, link_rate{1e9, -1.0}), config_error);
  copy_engine ce(dev, kFast, kFast);
  std::vector<int> host(4);
  EXPECT_THROW((void)ce.to_host(host.data(), nullptr, 16, nullptr), device_error);
}

TEST(CopyEngine, TheDefaultLinkIsUsable) {
  const link_rate d = host_link_default();
  EXPECT_GT(d.bytes_per_s, 0.0);
  EXPECT_GE(d.latency_s, 0.0);
}

}  // namespace
}  // namespace sublinear::device::host
