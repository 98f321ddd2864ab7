// Choosing a model by name and a few sizes: what `sublinear demo`, the figures program and
// the tests share.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "workloads/models/model.hpp"

namespace sublinear::workloads::models {

enum class model_kind { mlp, resnet, densenet, lstm, transformer };

// "mlp|resnet|densenet|lstm|transformer", for messages.
[[nodiscard]] std::string_view model_kind_names();
[[nodiscard]] std::string_view to_string(model_kind kind);
[[nodiscard]] std::optional<model_kind> parse_model_kind(std::string_view name);

// The sizes a user picks; 0 means the model's default. What each size means:
//   depth:   mlp linear layers (4); resnet layers, 2 + 2 x blocks (56); densenet layers,
//            3L + 4 (22); transformer encoder layers (2); not used by lstm.
//   seq_len: lstm steps (256); transformer tokens (64); not used by the others.
//   batch:   samples per iteration (mlp 32, the others 8).
struct model_config {
  model_kind kind = model_kind::resnet;
  std::int64_t depth = 0;
  std::int64_t seq_len = 0;
  std::int64_t batch = 0;
};

// Whether `depth` and `seq_len` mean something for this kind.
[[nodiscard]] bool uses_depth(model_kind kind);
[[nodiscard]] bool uses_seq_len(model_kind kind);

// The model the config names, with its defaults filled in. Throws config_error saying
// what would be right when a size is out of range or set for a kind that does not use it.
[[nodiscard]] std::unique_ptr<model> make_model(const model_config& config);

// The smallest sizes that still run every layer of the kind, a step taking milliseconds:
// for tests and end-to-end matrices. learning_rate < 0 keeps the model's default; 0
// freezes the parameters (a step then only computes the loss and the gradients).
[[nodiscard]] std::unique_ptr<model> make_small_model(model_kind kind, float learning_rate = -1.0f);

// The config with every 0 replaced by the kind's default (the unused sizes stay 0).
[[nodiscard]] model_config with_defaults(model_config config);

}  // namespace sublinear::workloads::models
