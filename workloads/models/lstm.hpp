// A one-layer LSTM unrolled over T steps that classifies its sequence at every step: a
// linear head on each hidden state h_t, softmax cross-entropy against the sequence's
// label, the loss being the mean over steps. Adam.
//
// Every step keeps its input slice, h, c, activated gates and logits for backward, so
// feature-map memory grows linearly with T: the sequence case of Chen et al. 2016 (§5,
// LSTM lengths up to 2,048 there too).
//
// Why a loss at every step: with only the last step classified, the gradient reaching
// early steps decays geometrically until it is denormal, and denormal arithmetic is ~10x
// slower on a CPU (not on a GPU), which made iteration time non-monotonic in T. A loss
// at every step keeps each step's gradient at the scale of its own loss term.
#pragma once

#include <cstdint>
#include <string>

#include "workloads/models/model.hpp"

namespace sublinear::workloads::models {

struct lstm_config {
  std::int64_t seq_len = 256;  // T
  std::int64_t input = 32;
  std::int64_t hidden = 64;
  std::int64_t classes = 10;
  std::int64_t batch = 8;
  ops::adam_options adam{1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f};
};

class lstm final : public model {
 public:
  // Throws config_error naming the field when a size is out of range.
  explicit lstm(lstm_config config);

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] std::string description() const override;
  [[nodiscard]] host_batch make_batch(std::uint64_t seed, std::int64_t index) const override;

 protected:
  void build(context& ctx) override;
  tensor forward_backward(context& ctx, const batch& b, std::int64_t step) override;

 private:
  lstm_config config_;
  param w_ih_, w_hh_, bias_, fc_weight_, fc_bias_;  // fc: the head shared by every step
};

}  // namespace sublinear::workloads::models
