// Small helpers shared by every workload kernel: grid sizing, zeroed parameter blocks,
// launching a registered kernel on a context's stream, and argument checks.
//
// Note [Workload kernel conventions]
// Rationale: the tracer learns what a launch touches only from its parameter block (every
//   aligned 8-byte word is looked up as a possible pointer) and the replay engine re-runs a
//   launch from those bytes alone. So a kernel's whole input is a trivially copyable params
//   struct holding raw device pointers, sizes and scalars (RNG seed and offset included) BY
//   VALUE, and nothing else: no globals, no host state captured in the body.
// Approach: each kernel is registered lazily through a function-local static in the op that
//   launches it (a static initializer in a static library is dropped by the linker unless
//   something references its object file); the layout lists the struct's fields, each a
//   "parameter" the way cuFuncGetParamInfo lists a by-value struct. Params are built with
//   zeroed(), so padding bytes are zero and identical launches have identical bytes (the
//   replay validator hashes them). Bodies run the whole grid on one thread, in a fixed loop
//   order, so results are bit-identical run to run and independent of buffer addresses.
// Limitations: grid dims are informative only (the body ignores them); they are clamped to
//   CUDA's limits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "device/host/device.hpp"
#include "workloads/context.hpp"
#include "sublinear/error.hpp"

namespace sublinear::workloads::kernels {

// A grid dimension covering `n` items `per_block` at a time, clamped to CUDA's limits
// (x: 2^31-1, y and z: 65535).
[[nodiscard]] inline std::uint32_t blocks_for(std::int64_t n, std::int64_t per_block = 1,
                                              std::int64_t limit = 0x7fffffff) {
  if (n <= 0) return 1;
  const std::int64_t b = (n + per_block - 1) / per_block;
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(b, 1, limit));
}
inline constexpr std::int64_t kMaxGridYZ = 65535;

// A params struct with every byte zero (padding included) before its fields are set.
template <class Params>
[[nodiscard]] Params zeroed() {
  static_assert(std::is_trivially_copyable_v<Params>);
  Params p;
  std::memset(static_cast<void*>(&p), 0, sizeof(Params));
  return p;
}

// Launches a registered kernel with its params struct on ctx.stream.
template <class Params>
void launch(context& ctx, const device::host::kernel& k, device::host::dim3 grid, const Params& params,
            device::host::dim3 block = {256, 1, 1}) {
  static_assert(std::is_trivially_copyable_v<Params>);
  if (k.param_bytes != sizeof(Params)) {
    throw config_error("kernel " + k.name + ": params struct of " + std::to_string(sizeof(Params)) +
                       " bytes, registered with " + std::to_string(k.param_bytes));
  }
  device::host::launch_config cfg;
  cfg.grid = grid;
  cfg.block = block;
  ctx.dev.launch(k, cfg, ctx.stream, &params);
}

// Throws config_error naming the op when `ok` is false.
inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw config_error(std::string(op) + ": " + what);
}

[[nodiscard]] inline std::string shape_string(const tensor& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

}  // namespace sublinear::workloads::kernels
