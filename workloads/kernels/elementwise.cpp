// Element-wise kernels. Each runs one pass in index order; the only arithmetic is per
// element, so results cannot depend on where the buffers live.
#include "workloads/kernels/elementwise.hpp"

#include <cstdint>

#include "workloads/kernels/dropout.hpp"
#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

using kernels::blocks_for;
using kernels::require;
using kernels::shape_string;

constexpr std::int64_t kPerBlock = 1024;  // elements per notional block, for grid.x

// ---- fill ----
struct fill_params {
  float* x;
  std::int64_t n;
  float value;
};
void fill_body(const device::host::launch_config& /*cfg*/, const fill_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.x[i] = p.value;
}

// ---- init_uniform ----
struct init_uniform_params {
  float* x;
  std::int64_t n;
  std::uint64_t seed;
  std::uint64_t offset;
  float lo, hi;
};
void init_uniform_body(const device::host::launch_config& /*cfg*/, const init_uniform_params& p) {
  const float width = p.hi - p.lo;
  for (std::int64_t i = 0; i < p.n; ++i) p.x[i] = p.lo + width * philox_uniform(p.seed, p.offset, i);
}

// ---- copy ----
struct copy_params {
  const float* src;
  float* dst;
  std::int64_t n;
};
void copy_body(const device::host::launch_config& /*cfg*/, const copy_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.dst[i] = p.src[i];
}

// ---- add ----
struct add_params {
  const float* a;
  const float* b;
  float* out;
  std::int64_t n;
};
void add_body(const device::host::launch_config& /*cfg*/, const add_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.out[i] = p.a[i] + p.b[i];
}

// ---- accumulate ----
struct accumulate_params {
  float* dst;
  const float* src;
  std::int64_t n;
};
void accumulate_body(const device::host::launch_config& /*cfg*/, const accumulate_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) p.dst[i] += p.src[i];
}

// ---- add backward ----
struct add_bwd_params {
  const float* dy;
  float* da;
  float* db;
  std::int64_t n;
};
void add_bwd_body(const device::host::launch_config& /*cfg*/, const add_bwd_params& p) {
  for (std::int64_t i = 0; i < p.n; ++i) {
    p.da[i] = p.dy[i];
    p.db[i] = p.dy[i];
  }
}

}  // namespace

void fill(context& ctx, const tensor& t, float value) {
  static const device::host::kernel& k = device::host::register_kernel<fill_params, &fill_body>(
      "fill_f32", {SUBLINEAR_PARAM(fill_params, x), SUBLINEAR_PARAM(fill_params, n), SUBLINEAR_PARAM(fill_params, value)});
  auto p = kernels::zeroed<fill_params>();
  p.x = t.data;
  p.n = t.numel();
  p.value = value;
  kernels::launch(ctx, k, {blocks_for(p.n, kPerBlock), 1, 1}, p);
}

void init_uniform(context& ctx, const tensor& t, float lo, float hi, std::uint64_t seed, std::uint64_t offset) {
  static const device::host::kernel& k = device::host::register_kernel<init_uniform_params, &init_uniform_body>(
      "init_uniform_f32",
      {SUBLINEAR_PARAM(init_uniform_params, x), SUBLINEAR_PARAM(init_uniform_params, n),
       SUBLINEAR_PARAM(init_uniform_params, seed), SUBLINEAR_PARAM(init_uniform_params, offset),
       SUBLINEAR_PARAM(init_uniform_params, lo), SUBLINEAR_PARAM(init_uniform_params, hi)});
  require(lo <= hi, "init_uniform", "lo > hi");
  auto p = kernels::zeroed<init_uniform_params>();
  p.x = t.data;
  p.n = t.numel();
  p.seed = seed;
  p.offset = offset;
  p.lo = lo;
  p.hi = hi;
  kernels::launch(ctx, k, {blocks_for(p.n, kPerBlock), 1, 1}, p);
}

