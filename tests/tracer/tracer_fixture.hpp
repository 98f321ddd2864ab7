// Shared by the tracer tests: a host session (device, caching allocator, C-API memory)
// with a recorder observing the allocator and a collector hooked into the device, and
// small kernels registered once per process.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/host/device.hpp"
#include "workloads/host_session.hpp"
#include "tracer/events.hpp"
#include "tracer/host/host_collector.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::tracer::testing {

// The whole stack a traced workload runs on. Members are destroyed in reverse order: the
// collector leaves the device, the recorder leaves the allocator, then the session ends.
class traced_session {
 public:
  explicit traced_session(host_collector_options collect = {}, recorder_options record = {},
                          workloads::host_session_options session = small_session())
      : session_(session), rec_(with_granularity(std::move(record), session.granularity)) {
    session_.allocator().set_observer(&rec_);
    collector_ = std::make_unique<host_collector>(session_.device(), rec_, collect);
  }
  ~traced_session() {
    collector_.reset();
    session_.device().synchronize();
    session_.allocator().set_observer(nullptr);
  }
  traced_session(const traced_session&) = delete;
  traced_session& operator=(const traced_session&) = delete;

  device::host::device& dev() { return session_.device(); }
  allocator::caching_allocator& alloc() { return session_.allocator(); }
  recorder& rec() { return rec_; }
  host_collector& collector() { return *collector_; }
  workloads::context ctx(device::host::stream* s = nullptr) { return session_.make_context(s); }
  // Every event so far, after the device has finished (durations and writes attached).
  trace take() {
    session_.device().synchronize();
    return rec_.take();
  }

  static workloads::host_session_options small_session() {
    workloads::host_session_options o;
    o.physical_capacity = std::size_t{2} << 30;
    o.granularity = std::size_t{64} << 10;
    return o;
  }

 private:
  static recorder_options with_granularity(recorder_options o, std::size_t g) {
    o.granularity = g;
    return o;
  }

  workloads::host_session session_;
  recorder rec_;
  std::unique_ptr<host_collector> collector_;
};

// ---- test kernels ----------------------------------------------------------------------------

// out[i] = 2 * in[i]: reads one buffer, writes another.
struct scale_params {
  const float* in;
  float* out;
  std::int64_t n;
};
inline void scale_body(const device::host::launch_config&, const scale_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.out[i] = 2.0f * p.in[i];
}
inline const device::host::kernel& scale_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<scale_params, scale_body>(
      "tracer_test.scale",
      {SUBLINEAR_PARAM(scale_params, in), SUBLINEAR_PARAM(scale_params, out), SUBLINEAR_PARAM(scale_params, n)});
  return k;
}

// out[i] = in[i] + 1, with `out` passed encoded, as an opaque descriptor would carry it
// (a TMA tensor map, a pointer the kernel reads from device memory): the pointer scan
// cannot see it, so the launch's write is not recorded.
constexpr std::uint64_t kHiddenPointerKey = 0x5a5a'0000'0000'0005ull;
struct hidden_output_params {
  const float* in;
  std::uint64_t out_code;  // address ^ kHiddenPointerKey
  std::int64_t n;
};
inline void hidden_output_body(const device::host::launch_config&, const hidden_output_params& p) {
  auto* out = reinterpret_cast<float*>(static_cast<std::uintptr_t>(p.out_code ^ kHiddenPointerKey));
  for (std::int64_t i = 0; i < p.n; ++i) out[i] = p.in[i] + 1.0f;
}
inline const device::host::kernel& hidden_output_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<hidden_output_params, hidden_output_body>(
      "tracer_test.hidden_output",
      {SUBLINEAR_PARAM(hidden_output_params, in), SUBLINEAR_PARAM(hidden_output_params, out_code),
       SUBLINEAR_PARAM(hidden_output_params, n)});
  return k;
}

// Pointers only inside a by-value struct (a pair and an array), plus a scalar that is not
// a pointer. The body sums the pair's first elements into every list entry's first element.
struct nested_params {
  struct pair_t {
    const float* a;
    const float* b;
  } pair;
  std::int32_t count;
  std::int32_t pad;
  float* list[4];
  std::uint64_t cookie;  // a scalar, never a pointer
};
inline void nested_body(const device::host::launch_config&, const nested_params& p) {
  for (std::int32_t i = 0; i < p.count; ++i) p.list[i][0] = p.pair.a[0] + p.pair.b[0];
}
inline const device::host::kernel& nested_kernel() {
  // One "parameter" for the whole struct: what cuFuncGetParamInfo reports for a by-value
  // struct argument.
  static const device::host::kernel& k = device::host::register_kernel<nested_params, nested_body>(
      "tracer_test.nested", {device::host::param_info{0, static_cast<std::uint32_t>(sizeof(nested_params))}});
  return k;
}

// Named like a NCCL kernel, so the default never-replay list catches it; writes nothing.
struct fake_collective_params {
  float* buffer;
  std::int64_t n;
};
inline void fake_collective_body(const device::host::launch_config&, const fake_collective_params&) {}
inline const device::host::kernel& fake_collective_kernel() {
  static const device::host::kernel& k = device::host::register_kernel<fake_collective_params, fake_collective_body>(
      "ncclDevKernel_AllReduce_Sum_f32_RING_LL_tracer_test",
      {SUBLINEAR_PARAM(fake_collective_params, buffer), SUBLINEAR_PARAM(fake_collective_params, n)});
  return k;
}

// Does nothing: a "logging" launch for noise.
struct noop_params {
  std::int64_t tag;
};
inline void noop_body(const device::host::launch_config&, const noop_params&) {}
inline const device::host::kernel& noop_kernel() {
  static const device::host::kernel& k =
      device::host::register_kernel<noop_params, noop_body>("tracer_test.log_noop", {SUBLINEAR_PARAM(noop_params, tag)});
  return k;
}

template <class Params>
void launch(device::host::device& dev, const device::host::kernel& k, const Params& p, device::host::stream* s = nullptr,
            device::host::dim3 grid = {1, 1, 1}) {
  device::host::launch_config cfg;
  cfg.grid = grid;
  dev.launch(k, cfg, s, &p);
}

inline std::uint64_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// Events of one kind, in order.
inline std::vector<const event*> of_kind(const trace& t, event_kind k) {
  std::vector<const event*> out;
  for (const event& e : t.events) {
    if (e.kind == k) out.push_back(&e);
  }
  return out;
}

}  // namespace sublinear::tracer::testing
