// Note [DenseNet saved tensors]
// Rationale: as for ResNet (Note [ResNet saved tensors]), liveness must be a framework's.
// Approach: each dense layer materializes the concatenation of its block's input and
//   every earlier layer's output (kernels/model_extras.hpp), which its BatchNorm saves;
//   the BN output after its in-place ReLU is saved for ReLU's and the convolution's
//   backward. The features themselves are only read by concatenations, which save
//   nothing, so they die when the block's forward ends. Backward walks the layers in
//   reverse: a layer's output gradient is complete once every later layer (and the
//   block's exit) has added its window of its concatenation's gradient into it, and it
//   is released right after that layer's backward. Memory per block grows with L^2.
// Limitations: no bottleneck (1x1) layers and no compression option beyond halving.
#include "workloads/models/densenet.hpp"

#include <cmath>
#include <string>

#include "workloads/kernels/activation.hpp"
#include "workloads/kernels/batchnorm.hpp"
#include "workloads/kernels/conv2d.hpp"
#include "workloads/kernels/linear.hpp"
#include "workloads/kernels/loss.hpp"
#include "workloads/kernels/model_extras.hpp"
#include "workloads/kernels/pooling.hpp"
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

constexpr std::size_t kStages = 3;

ops::conv2d_options same_padding(std::int64_t kernel) { return ops::conv2d_options::square(1, kernel / 2); }

const ops::pool2d_options& transition_pool() {
  static const ops::pool2d_options p = ops::pool2d_options::square(2, 2, 0);
  return p;
}

// Adds each window of dcat's channels to the gradient of the tensor it was copied from:
// d[i] takes channels [offset_i, offset_i + widths[i]) for i < count, allocated (and
// written, not added) on its first contribution.
void distribute(context& ctx, const tensor& dcat, const std::vector<std::int64_t>& widths, std::vector<tensor>& d,
                std::size_t count) {
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const bool first = d[i].data == nullptr;
    if (first) d[i] = ctx.empty({dcat.dim(0), widths[i], dcat.dim(2), dcat.dim(3)});
    ops::channel_copy(ctx, d[i], 0, dcat, offset, widths[i], !first);
    offset += widths[i];
  }
}

}  // namespace

densenet::densenet(densenet_config config) : model(sgd(config.sgd)), config_(config) {
  if (config_.depth < 7 || (config_.depth - 4) % 3 != 0) {
    throw config_error("densenet: depth must be 3L + 4 with L >= 1 layers per dense block (e.g. 7, 22, 40, 100), got " +
                       std::to_string(config_.depth));
  }
  if (config_.image < 4 || config_.image % 4 != 0) {
    throw config_error("densenet: image size must be a multiple of 4 (two pooling transitions), got " +
                       std::to_string(config_.image));
  }
  if (config_.growth < 1 || config_.stem < 2 || config_.in_channels < 1 || config_.batch < 1) {
    throw config_error("densenet: growth, input channels and batch must be >= 1 and the stem width >= 2");
  }
  if (config_.classes < 2) throw config_error("densenet: classes must be >= 2, got " + std::to_string(config_.classes));
}

std::string densenet::name() const { return "densenet-" + std::to_string(config_.depth); }

std::string densenet::description() const {
  return std::to_string(config_.depth) + " layers (3 dense blocks of " + std::to_string(layers_per_block()) +
         ", growth " + std::to_string(config_.growth) + "), " + std::to_string(config_.image) + "x" +
         std::to_string(config_.image) + "x" + std::to_string(config_.in_channels) + " images, batch " +
         std::to_string(config_.batch) + ", " + std::to_string(config_.classes) + " classes, SGD with momentum";
}

host_batch densenet::make_batch(std::uint64_t seed, std::int64_t index) const {
  const std::int64_t features = config_.in_channels * config_.image * config_.image;
  const auto protos =
      synthetic::image_prototypes(seed, config_.classes, config_.in_channels, config_.image * config_.image);
  auto data = synthetic::prototype_batch(seed, index, config_.batch, config_.classes, protos, features, 1.0f);
  return host_batch{std::move(data.values),
                    {config_.batch, config_.in_channels, config_.image, config_.image},
                    std::move(data.labels),
                    {config_.batch}};
}

densenet::bn_relu_conv densenet::make_layer(context& ctx, std::int64_t in, std::int64_t out, std::int64_t kernel) {
  bn_relu_conv l;
  l.gamma = add_constant(ctx, {in}, 1.0f);
  l.beta = add_constant(ctx, {in}, 0.0f);
  l.running_mean = add_buffer(ctx, {in}, 0.0f);
  l.running_var = add_buffer(ctx, {in}, 1.0f);
  l.kernel = kernel;
  if (kernel > 0) {
    l.weight = add_uniform(ctx, {out, in, kernel, kernel}, std::sqrt(6.0f / static_cast<float>(in * kernel * kernel)));
  }
  return l;
}

void densenet::build(context& ctx) {
  const std::int64_t k = 3;
  stem_ = add_uniform(ctx, {config_.stem, config_.in_channels, k, k},
                      std::sqrt(6.0f / static_cast<float>(config_.in_channels * k * k)));
  const std::int64_t per_block = layers_per_block();
  std::int64_t channels = config_.stem;
  layers_.resize(kStages);
  for (std::size_t s = 0; s < kStages; ++s) {
    for (std::int64_t l = 0; l < per_block; ++l) {
      layers_[s].push_back(make_layer(ctx, channels + l * config_.growth, config_.growth, 3));
    }
    channels += per_block * config_.growth;
    if (s + 1 < kStages) {
      exits_.push_back(make_layer(ctx, channels, channels / 2, 1));
      channels /= 2;
    } else {
      exits_.push_back(make_layer(ctx, channels, channels, 0));  // the head's BN-ReLU
    }
  }
  const float bound = 1.0f / std::sqrt(static_cast<float>(channels));
  fc_weight_ = add_uniform(ctx, {config_.classes, channels}, bound);
  fc_bias_ = add_uniform(ctx, {config_.classes}, bound);
}

