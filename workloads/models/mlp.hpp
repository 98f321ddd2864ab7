// A multilayer perceptron: linear layers with in-place ReLU between them, softmax
// cross-entropy on the last, SGD with momentum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/models/model.hpp"

namespace sublinear::workloads::models {

struct mlp_config {
  std::int64_t layers = 4;  // linear layers, >= 1
  std::int64_t input = 64;
  std::int64_t hidden = 128;
  std::int64_t classes = 10;
  std::int64_t batch = 32;
  ops::sgd_options sgd{0.05f, 0.9f, 0.0f};
};

class mlp final : public model {
 public:
  // Throws config_error naming the field when a size is out of range.
  explicit mlp(mlp_config config);

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] std::string description() const override;
  [[nodiscard]] host_batch make_batch(std::uint64_t seed, std::int64_t index) const override;

 protected:
  void build(context& ctx) override;
  tensor forward_backward(context& ctx, const batch& b, std::int64_t step) override;

 private:
  mlp_config config_;
  std::vector<param> weights_, biases_;
};

}  // namespace sublinear::workloads::models