void copy_into(context& ctx, const tensor& dst, const tensor& src) {
  static const device::host::kernel& k = device::host::register_kernel<copy_params, &copy_body>(
      "copy_f32", {SUBLINEAR_PARAM(copy_params, src), SUBLINEAR_PARAM(copy_params, dst), SUBLINEAR_PARAM(copy_params, n)});
  require(dst.numel() == src.numel(), "copy_into", shape_string(dst) + " vs " + shape_string(src));
  auto p = kernels::zeroed<copy_params>();
  p.src = src.data;
  p.dst = dst.data;
  p.n = src.numel();
  kernels::launch(ctx, k, {blocks_for(p.n, kPerBlock), 1, 1}, p);
}

tensor copy(context& ctx, const tensor& src) {
  tensor out = ctx.empty(src.shape);
  copy_into(ctx, out, src);
  return out;
}

tensor upload(context& ctx, const std::vector<float>& host, std::vector<std::int64_t> shape) {
  tensor t = ctx.empty(std::move(shape));
  if (static_cast<std::size_t>(t.numel()) != host.size()) {
    ctx.release(t);
    throw config_error("upload: " + std::to_string(host.size()) + " values for a tensor of " +
                       std::to_string(t.numel()));
  }
  upload_into(ctx, t, host.data());
  return t;
}

void upload_into(context& ctx, const tensor& dst, const float* host) {
  if (dst.numel() == 0) return;
  ctx.dev.memcpy_async(dst.data, host, dst.bytes(), ctx.stream);
  ctx.dev.synchronize(ctx.stream);
}

std::vector<float> download(context& ctx, const tensor& src) {
  std::vector<float> out(static_cast<std::size_t>(src.numel()));
  download_into(ctx, src, out.data());
  return out;
}

void download_into(context& ctx, const tensor& src, float* host) {
  if (src.numel() == 0) return;
  ctx.dev.memcpy_async(host, src.data, src.bytes(), ctx.stream);
  ctx.dev.synchronize(ctx.stream);
}

tensor add(context& ctx, const tensor& a, const tensor& b) {
  static const device::host::kernel& k = device::host::register_kernel<add_params, &add_body>(
      "add_f32", {SUBLINEAR_PARAM(add_params, a), SUBLINEAR_PARAM(add_params, b), SUBLINEAR_PARAM(add_params, out),
                  SUBLINEAR_PARAM(add_params, n)});
  require(a.numel() == b.numel(), "add", shape_string(a) + " + " + shape_string(b));
  tensor out = ctx.empty(a.shape);
  auto p = kernels::zeroed<add_params>();
  p.a = a.data;
  p.b = b.data;
  p.out = out.data;
  p.n = a.numel();
  kernels::launch(ctx, k, {blocks_for(p.n, kPerBlock), 1, 1}, p);
  return out;
}

void accumulate(context& ctx, const tensor& dst, const tensor& src) {
  static const device::host::kernel& k = device::host::register_kernel<accumulate_params, &accumulate_body>(
      "accumulate_f32", {SUBLINEAR_PARAM(accumulate_params, dst), SUBLINEAR_PARAM(accumulate_params, src),
                         SUBLINEAR_PARAM(accumulate_params, n)});
  require(dst.numel() == src.numel(), "accumulate", shape_string(dst) + " += " + shape_string(src));
  auto p = kernels::zeroed<accumulate_params>();
  p.dst = dst.data;
  p.src = src.data;
  p.n = src.numel();
  kernels::launch(ctx, k, {blocks_for(p.n, kPerBlock), 1, 1}, p);
}

std::pair<tensor, tensor> add_backward(context& ctx, const tensor& dy) {
  static const device::host::kernel& k = device::host::register_kernel<add_bwd_params, &add_bwd_body>(
      "add_bwd_f32", {SUBLINEAR_PARAM(add_bwd_params, dy), SUBLINEAR_PARAM(add_bwd_params, da),
                      SUBLINEAR_PARAM(add_bwd_params, db), SUBLINEAR_PARAM(add_bwd_params, n)});
  tensor da = ctx.empty(dy.shape);
  tensor db = ctx.empty(dy.shape);
  auto p = kernels::zeroed<add_bwd_params>();
  p.dy = dy.data;
  p.da = da.data;
  p.db = db.data;
  p.n = dy.numel();
  kernels::launch(ctx, k, {blocks_for(p.n, kPerBlock), 1, 1}, p);
  return {da, db};
}

}  // namespace sublinear::workloads::ops