tensor densenet::layer_forward(context& ctx, const bn_relu_conv& layer, const tensor& x, bn_relu_conv_saved& saved,
                               bool conv) {
  saved.input = x;
  auto bn = ops::batchnorm2d_forward_train(ctx, x, layer.gamma.value, layer.beta.value, layer.running_mean,
                                           layer.running_var);
  saved.mean = bn.save_mean;
  saved.invstd = bn.save_invstd;
  saved.hidden = ops::relu_inplace(ctx, bn.y);
  if (!conv) return saved.hidden;
  return ops::conv2d_forward(ctx, saved.hidden, layer.weight.value, nullptr, same_padding(layer.kernel));
}

tensor densenet::layer_backward(context& ctx, const bn_relu_conv& layer, bn_relu_conv_saved& saved, const tensor& dy,
                                bool conv) {
  tensor dhidden = dy;
  if (conv) {
    dhidden = ops::conv2d_backward(ctx, saved.hidden, layer.weight.value, dy, same_padding(layer.kernel),
                                   layer.weight.grad, nullptr, true);
  }
  tensor dbn = ops::relu_backward(ctx, saved.hidden, dhidden);
  if (conv) ctx.release(dhidden);
  ctx.release(saved.hidden);
  tensor dx = ops::batchnorm2d_backward(ctx, saved.input, layer.gamma.value, saved.mean, saved.invstd, dbn,
                                        layer.gamma.grad, layer.beta.grad);
  ctx.release(dbn);
  ctx.release(saved.input);
  ctx.release(saved.mean);
  ctx.release(saved.invstd);
  return dx;
}

tensor densenet::stage_forward(context& ctx, std::size_t stage, tensor x, stage_saved& saved) {
  const auto& layers = layers_[stage];
  std::vector<tensor> features{x};
  saved.widths = {x.dim(1)};
  saved.layers.resize(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    // Every layer reads all earlier features: its own concatenation, saved by its BN.
    tensor cat = ops::channel_concat(ctx, features);
    features.push_back(layer_forward(ctx, layers[l], cat, saved.layers[l], true));
    saved.widths.push_back(features.back().dim(1));
  }
  tensor out = ops::channel_concat(ctx, features);
  // Concatenation saves nothing for backward: the features die with the block.
  for (tensor& f : features) ctx.release(f);
  if (stage + 1 == kStages) return layer_forward(ctx, exits_[stage], out, saved.exit, false);
  saved.transition_conv = layer_forward(ctx, exits_[stage], out, saved.exit, true);
  return ops::maxpool2d_forward(ctx, saved.transition_conv, transition_pool());
}

tensor densenet::stage_backward(context& ctx, std::size_t stage, stage_saved& saved, tensor& dy) {
  tensor dout;
  if (stage + 1 == kStages) {
    dout = layer_backward(ctx, exits_[stage], saved.exit, dy, false);
    ctx.release(dy);
  } else {
    tensor dconv = ops::maxpool2d_backward(ctx, saved.transition_conv, dy, transition_pool());
    ctx.release(dy);
    ctx.release(saved.transition_conv);
    dout = layer_backward(ctx, exits_[stage], saved.exit, dconv, true);
    ctx.release(dconv);
  }
  const auto& layers = layers_[stage];
  std::vector<tensor> d(layers.size() + 1);
  distribute(ctx, dout, saved.widths, d, d.size());
  ctx.release(dout);
  for (std::size_t l = layers.size(); l-- > 0;) {
    // Every consumer of layer l's output has run its backward: d[l + 1] is complete.
    tensor dcat = layer_backward(ctx, layers[l], saved.layers[l], d[l + 1], true);
    ctx.release(d[l + 1]);
    distribute(ctx, dcat, saved.widths, d, l + 1);
    ctx.release(dcat);
  }
  return d[0];
}

tensor densenet::forward_backward(context& ctx, const batch& b, std::int64_t /*step*/) {
  tensor x = ops::conv2d_forward(ctx, b.input, stem_.value, nullptr, same_padding(3));
  std::vector<stage_saved> saved(kStages);
  for (std::size_t s = 0; s < kStages; ++s) x = stage_forward(ctx, s, x, saved[s]);
  // x is the head's ReLU output, owned by saved.back().exit.

  tensor pooled = ops::global_avgpool_forward(ctx, x);
  tensor logits = ops::linear_forward(ctx, pooled, fc_weight_.value, &fc_bias_.value);
  tensor loss = ops::softmax_cross_entropy_forward(ctx, logits, b.target);
  tensor dlogits = ops::softmax_cross_entropy_backward(ctx, logits, b.target);
  ctx.release(logits);
  tensor dpooled = ops::linear_backward(ctx, pooled, fc_weight_.value, dlogits, fc_weight_.grad, &fc_bias_.grad);
  ctx.release(dlogits);
  ctx.release(pooled);
  tensor dx = ops::global_avgpool_backward(ctx, dpooled, x.shape);
  ctx.release(dpooled);

  for (std::size_t s = kStages; s-- > 0;) dx = stage_backward(ctx, s, saved[s], dx);
  ops::conv2d_backward(ctx, b.input, stem_.value, dx, same_padding(3), stem_.grad, nullptr, false);
  ctx.release(dx);
  return loss;
}

}  // namespace sublinear::workloads::models
