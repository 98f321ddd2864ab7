// Note [Multi-tensor optimizer kernels]
// Rationale: fused optimizers reach their tensors through pointer arrays inside a by-value
//   struct, not through separate kernel parameters. That is the case the tracer's pointer
//   scan must get right (every 8-byte word of the block is a candidate pointer, including
//   array elements deep inside one large "parameter"), and the optimizer step is the
//   iteration's last launch, which touches every parameter and its state.
// Approach: up to kMultiTensorMax tensors per launch; the op splits a longer list into
//   consecutive launches. Each element is updated with the formula in optimizer.hpp, in
//   tensor order then index order; the arithmetic per element is independent, so results
//   do not depend on addresses.
// Limitations: float32 state only; no AMSGrad, no AdamW decoupled decay.
#include "workloads/kernels/optimizer.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

using kernels::require;

struct sgd_params {
  float* params[kMultiTensorMax];
  const float* grads[kMultiTensorMax];
  float* bufs[kMultiTensorMax];
  std::int64_t numel[kMultiTensorMax];
  std::int32_t count;
  float lr, momentum, weight_decay;
};

void sgd_body(const device::host::launch_config& /*cfg*/, const sgd_params& p) {
  for (std::int32_t t = 0; t < p.count; ++t) {
    float* w = p.params[t];
    const float* g = p.grads[t];
    float* buf = p.bufs[t];
    for (std::int64_t i = 0; i < p.numel[t]; ++i) {
      const float gi = g[i] + p.weight_decay * w[i];
      buf[i] = p.momentum * buf[i] + gi;
      w[i] = w[i] - p.lr * buf[i];
    }
  }
}

struct adam_params {
  float* params[kMultiTensorMax];
  const float* grads[kMultiTensorMax];
  float* m[kMultiTensorMax];
  float* v[kMultiTensorMax];
  std::int64_t numel[kMultiTensorMax];
  std::int64_t step;
  std::int32_t count;
  float lr, beta1, beta2, eps, weight_decay;
};

void adam_body(const device::host::launch_config& /*cfg*/, const adam_params& p) {
  const float bc1 = adam_bias_correction(p.beta1, p.step);
  const float bc2 = adam_bias_correction(p.beta2, p.step);
  for (std::int32_t t = 0; t < p.count; ++t) {
    float* w = p.params[t];
    const float* g = p.grads[t];
    float* m = p.m[t];
    float* v = p.v[t];
    for (std::int64_t i = 0; i < p.numel[t]; ++i) {
      const float gi = g[i] + p.weight_decay * w[i];
      m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * gi;
      v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * (gi * gi);
      const float mhat = m[i] / bc1;
      const float vhat = v[i] / bc2;
      w[i] = w[i] - p.lr * mhat / (std::sqrt(vhat) + p.eps);
    }
  }
}

void check_lists(const char* op, std::span<const tensor> params, std::initializer_list<std::span<const tensor>> others) {
  for (const auto& list : others) {
    require(list.size() == params.size(), op, "tensor lists differ in length");
    for (std::size_t i = 0; i < params.size(); ++i) {
      require(list[i].numel() == params[i].numel(), op, "tensor " + std::to_string(i) + " differs in size from its parameter");
    }
  }
}

}  // namespace

float adam_bias_correction(float beta, std::int64_t step) {
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), static_cast<double>(step)));
}

void sgd_step(context& ctx, std::span<const tensor> params, std::span<const tensor> grads,
              std::span<const tensor> momentum_bufs, const sgd_options& opt) {
  static const device::host::kernel& k = device::host::register_kernel<sgd_params, &sgd_body>(
      "sgd_momentum_step_f32",
      {SUBLINEAR_PARAM(sgd_params, params), SUBLINEAR_PARAM(sgd_params, grads), SUBLINEAR_PARAM(sgd_params, bufs),
       SUBLINEAR_PARAM(sgd_params, numel), SUBLINEAR_PARAM(sgd_params, count), SUBLINEAR_PARAM(sgd_params, lr),
       SUBLINEAR_PARAM(sgd_params, momentum), SUBLINEAR_PARAM(sgd_params, weight_decay)});
  check_lists("sgd_step", params, {grads, momentum_bufs});
  for (std::size_t first = 0; first < params.size(); first += kMultiTensorMax) {
    auto p = kernels::zeroed<sgd_params>();
    std::int64_t total = 0;
    for (std::size_t i = first; i < params.size() && i - first < kMultiTensorMax; ++i) {
      const auto t = static_cast<std::size_t>(p.count++);
      p.params[t] = params[i].data;
      p.grads[t] = grads[i].data;
      p.bufs[t] = momentum_bufs[i].data;
      p.numel[t] = params[i].numel();
      total += p.numel[t];
    }
    p.lr = opt.lr;
    p.momentum = opt.momentum;
    p.weight_decay = opt.weight_decay;
    kernels::launch(ctx, k, {kernels::blocks_for(total, 4096), 1, 1}, p);
  }
}

void adam_step(context& ctx, std::span<const tensor> params, std::span<const tensor> grads,
               std::span<const tensor> m, std::span<const tensor> v, std::int64_t step, const adam_options& opt) {
  static const device::host::kernel& k = device::host::register_kernel<adam_params, &adam_body>(
      "adam_step_f32",
      {SUBLINEAR_PARAM(adam_params, params), SUBLINEAR_PARAM(adam_params, grads), SUBLINEAR_PARAM(adam_params, m),
       SUBLINEAR_PARAM(adam_params, v), SUBLINEAR_PARAM(adam_params, numel), SUBLINEAR_PARAM(adam_params, step),
       SUBLINEAR_PARAM(adam_params, count), SUBLINEAR_PARAM(adam_params, lr), SUBLINEAR_PARAM(adam_params, beta1),
       SUBLINEAR_PARAM(adam_params, beta2), SUBLINEAR_PARAM(adam_params, eps),
       SUBLINEAR_PARAM(adam_params, weight_decay)});
  check_lists("adam_step", params, {grads, m, v});
  require(step >= 1, "adam_step", "step counts from 1");
  for (std::size_t first = 0; first < params.size(); first += kMultiTensorMax) {
    auto p = kernels::zeroed<adam_params>();
    std::int64_t total = 0;
    for (std::size_t i = first; i < params.size() && i - first < kMultiTensorMax; ++i) {
      const auto t = static_cast<std::size_t>(p.count++);
      p.params[t] = params[i].data;
      p.grads[t] = grads[i].data;
      p.m[t] = m[i].data;
      p.v[t] = v[i].data;
      p.numel[t] = params[i].numel();
      total += p.numel[t];
    }
    p.step = step;
    p.lr = opt.lr;
    p.beta1 = opt.beta1;
    p.beta2 = opt.beta2;
    p.eps = opt.eps;
    p.weight_decay = opt.weight_decay;
    kernels::launch(ctx, k, {kernels::blocks_for(total, 4096), 1, 1}, p);
  }
}

}  // namespace sublinear::workloads::ops
