#include "workloads/models/mlp.hpp"

#include <cmath>
#include <string>

#include "workloads/kernels/activation.hpp"
#include "workloads/kernels/linear.hpp"
#include "workloads/kernels/loss.hpp"
#include "workloads/models/synthetic.hpp"
#include "sublinear/error.hpp"

namespace sublinear::workloads::models {
namespace {

optimizer_config sgd(const ops::sgd_options& o) {
  optimizer_config c;
  c.kind = optimizer_kind::sgd;
  c.sgd = o;
  return c;
}

void require_positive(std::int64_t v, const char* field) {
  if (v < 1) throw config_error(std::string("mlp: ") + field + " must be >= 1, got " + std::to_string(v));
}

}  // namespace

mlp::mlp(mlp_config config) : model(sgd(config.sgd)), config_(config) {
  require_positive(config_.layers, "layers");
  require_positive(config_.input, "input");
  require_positive(config_.hidden, "hidden");
  require_positive(config_.batch, "batch");
  if (config_.classes < 2) throw config_error("mlp: classes must be >= 2, got " + std::to_string(config_.classes));
}

std::string mlp::name() const { return "mlp-" + std::to_string(config_.layers); }

std::string mlp::description() const {
  return std::to_string(config_.layers) + " linear layers (" + std::to_string(config_.input) + " -> " +
         std::to_string(config_.hidden) + " ... -> " + std::to_string(config_.classes) + "), batch " +
         std::to_string(config_.batch) + ", SGD with momentum";
}

host_batch mlp::make_batch(std::uint64_t seed, std::int64_t index) const {
  auto data = synthetic::prototype_batch(seed, index, config_.batch, config_.classes,
                                           synthetic::prototypes(seed, config_.classes, config_.input),
                                           config_.input, 0.5f);
  return host_batch{std::move(data.values), {config_.batch, config_.input}, std::move(data.labels), {config_.batch}};
}

void mlp::build(context& ctx) {
  for (std::int64_t i = 0; i < config_.layers; ++i) {
    const std::int64_t in = i == 0 ? config_.input : config_.hidden;
    const std::int64_t out = i + 1 == config_.layers ? config_.classes : config_.hidden;
    // He uniform for the weights (ReLU follows), PyTorch's default range for the biases.
    weights_.push_back(add_uniform(ctx, {out, in}, std::sqrt(6.0f / static_cast<float>(in))));
    biases_.push_back(add_uniform(ctx, {out}, 1.0f / std::sqrt(static_cast<float>(in))));
  }
}

tensor mlp::forward_backward(context& ctx, const batch& b, std::int64_t /*step*/) {
  const auto layers = static_cast<std::size_t>(config_.layers);
  // inputs[i]: layer i's input. inputs[0] is the batch (the loop owns it); the others are
  // the previous layer's ReLU output, saved for ReLU's and this layer's backward.
  std::vector<tensor> inputs(layers);
  inputs[0] = b.input;
  tensor logits;
  for (std::size_t i = 0; i < layers; ++i) {
    tensor y = ops::linear_forward(ctx, inputs[i], weights_[i].value, &biases_[i].value);
    if (i + 1 < layers) {
      inputs[i + 1] = ops::relu_inplace(ctx, y);
    } else {
      logits = y;
    }
  }
  tensor loss = ops::softmax_cross_entropy_forward(ctx, logits, b.target);
  tensor dy = ops::softmax_cross_entropy_backward(ctx, logits, b.target);
  ctx.release(logits);
  for (std::size_t i = layers; i-- > 0;) {
    tensor dx = ops::linear_backward(ctx, inputs[i], weights_[i].value, dy, weights_[i].grad, &biases_[i].grad, i > 0);
    ctx.release(dy);
    if (i == 0) break;
    dy = ops::relu_backward(ctx, inputs[i], dx);
    ctx.release(dx);
    ctx.release(inputs[i]);
  }
  return loss;
}

}  // namespace sublinear::workloads::models
