// Host kernels, allocator options and a device rig for the runtime tests that train a
// chain of activations under the engine (offload_test, offload_order_test,
// iteration_time_test, and the allocator options for fault_test, launch_kinds_test and
// unseen_writes_test).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "policy/budget.hpp"
#include "runtime/engine_types.hpp"

namespace sublinear::runtime::test {

// 64 KiB pages and small segments, so that a 256 KiB activation holds whole pages of its
// own and an eviction gives them back.
inline allocator::options small_page_options() {
  allocator::options o;
  o.small_size = 64 * 1024;
  o.small_segment = 256 * 1024;
  o.min_large_alloc = 1 << 20;
  o.large_segment = 2 << 20;
  o.round_large = 64 * 1024;
  return o;
}

struct fill_params {
  float* out;
  std::int64_t n;
  float value;
};
inline void fill_body(const device::host::launch_config&, const fill_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.out[i] = p.value + static_cast<float>(i % 7);
}
struct scale_params {
  float* out;
  const float* in;
  std::int64_t n;
  float factor;
};
inline void scale_body(const device::host::launch_config&, const scale_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.out[i] = p.in[i] * p.factor + 1.0f;
}
// Sums `in` into 64 accumulators: a reduction the backward makes of each activation.
struct accumulate_params {
  float* acc;
  const float* in;
  std::int64_t n;
};
inline void accumulate_body(const device::host::launch_config&, const accumulate_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.acc[i % 64] += p.in[i] * 0.001f;
}

inline const device::host::kernel& fill_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<fill_params, fill_body>(
      "test_chain_fill",
      {SUBLINEAR_PARAM(fill_params, out), SUBLINEAR_PARAM(fill_params, n), SUBLINEAR_PARAM(fill_params, value)});
  return k;
}
inline const device::host::kernel& scale_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<scale_params, scale_body>(
      "test_chain_scale", {SUBLINEAR_PARAM(scale_params, out), SUBLINEAR_PARAM(scale_params, in),
                           SUBLINEAR_PARAM(scale_params, n), SUBLINEAR_PARAM(scale_params, factor)});
  return k;
}
inline const device::host::kernel& accumulate_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<accumulate_params, accumulate_body>(
      "test_chain_accumulate", {SUBLINEAR_PARAM(accumulate_params, acc), SUBLINEAR_PARAM(accumulate_params, in),
                                SUBLINEAR_PARAM(accumulate_params, n)});
  return k;
}

// The engine options of the tests that replace the planner's plan with their own: greedy,
// no two-level schedules, the first planned iteration validated, a timeline kept.
inline engine_options amended_plan_options(std::string_view budget,
                                           std::function<void(const policy::iteration&, policy::plan&)> amend) {
  engine_options o;
  o.config.budget = policy::parse_budget(budget);
  o.config.policy = "greedy";
  o.config.validate = validate_mode::first;
  o.config.multi_pass = false;
  o.config.log = log_level::error;
  o.device_capacity = std::size_t{256} << 20;
  o.record_timeline = true;
  o.amend_plan = std::move(amend);
  return o;
}

// A host device with 64 KiB pages, its allocator, and two 64-float blocks allocated before
// any engine starts: `acc`, zeroed, that the backward sums into (the training's result),
// and `scratch`, that launches may write without allocating.
struct accumulator_rig {
  device::host_vmm vmm{device::host_vmm_options{64 * 1024, std::size_t{256} << 20}};
  device::host::device dev;
  allocator::caching_allocator alloc{vmm, dev, small_page_options()};
  float* acc = nullptr;
  float* scratch = nullptr;

  accumulator_rig() {
    acc = static_cast<float*>(alloc.allocate(64 * sizeof(float), nullptr));
    scratch = static_cast<float*>(alloc.allocate(64 * sizeof(float), nullptr));
    dev.memset_async(acc, 0, 64 * sizeof(float), nullptr);
    dev.synchronize();
  }
  ~accumulator_rig() {
    dev.synchronize();
    alloc.deallocate(acc);
    alloc.deallocate(scratch);
  }
  accumulator_rig(const accumulator_rig&) = delete;
  accumulator_rig& operator=(const accumulator_rig&) = delete;
  std::vector<float> result() {
    dev.synchronize();
    std::vector<float> out(64);
    std::memcpy(out.data(), acc, 64 * sizeof(float));
    return out;
  }
};

}  // namespace sublinear::runtime::test
