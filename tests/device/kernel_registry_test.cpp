// The kernel registry: ids, lookup and layout validation.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "device/host/device.hpp"
#include "sublinear/error.hpp"
#include "test_kernels.hpp"

namespace sublinear::device::host {
namespace {

void nop_body(const launch_config&, const std::byte*) {}

TEST(KernelRegistry, IdsAreDenseInRegistrationOrder) {
  kernel_registry reg;
  const kernel& a = reg.add("a", {{0, 8}}, 8, nop_body);
  const kernel& b = reg.add("b", {}, 0, nop_body);
  const kernel& c = reg.add("c", {{0, 4}, {8, 8}}, 16, nop_body);
  EXPECT_EQ(a.id, 0U);
  EXPECT_EQ(b.id, 1U);
  EXPECT_EQ(c.id, 2U);
  EXPECT_EQ(reg.size(), 3U);
  EXPECT_EQ(reg.by_id(1), &b);
  EXPECT_EQ(reg.by_id(3), nullptr);
}

TEST(KernelRegistry, FindReturnsTheRegisteredKernelOrNull) {
  kernel_registry reg;
  const kernel& k = reg.add("gemm_fwd", {{0, 8}, {8, 8}}, 16, nop_body);
  EXPECT_EQ(reg.find("gemm_fwd"), &k);
  EXPECT_EQ(reg.find("gemm"), nullptr);
  EXPECT_EQ(k.name, "gemm_fwd");
  EXPECT_EQ(k.param_bytes, 16U);
  ASSERT_EQ(k.params.size(), 2U);
  EXPECT_EQ(k.params[1].offset, 8U);
  EXPECT_EQ(k.body, &nop_body);
}

TEST(KernelRegistry, ReferencesStayValidAsTheRegistryGrows) {
  kernel_registry reg;
  const kernel& first = reg.add("k0", {}, 0, nop_body);
  for (int i = 1; i < 1000; ++i) {
    reg.add("k" + std::to_string(i), {}, 0, nop_body);
  }
  EXPECT_EQ(&first, reg.find("k0"));
  EXPECT_EQ(first.name, "k0");
}

TEST(KernelRegistry, DuplicateNameIsAConfigError) {
  kernel_registry reg;
  reg.add("relu", {}, 0, nop_body);
  EXPECT_THROW(reg.add("relu", {}, 0, nop_body), config_error);
  EXPECT_EQ(reg.size(), 1U);
}

TEST(KernelRegistry, OverlappingParametersAreAConfigError) {
  kernel_registry reg;
  EXPECT_THROW(reg.add("k", {{0, 8}, {4, 8}}, 16, nop_body), config_error);
}

TEST(KernelRegistry, DecreasingOffsetsAreAConfigError) {
  kernel_registry reg;
  EXPECT_THROW(reg.add("k", {{8, 8}, {0, 8}}, 16, nop_body), config_error);
}

TEST(KernelRegistry, ParameterPastTheBlockIsAConfigError) {
  kernel_registry reg;
  EXPECT_THROW(reg.add("k", {{0, 8}, {8, 8}}, 12, nop_body), config_error);
  EXPECT_THROW(reg.add("k2", {{0xFFFFFFFFU, 8}}, 16, nop_body), config_error);
}

TEST(KernelRegistry, ZeroSizedParameterIsAConfigError) {
  kernel_registry reg;
  EXPECT_THROW(reg.add("k", {{0, 0}}, 8, nop_body), config_error);
}

TEST(KernelRegistry, MissingNameOrBodyIsAConfigError) {
  kernel_registry reg;
  EXPECT_THROW(reg.add("", {}, 0, nop_body), config_error);
  EXPECT_THROW(reg.add("k", {}, 0, nullptr), config_error);
  EXPECT_EQ(reg.size(), 0U);
}

TEST(KernelRegistry, RejectedKernelDoesNotTakeItsName) {
  kernel_registry reg;
  EXPECT_THROW(reg.add("k", {{0, 8}, {4, 8}}, 16, nop_body), config_error);
  EXPECT_NO_THROW(reg.add("k", {{0, 8}, {8, 8}}, 16, nop_body));
}

TEST(KernelRegistry, ErrorMessageNamesTheKernelAndParameter) {
  kernel_registry reg;
  try {
    reg.add("conv_fwd", {{0, 8}, {4, 8}}, 16, nop_body);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("conv_fwd"), std::string::npos) << what;
    EXPECT_NE(what.find("parameter 1"), std::string::npos) << what;
  }
}

TEST(KernelRegistry, ConcurrentRegistrationGivesUniqueDenseIds) {
  kernel_registry reg;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&reg, t] {
      for (int i = 0; i < 200; ++i) {
        reg.add("t" + std::to_string(t) + "_" + std::to_string(i), {}, 0, nop_body);
        (void)reg.find("t0_0");
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  ASSERT_EQ(reg.size(), 800U);
  for (std::uint32_t id = 0; id < 800; ++id) {
    const kernel* k = reg.by_id(id);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->id, id);
    EXPECT_EQ(reg.find(k->name), k);
  }
}

TEST(KernelRegistry, RegisterKernelDerivesTheLayoutFromTheStruct) {
  const kernel& k = testing::append_kernel();
  EXPECT_EQ(kernels().find("test.append"), &k);
  EXPECT_EQ(kernels().by_id(k.id), &k);
  EXPECT_EQ(k.param_bytes, sizeof(testing::append_params));
  ASSERT_EQ(k.params.size(), 2U);
  EXPECT_EQ(k.params[0].offset, offsetof(testing::append_params, log));
  EXPECT_EQ(k.params[0].size, sizeof(std::vector<int>*));
  EXPECT_EQ(k.params[1].offset, offsetof(testing::append_params, value));
  EXPECT_EQ(k.params[1].size, sizeof(int));
}

}  // namespace
}  // namespace sublinear::device::host
