// Note [ResNet saved tensors]
// Rationale: the replay engine and the planners see this model only through its
//   allocations and launches, so which tensor lives how long must be what PyTorch's
//   autograd would keep, nothing more.
// Approach: per block, forward keeps the first conv's output (BatchNorm's input), its
//   batch mean and inverse std, the BN output after its in-place ReLU (the second conv's
//   input and ReLU backward's reference), the second conv's output and statistics, the
//   projection's if any, and the block's output after the residual add and its in-place
//   ReLU, which is also the next block's input. The second BN's output and the add's
//   operands die right after the add. Backward releases each of them after its last
//   use; the residual add passes its gradient to both branches without a copy, and the
//   branch gradients meet in ops::accumulate. So a block holds ~5 activations of its
//   output's size: feature-map memory is linear in depth.
// Limitations: BatchNorm in training mode only (no eval step).
#include "workloads/models/resnet.hpp"

#include <cmath>
#include <string>

#include "workloads/kernels/activation.hpp"
#include "workloads/kernels/batchnorm.hpp"
#include "workloads/kernels/elementwise.hpp"
#include "workloads/kernels/linear.hpp"
#include "workloads/kernels/loss.hpp"
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

}  // namespace

resnet::resnet(resnet_config config) : model(sgd(config.sgd)), config_(config) {
  if (config_.depth < 8 || config_.depth % 2 != 0) {
    throw config_error("resnet: depth must be an even number >= 8 (2 + 2 x basic blocks, e.g. 20, 56, 110, 1202), got " +
                       std::to_string(config_.depth));
  }
  if (config_.image < 4 || config_.image % 4 != 0) {
    throw config_error("resnet: image size must be a multiple of 4 (two stride-2 stages), got " +
                       std::to_string(config_.image));
  }
  if (config_.width < 1 || config_.in_channels < 1 || config_.batch < 1) {
    throw config_error("resnet: width, input channels and batch must be >= 1");
  }
  if (config_.classes < 2) throw config_error("resnet: classes must be >= 2, got " + std::to_string(config_.classes));
}

std::array<std::int64_t, 3> resnet::stage_blocks() const noexcept {
  const std::int64_t n = blocks();
  std::array<std::int64_t, 3> s{n / 3, n / 3, n / 3};
  for (std::int64_t i = 0; i < n % 3; ++i) ++s[static_cast<std::size_t>(i)];
  return s;
}

std::string resnet::name() const { return "resnet-" + std::to_string(config_.depth); }

std::string resnet::description() const {
  const auto s = stage_blocks();
  return std::to_string(config_.depth) + " layers (" + std::to_string(blocks()) + " basic blocks: " +
         std::to_string(s[0]) + "/" + std::to_string(s[1]) + "/" + std::to_string(s[2]) + "), " +
         std::to_string(config_.image) + "x" + std::to_string(config_.image) + "x" +
         std::to_string(config_.in_channels) + " images, widths " + std::to_string(config_.width) + "/" +
         std::to_string(2 * config_.width) + "/" + std::to_string(4 * config_.width) + ", batch " +
         std::to_string(config_.batch) + ", " + std::to_string(config_.classes) + " classes, SGD with momentum";
}

host_batch resnet::make_batch(std::uint64_t seed, std::int64_t index) const {
  const std::int64_t features = config_.in_channels * config_.image * config_.image;
  const auto protos =
      synthetic::image_prototypes(seed, config_.classes, config_.in_channels, config_.image * config_.image);
  auto data = synthetic::prototype_batch(seed, index, config_.batch, config_.classes, protos, features, 1.0f);
  return host_batch{std::move(data.values),
                    {config_.batch, config_.in_channels, config_.image, config_.image},
                    std::move(data.labels),
                    {config_.batch}};
}

resnet::conv_bn resnet::make_conv_bn(context& ctx, std::int64_t in, std::int64_t out, std::int64_t kernel,
                                     ops::conv2d_options options, float gamma) {
  conv_bn l;
  const float bound = std::sqrt(6.0f / static_cast<float>(in * kernel * kernel));  // He uniform
  l.weight = add_uniform(ctx, {out, in, kernel, kernel}, bound);
  l.gamma = add_constant(ctx, {out}, gamma);
  l.beta = add_constant(ctx, {out}, 0.0f);
  l.running_mean = add_buffer(ctx, {out}, 0.0f);
  l.running_var = add_buffer(ctx, {out}, 1.0f);
  l.options = options;
  return l;
}

