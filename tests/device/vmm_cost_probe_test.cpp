// The VMM cost probe (Note [VMM cost probe] in device/vmm_cost_probe.hpp): it measures the
// device it is given, gives back everything it took, and says why when a call fails. No
// timing thresholds: only that a measure exists and what the device holds afterwards.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>

#include "device/host/host_vmm.hpp"
#include "device/vmm.hpp"
#include "device/vmm_cost_probe.hpp"

#if SUBLINEAR_HAVE_CUDA
#include "device/cuda/cuda_vmm.hpp"
#endif

namespace sublinear::device {
namespace {

constexpr std::size_t kGranule = std::size_t{64} << 10;

host_vmm_options sixteen_granules() { return {kGranule, 16 * kGranule}; }

// Every byte of the device can be had at once: the probe left no chunk behind.
void expect_all_capacity_free(vmm& device) {
  chunk_handle all = 0;
  ASSERT_EQ(device.create_chunk(device.physical_capacity(), &all), vmm_status::ok);
  EXPECT_EQ(device.release_chunk(all), vmm_status::ok);
}

TEST(VmmCostProbe, MeasuresTheHostDeviceAndGivesBackWhatItTook) {
  host_vmm device(sixteen_granules());
  const vmm_cycle_cost c = probe_vmm_cycle_cost(device, 16, 3);
  EXPECT_EQ(c.device, "host");
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.calls_per_cycle, 3u) << "map, set access, unmap";
  EXPECT_GE(c.cycle_s, 0.0);
  EXPECT_GE(c.byte_s, 0.0);
  EXPECT_GT(c.cycle_s + c.byte_s, 0.0) << "a cycle takes some time";
  EXPECT_EQ(c.cost_s(4, 1024), 4 * c.cycle_s + 1024 * c.byte_s);
  EXPECT_EQ(device.resident_bytes(), 0u) << "its chunks are released, their pages punched out";
  expect_all_capacity_free(device);
}

// A device whose map fails: the probe says so, costs nothing, and releases its chunk.
class failing_map final : public vmm {
 public:
  explicit failing_map(vmm& inner) : inner_(inner) {}
  std::size_t granularity() const noexcept override { return inner_.granularity(); }
  std::size_t physical_capacity() const noexcept override { return inner_.physical_capacity(); }
  vmm_status reserve(std::size_t size, void** address) noexcept override { return inner_.reserve(size, address); }
  vmm_status release(void* address, std::size_t size) noexcept override { return inner_.release(address, size); }
  vmm_status create_chunk(std::size_t size, chunk_handle* handle) noexcept override {
    return inner_.create_chunk(size, handle);
  }
  vmm_status release_chunk(chunk_handle handle) noexcept override { return inner_.release_chunk(handle); }
  vmm_status map(void*, std::size_t, chunk_handle) noexcept override { return vmm_status::device_error; }
  vmm_status set_access(void* address, std::size_t size) noexcept override { return inner_.set_access(address, size); }
  vmm_status unmap(void* address, std::size_t size) noexcept override { return inner_.unmap(address, size); }
  vmm_status copy_to_host(void* host, const void* address, std::size_t bytes) noexcept override {
    return inner_.copy_to_host(host, address, bytes);
  }
  vmm_status copy_to_device(void* address, const void* host, std::size_t bytes) noexcept override {
    return inner_.copy_to_device(address, host, bytes);
  }
  std::string name() const override { return "failing"; }
  std::string last_error() const override { return "injected"; }

 private:
  vmm& inner_;
};

TEST(VmmCostProbe, AFailedCallEndsTheProbeWithItsReasonAndNoCost) {
  host_vmm inner(sixteen_granules());
  failing_map device(inner);
  const vmm_cycle_cost c = probe_vmm_cycle_cost(device);
  EXPECT_EQ(c.device, "failing");
  EXPECT_EQ(c.error.rfind("map: ", 0), 0u) << c.error;
  EXPECT_NE(c.error.find("injected"), std::string::npos) << c.error;
  EXPECT_EQ(c.cycle_s, 0.0);
  EXPECT_EQ(c.byte_s, 0.0);
  EXPECT_EQ(c.cost_s(10, 1 << 20), 0.0);
  expect_all_capacity_free(inner);
}

// On a GPU the probe times cuMemMap, cuMemSetAccess and cuMemUnmap; without a driver the
// test is skipped and says why.
TEST(VmmCostProbe, MeasuresACudaDevice) {
#if SUBLINEAR_HAVE_CUDA
  std::string why;
  std::unique_ptr<cuda_vmm> device = make_cuda_vmm(0, &why);
  if (device == nullptr) GTEST_SKIP() << "no CUDA driver: " << why;
  const vmm_cycle_cost c = probe_vmm_cycle_cost(*device);
  EXPECT_EQ(c.device, "cuda");
  EXPECT_EQ(c.error, "");
  EXPECT_GT(c.cycle_s + c.byte_s, 0.0);
  ::testing::Test::RecordProperty("vmm_cycle_s", std::to_string(c.cycle_s));
  ::testing::Test::RecordProperty("vmm_byte_s", std::to_string(c.byte_s));
#else
  GTEST_SKIP() << "built without the CUDA toolkit (SUBLINEAR_HAVE_CUDA off)";
#endif
}

}  // namespace
}  // namespace sublinear::device
