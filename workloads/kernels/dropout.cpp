// Note [Dropout RNG]
// Rationale: eager PyTorch passes Philox's seed and offset to its dropout kernels by value,
//   so a replayed launch regenerates the same mask (DESIGN.md §8). Our kernels do the same,
//   and so prove the property on the host device.
// Approach: Philox-4x32-10, a counter-based generator: the value for element i is a pure
//   function of (seed, offset, i), no state is carried between launches. The mask is never
//   stored; backward recomputes it from the same (seed, offset, p), which costs a few
//   integer multiplies per element and saves a mask buffer per dropout layer.
// Limitations: keep decisions use the top 24 bits, so p is effectively rounded to a
//   multiple of 2^-24.
#include "workloads/kernels/dropout.hpp"

#include <cstdint>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;

inline std::array<std::uint32_t, 4> philox_block(std::uint64_t seed, std::uint64_t offset, std::uint64_t block) {
  return philox4x32_10({static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                        static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)},
                       {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

inline float to_unit(std::uint32_t r) { return static_cast<float>(r >> 8) * (1.0f / 16777216.0f); }

struct dropout_params {
  const float* in;
  float* out;
  std::int64_t n;
  std::uint64_t seed;
  std::uint64_t offset;
  float p;
  float scale;  // 1 / (1 - p), or 0 when p == 1
};

void dropout_body(const device::host::launch_config& /*cfg*/, const dropout_params& p) {
  for (std::int64_t b = 0; b * 4 < p.n; ++b) {
    const auto r = philox_block(p.seed, p.offset, static_cast<std::uint64_t>(b));
    for (std::int64_t w = 0; w < 4 && b * 4 + w < p.n; ++w) {
      const std::int64_t i = b * 4 + w;
      const bool keep = to_unit(r[static_cast<std::size_t>(w)]) >= p.p;
      p.out[i] = keep ? p.in[i] * p.scale : 0.0f;
    }
  }
}

template <int Which>
const device::host::kernel& dropout_kernel(const char* name) {
  static const device::host::kernel& k = device::host::register_kernel<dropout_params, &dropout_body>(
      name, {SUBLINEAR_PARAM(dropout_params, in), SUBLINEAR_PARAM(dropout_params, out),
             SUBLINEAR_PARAM(dropout_params, n), SUBLINEAR_PARAM(dropout_params, seed),
             SUBLINEAR_PARAM(dropout_params, offset), SUBLINEAR_PARAM(dropout_params, p),
             SUBLINEAR_PARAM(dropout_params, scale)});
  return k;
}

tensor run_dropout(context& ctx, const device::host::kernel& k, const char* op, const tensor& x, float p, rng_stream rng) {
  kernels::require(p >= 0.0f && p <= 1.0f, op, "p must be in [0, 1]");
  tensor y = ctx.empty(x.shape);
  auto params = kernels::zeroed<dropout_params>();
  params.in = x.data;
  params.out = y.data;
  params.n = x.numel();
  params.seed = rng.seed;
  params.offset = rng.offset;
  params.p = p;
  params.scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  kernels::launch(ctx, k, {kernels::blocks_for(params.n, 1024), 1, 1}, params);
  return y;
}

}  // namespace

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round != 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ key[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ key[1], static_cast<std::uint32_t>(p0)};
  }
  return c;
}

float philox_uniform(std::uint64_t seed, std::uint64_t offset, std::int64_t index) {
  const auto r = philox_block(seed, offset, static_cast<std::uint64_t>(index) / 4);
  return to_unit(r[static_cast<std::size_t>(index % 4)]);
}

tensor dropout_forward(context& ctx, const tensor& x, float p, rng_stream rng) {
  return run_dropout(ctx, dropout_kernel<0>("dropout_fwd_f32"), "dropout_forward", x, p, rng);
}

tensor dropout_backward(context& ctx, const tensor& dy, float p, rng_stream rng) {
  return run_dropout(ctx, dropout_kernel<1>("dropout_bwd_f32"), "dropout_backward", dy, p, rng);
}

}  // namespace sublinear::workloads::ops