void resnet::build(context& ctx) {
  const auto same = ops::conv2d_options::square(1, 1);
  stem_ = make_conv_bn(ctx, config_.in_channels, config_.width, 3, same);
  const auto per_stage = stage_blocks();
  std::int64_t channels = config_.width;
  for (std::size_t stage = 0; stage < 3; ++stage) {
    for (std::int64_t i = 0; i < per_stage[stage]; ++i) {
      const bool down = stage > 0 && i == 0;
      const std::int64_t out = config_.width << stage;
      block blk;
      blk.first = make_conv_bn(ctx, channels, out, 3, ops::conv2d_options::square(down ? 2 : 1, 1));
      blk.second = make_conv_bn(ctx, out, out, 3, same, config_.zero_init_residual ? 0.0f : 1.0f);
      if (down) {
        blk.projection = true;
        blk.shortcut = make_conv_bn(ctx, channels, out, 1, ops::conv2d_options::square(2, 0));
      }
      blocks_.push_back(blk);
      channels = out;
    }
  }
  // depth >= 8 gives every stage at least one block, so `channels` is 4 x width here.
  const float bound = 1.0f / std::sqrt(static_cast<float>(channels));
  fc_weight_ = add_uniform(ctx, {config_.classes, channels}, bound);
  fc_bias_ = add_uniform(ctx, {config_.classes}, bound);
}

tensor resnet::conv_bn_forward(context& ctx, const conv_bn& layer, const tensor& x, conv_bn_saved& saved) {
  saved.conv_out = ops::conv2d_forward(ctx, x, layer.weight.value, nullptr, layer.options);
  auto bn = ops::batchnorm2d_forward_train(ctx, saved.conv_out, layer.gamma.value, layer.beta.value,
                                           layer.running_mean, layer.running_var);
  saved.mean = bn.save_mean;
  saved.invstd = bn.save_invstd;
  return bn.y;
}

tensor resnet::conv_bn_backward(context& ctx, const conv_bn& layer, const tensor& x, conv_bn_saved& saved,
                                const tensor& dy, bool need_dx) {
  tensor dconv = ops::batchnorm2d_backward(ctx, saved.conv_out, layer.gamma.value, saved.mean, saved.invstd, dy,
                                           layer.gamma.grad, layer.beta.grad);
  ctx.release(saved.conv_out);
  ctx.release(saved.mean);
  ctx.release(saved.invstd);
  tensor dx = ops::conv2d_backward(ctx, x, layer.weight.value, dconv, layer.options, layer.weight.grad, nullptr, need_dx);
  ctx.release(dconv);
  return dx;
}

tensor resnet::block_forward(context& ctx, const block& blk, const tensor& x, block_saved& saved) {
  saved.input = x;
  saved.hidden = ops::relu_inplace(ctx, conv_bn_forward(ctx, blk.first, x, saved.first));
  tensor main = conv_bn_forward(ctx, blk.second, saved.hidden, saved.second);
  tensor sum;
  if (blk.projection) {
    tensor shortcut = conv_bn_forward(ctx, blk.shortcut, x, saved.shortcut);
    sum = ops::add(ctx, main, shortcut);
    ctx.release(shortcut);
  } else {
    sum = ops::add(ctx, main, x);
  }
  ctx.release(main);
  saved.output = ops::relu_inplace(ctx, sum);
  return saved.output;
}

tensor resnet::block_backward(context& ctx, const block& blk, block_saved& saved, tensor& dy) {
  // The next block's backward has run, so this block's output has no use left but ReLU's.
  tensor dsum = ops::relu_backward(ctx, saved.output, dy);
  ctx.release(dy);
  ctx.release(saved.output);
  // The residual add passes dsum to both branches unchanged (no copy, as autograd does).
  tensor dhidden = conv_bn_backward(ctx, blk.second, saved.hidden, saved.second, dsum, true);
  tensor dfirst = ops::relu_backward(ctx, saved.hidden, dhidden);
  ctx.release(dhidden);
  ctx.release(saved.hidden);
  tensor dx = conv_bn_backward(ctx, blk.first, saved.input, saved.first, dfirst, true);
  ctx.release(dfirst);
  if (blk.projection) {
    tensor dshort = conv_bn_backward(ctx, blk.shortcut, saved.input, saved.shortcut, dsum, true);
    ops::accumulate(ctx, dx, dshort);
    ctx.release(dshort);
  } else {
    ops::accumulate(ctx, dx, dsum);
  }
  ctx.release(dsum);
  return dx;
}

tensor resnet::forward_backward(context& ctx, const batch& b, std::int64_t /*step*/) {
  conv_bn_saved stem_saved;
  tensor x = ops::relu_inplace(ctx, conv_bn_forward(ctx, stem_, b.input, stem_saved));
  const tensor stem_out = x;
  std::vector<block_saved> saved(blocks_.size());
  for (std::size_t i = 0; i < blocks_.size(); ++i) x = block_forward(ctx, blocks_[i], x, saved[i]);

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

  for (std::size_t i = blocks_.size(); i-- > 0;) dx = block_backward(ctx, blocks_[i], saved[i], dx);

  tensor dstem = ops::relu_backward(ctx, stem_out, dx);
  ctx.release(dx);
  tensor stem_relu = stem_out;
  ctx.release(stem_relu);
  conv_bn_backward(ctx, stem_, b.input, stem_saved, dstem, false);
  ctx.release(dstem);
  return loss;
}

}  // namespace sublinear::workloads::models
