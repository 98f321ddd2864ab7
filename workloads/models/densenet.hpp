// A DenseNet-like model (Huang et al. 2017) on small images: the non-linear graph of the
// workloads. A 3x3 stem, three dense blocks of L layers each (BN-ReLU-conv3x3 producing
// `growth` channels, each layer reading the concatenation of the block's input and every
// earlier layer's output), transitions (BN-ReLU-conv1x1 halving the channels, 2x2 max
// pooling) between blocks, then BN-ReLU, global average pooling and a linear classifier.
// SGD with momentum.
//
// Depth counts the layers with weights as the paper does: 3L + 4 (the stem, 3L dense
// layers, two transitions, the classifier), so depth 40 is the paper's DenseNet-40 with
// 12 layers per block. Concatenation is materialized per layer (Note [Concatenation by
// copies] in kernels/model_extras.cpp), so a block's memory grows with L squared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/models/model.hpp"

namespace sublinear::workloads::models {

struct densenet_config {
  std::int64_t depth = 22;  // 3L + 4, L >= 1
  std::int64_t growth = 4;
  std::int64_t stem = 8;    // channels out of the stem
  std::int64_t image = 8;   // square input, a multiple of 4
  std::int64_t in_channels = 3;
  std::int64_t classes = 10;
  std::int64_t batch = 8;
  ops::sgd_options sgd{0.02f, 0.9f, 0.0f};
};

class densenet final : public model {
 public:
  // Throws config_error saying what would be right when the depth or a size is invalid.
  explicit densenet(densenet_config config);

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] std::string description() const override;
  [[nodiscard]] host_batch make_batch(std::uint64_t seed, std::int64_t index) const override;

  [[nodiscard]] std::int64_t layers_per_block() const noexcept { return (config_.depth - 4) / 3; }

 protected:
  void build(context& ctx) override;
  tensor forward_backward(context& ctx, const batch& b, std::int64_t step) override;

 private:
  // BN then ReLU (in place) then a convolution without bias.
  struct bn_relu_conv {
    param gamma, beta, weight;
    tensor running_mean, running_var;
    std::int64_t kernel = 3;
  };
  struct bn_relu_conv_saved {
    tensor input;   // the concatenation BN normalizes
    tensor mean, invstd;
    tensor hidden;  // BN output after its in-place ReLU: the convolution's input
  };
  struct stage_saved {
    std::vector<std::int64_t> widths;         // channels of the block input and of each layer output
    std::vector<bn_relu_conv_saved> layers;   // one per dense layer
    bn_relu_conv_saved exit;                  // the transition (or the head's BN-ReLU)
    tensor transition_conv;                   // the transition conv's output (max pooling's input)
  };

  bn_relu_conv make_layer(context& ctx, std::int64_t in, std::int64_t out, std::int64_t kernel);
  // BN-ReLU on x (kept in `saved`, so owned by it), then the conv if `conv` is set.
  tensor layer_forward(context& ctx, const bn_relu_conv& layer, const tensor& x, bn_relu_conv_saved& saved,
                       bool conv);
  // Releases `saved`; returns d(input). dy is the conv's output gradient (or the ReLU
  // output's gradient when `conv` is false).
  tensor layer_backward(context& ctx, const bn_relu_conv& layer, bn_relu_conv_saved& saved, const tensor& dy,
                        bool conv);
  // Runs one dense block on `x` (consumed) and its exit; returns the exit's output.
  tensor stage_forward(context& ctx, std::size_t stage, tensor x, stage_saved& saved);
  // Consumes dy; returns d(block input).
  tensor stage_backward(context& ctx, std::size_t stage, stage_saved& saved, tensor& dy);

  densenet_config config_;
  param stem_;
  std::vector<std::vector<bn_relu_conv>> layers_;  // [stage][layer]
  std::vector<bn_relu_conv> exits_;                // two transitions, then the head's BN-ReLU
  param fc_weight_, fc_bias_;
};

}  // namespace sublinear::workloads::models
