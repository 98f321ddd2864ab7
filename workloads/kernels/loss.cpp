// Softmax cross-entropy. Each row is reduced in index order (max, then the sum of exp in
// double); the batch mean is a double sum in row order, so the loss has one fixed value.
#include "workloads/kernels/loss.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "workloads/kernels/launch.hpp"

namespace sublinear::workloads::ops {
namespace {

using kernels::require;
using kernels::shape_string;

struct xent_params {
  const float* logits;
  const float* labels;
  float* out;  // forward: the 1-element loss; backward: dlogits
  std::int64_t rows, classes;
  float grad_scale;  // backward only
};

std::int64_t label_of(const xent_params& p, std::int64_t r) {
  const float v = p.labels[r];
  const auto label = static_cast<std::int64_t>(v);
  if (!(v >= 0.0f) || static_cast<float>(label) != v || label >= p.classes) {
    throw config_error("softmax_cross_entropy: label " + std::to_string(v) + " at row " + std::to_string(r) +
                       " is not a class index below " + std::to_string(p.classes));
  }
  return label;
}

// log sum_j exp(z_j), computed as max + log sum exp(z_j - max).
double log_sum_exp(const float* z, std::int64_t k) {
  float m = z[0];
  for (std::int64_t j = 1; j < k; ++j) m = z[j] > m ? z[j] : m;
  double s = 0.0;
  for (std::int64_t j = 0; j < k; ++j) s += std::exp(static_cast<double>(z[j] - m));
  return static_cast<double>(m) + std::log(s);
}

void xent_fwd_body(const device::host::launch_config& /*cfg*/, const xent_params& p) {
  double total = 0.0;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* z = p.logits + r * p.classes;
    const double lse = log_sum_exp(z, p.classes);
    total += lse - static_cast<double>(z[label_of(p, r)]);
  }
  p.out[0] = static_cast<float>(total / static_cast<double>(p.rows));
}

void xent_bwd_body(const device::host::launch_config& /*cfg*/, const xent_params& p) {
  const double scale = static_cast<double>(p.grad_scale) / static_cast<double>(p.rows);
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* z = p.logits + r * p.classes;
    float* dz = p.out + r * p.classes;
    const double lse = log_sum_exp(z, p.classes);
    const std::int64_t label = label_of(p, r);
    for (std::int64_t j = 0; j < p.classes; ++j) {
      const double prob = std::exp(static_cast<double>(z[j]) - lse);
      dz[j] = static_cast<float>(scale * (prob - (j == label ? 1.0 : 0.0)));
    }
  }
}

#define SUBLINEAR_XENT_LAYOUT                                                                           \
  {SUBLINEAR_PARAM(xent_params, logits), SUBLINEAR_PARAM(xent_params, labels), SUBLINEAR_PARAM(xent_params, out), \
   SUBLINEAR_PARAM(xent_params, rows), SUBLINEAR_PARAM(xent_params, classes),                                     \
   SUBLINEAR_PARAM(xent_params, grad_scale)}

xent_params check(const char* op, const tensor& logits, const tensor& labels) {
  require(!logits.shape.empty() && logits.shape.back() > 0, op, "logits " + shape_string(logits));
  auto p = kernels::zeroed<xent_params>();
  p.classes = logits.shape.back();
  p.rows = logits.numel() / p.classes;
  require(p.rows > 0 && labels.numel() == p.rows, op,
          "labels " + shape_string(labels) + " for " + std::to_string(p.rows) + " rows of logits");
  p.logits = logits.data;
  p.labels = labels.data;
  return p;
}

}  // namespace

tensor softmax_cross_entropy_forward(context& ctx, const tensor& logits, const tensor& labels) {
  static const device::host::kernel& k =
      device::host::register_kernel<xent_params, &xent_fwd_body>("softmax_xent_fwd_f32", SUBLINEAR_XENT_LAYOUT);
  auto p = check("softmax_cross_entropy_forward", logits, labels);
  tensor loss = ctx.empty({1});
  p.out = loss.data;
  kernels::launch(ctx, k, {kernels::blocks_for(p.rows), 1, 1}, p);
  return loss;
}

tensor softmax_cross_entropy_backward(context& ctx, const tensor& logits, const tensor& labels, float grad_scale) {
  static const device::host::kernel& k =
      device::host::register_kernel<xent_params, &xent_bwd_body>("softmax_xent_bwd_f32", SUBLINEAR_XENT_LAYOUT);
  auto p = check("softmax_cross_entropy_backward", logits, labels);
  tensor dlogits = ctx.empty(logits.shape);
  p.out = dlogits.data;
  p.grad_scale = grad_scale;
  kernels::launch(ctx, k, {kernels::blocks_for(p.rows), 1, 1}, p);
  return dlogits;
}

#undef SUBLINEAR_XENT_LAYOUT

}  // namespace sublinear::workloads::ops
