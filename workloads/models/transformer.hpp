// A Transformer encoder classifier (pre-LayerNorm, as in GPT-2 and most current
// encoders): token and learned position embeddings; per layer LayerNorm, fused QKV
// projection, multi-head self-attention, output projection, dropout, residual add, then
// LayerNorm, a GELU feed-forward layer, dropout, residual add; a final LayerNorm, mean
// pooling over the sequence and a linear classifier. Adam.
//
// Dropout draws from a counter-based RNG whose seed and offset are kernel parameters
// passed by value (offset = iteration x dropout calls per step + call number), so two
// runs with one seed draw the same masks and a replay of a recorded launch reproduces
// its mask bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/models/model.hpp"

namespace sublinear::workloads::models {

struct transformer_config {
  std::int64_t layers = 2;
  std::int64_t seq_len = 64;
  std::int64_t model = 32;  // embedding width, a multiple of heads
  std::int64_t heads = 4;
  std::int64_t ff = 64;     // feed-forward width
  std::int64_t vocab = 64;
  std::int64_t classes = 8;
  std::int64_t batch = 8;
  float dropout = 0.1f;
  ops::adam_options adam{3e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
};

class transformer final : public model {
 public:
  // Throws config_error naming the field when a size is out of range.
  explicit transformer(transformer_config config);

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] std::string description() const override;
  [[nodiscard]] host_batch make_batch(std::uint64_t seed, std::int64_t index) const override;

 protected:
  void build(context& ctx) override;
  tensor forward_backward(context& ctx, const batch& b, std::int64_t step) override;

 private:
  struct layer {
    param ln1_gamma, ln1_beta, qkv_weight, qkv_bias, out_weight, out_bias;
    param ln2_gamma, ln2_beta, ff1_weight, ff1_bias, ff2_weight, ff2_bias;
  };

  transformer_config config_;
  param tokens_, positions_;
  std::vector<layer> layers_;
  param final_gamma_, final_beta_, fc_weight_, fc_bias_;
};

}  // namespace sublinear::workloads::models
