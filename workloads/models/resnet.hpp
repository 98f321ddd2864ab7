// A CIFAR-style ResNet of any depth on small images (He et al. 2016, §4.2): a 3x3 stem,
// three stages of basic blocks (conv-BN-ReLU-conv-BN, residual add, ReLU) at widths
// w, 2w, 4w with a stride-2 projection shortcut into stages two and three, global
// average pooling and a linear classifier. SGD with momentum.
//
// Depth counts the layers with weights, as the paper does: 2 + 2 * blocks (the stem, two
// convolutions per block, the classifier), so 6n + 2 gives the paper's ResNet-20, -56,
// -110, -1202; any even depth >= 8 is accepted, its blocks split as evenly as possible
// over the three stages (earlier stages take the remainder).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "workloads/kernels/conv2d.hpp"
#include "workloads/models/model.hpp"

namespace sublinear::workloads::models {

struct resnet_config {
  std::int64_t depth = 56;
  // Few channels and a larger image keep the parameters small beside the feature maps
  // (they are ~15% of the peak at these sizes) and an iteration of 1,000+ layers in ~2 s.
  std::int64_t width = 4;   // channels of the first stage
  std::int64_t image = 16;  // square input, H = W
  std::int64_t in_channels = 3;
  std::int64_t classes = 10;
  std::int64_t batch = 16;
  // Start every block's last BatchNorm scale at 0 (Goyal et al. 2017), so each block
  // starts as the identity and 1,000+ layers train at the learning rate 20 do.
  bool zero_init_residual = true;
  ops::sgd_options sgd{0.05f, 0.9f, 0.0f};
};

class resnet final : public model {
 public:
  // Throws config_error saying what would be right when the depth or a size is invalid.
  explicit resnet(resnet_config config);

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] std::string description() const override;
  [[nodiscard]] host_batch make_batch(std::uint64_t seed, std::int64_t index) const override;

  [[nodiscard]] std::int64_t blocks() const noexcept { return (config_.depth - 2) / 2; }
  [[nodiscard]] std::array<std::int64_t, 3> stage_blocks() const noexcept;

 protected:
  void build(context& ctx) override;
  tensor forward_backward(context& ctx, const batch& b, std::int64_t step) override;

 private:
  // A convolution without bias followed by BatchNorm.
  struct conv_bn {
    param weight, gamma, beta;
    tensor running_mean, running_var;
    ops::conv2d_options options;
  };
  // What conv_bn's forward keeps for backward (the input is owned by the caller).
  struct conv_bn_saved {
    tensor conv_out, mean, invstd;
  };
  struct block {
    conv_bn first, second;
    bool projection = false;
    conv_bn shortcut;  // 1x1 stride-2 projection, when `projection`
  };
  struct block_saved {
    tensor input;  // the previous block's output (released by that block's backward)
    conv_bn_saved first, second, shortcut;
    tensor hidden;  // first conv-BN after its in-place ReLU
    tensor output;  // after the residual add and its in-place ReLU
  };

  conv_bn make_conv_bn(context& ctx, std::int64_t in, std::int64_t out, std::int64_t kernel,
                       ops::conv2d_options options, float gamma = 1.0f);
  tensor conv_bn_forward(context& ctx, const conv_bn& layer, const tensor& x, conv_bn_saved& saved);
  // Releases `saved`; returns dx unless need_dx is false.
  tensor conv_bn_backward(context& ctx, const conv_bn& layer, const tensor& x, conv_bn_saved& saved,
                          const tensor& dy, bool need_dx);
  tensor block_forward(context& ctx, const block& blk, const tensor& x, block_saved& saved);
  // Consumes dy; releases the block's saved tensors (its input excepted); returns dx.
  tensor block_backward(context& ctx, const block& blk, block_saved& saved, tensor& dy);

  resnet_config config_;
  conv_bn stem_;
  std::vector<block> blocks_;
  param fc_weight_, fc_bias_;
};

}  // namespace sublinear::workloads::models
