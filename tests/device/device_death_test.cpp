// Faults in device work kill the process, as an illegal address kills a CUDA context.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <stdexcept>

#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "test_kernels.hpp"

namespace sublinear::device::host {
namespace {

// Announces itself on stderr before the write, so the death tests can tell a fault in
// the kernel from any other way of dying.
struct touch_params {
  unsigned char* target;
};

void touch_body(const launch_config&, const touch_params& p) {
  std::fprintf(stderr, "kernel touching %p\n", static_cast<void*>(p.target));
  std::fflush(stderr);
  *static_cast<volatile unsigned char*>(p.target) = 42;
}

const kernel& touch_kernel() {
  static const kernel& k = register_kernel<touch_params, touch_body>(
      "test.death.touch", {SUBLINEAR_PARAM(touch_params, target)});
  return k;
}

void touch_on_stream(unsigned char* target) {
  device dev;
  stream* s = dev.create_stream();
  touch_params p{target};
  dev.launch(touch_kernel(), {}, s, &p);
  dev.synchronize(s);
}

class HostDeviceDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(HostDeviceDeathTest, KernelWritingAProtNonePageKillsTheProcess) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* target = static_cast<unsigned char*>(p);
  EXPECT_DEATH(touch_on_stream(target), "kernel touching");
  munmap(p, page);
}

TEST_F(HostDeviceDeathTest, KernelTouchingAnUnmappedVmmPageKillsTheProcess) {
  ::sublinear::device::host_vmm vmm;
  const std::size_t g = vmm.granularity();
  void* base = nullptr;
  ASSERT_EQ(vmm.reserve(g, &base), ::sublinear::device::vmm_status::ok);
  ::sublinear::device::chunk_handle chunk = 0;
  ASSERT_EQ(vmm.create_chunk(g, &chunk), ::sublinear::device::vmm_status::ok);
  ASSERT_EQ(vmm.map(base, g, chunk), ::sublinear::device::vmm_status::ok);
  ASSERT_EQ(vmm.set_access(base, g), ::sublinear::device::vmm_status::ok);
  auto* target = static_cast<unsigned char*>(base);
  // Control: while mapped, the same kernel writes and the process lives.
  touch_on_stream(target);
  EXPECT_EQ(*target, 42);
  // Evicted: the address is kept, the page is gone.
  ASSERT_EQ(vmm.unmap(base, g), ::sublinear::device::vmm_status::ok);
  EXPECT_DEATH(touch_on_stream(target), "kernel touching");
  EXPECT_EQ(vmm.release_chunk(chunk), ::sublinear::device::vmm_status::ok);
  EXPECT_EQ(vmm.release(base, g), ::sublinear::device::vmm_status::ok);
}

TEST_F(HostDeviceDeathTest, ExceptionEscapingAHostFunctionAborts) {
  EXPECT_DEATH(
      {
        device dev;
        dev.host_func(nullptr, [] { throw std::runtime_error("boom in host func"); });
        dev.synchronize();
      },
      "uncaught exception in device work on stream 0: boom in host func");
}

}  // namespace
}  // namespace sublinear::device::host
