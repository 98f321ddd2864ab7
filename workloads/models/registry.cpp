#include "workloads/models/registry.hpp"

#include <string>

#include "workloads/models/densenet.hpp"
#include "workloads/models/lstm.hpp"
#include "workloads/models/mlp.hpp"
#include "workloads/models/resnet.hpp"
#include "workloads/models/transformer.hpp"
#include "sublinear/error.hpp"

namespace sublinear::workloads::models {

std::string_view model_kind_names() { return "mlp|resnet|densenet|lstm|transformer"; }

std::string_view to_string(model_kind kind) {
  switch (kind) {
    case model_kind::mlp: return "mlp";
    case model_kind::resnet: return "resnet";
    case model_kind::densenet: return "densenet";
    case model_kind::lstm: return "lstm";
    case model_kind::transformer: return "transformer";
  }
  return "unknown";
}

std::optional<model_kind> parse_model_kind(std::string_view name) {
  for (auto kind : {model_kind::mlp, model_kind::resnet, model_kind::densenet, model_kind::lstm,
                    model_kind::transformer}) {
    if (name == to_string(kind)) return kind;
  }
  return std::nullopt;
}

bool uses_depth(model_kind kind) { return kind != model_kind::lstm; }
bool uses_seq_len(model_kind kind) { return kind == model_kind::lstm || kind == model_kind::transformer; }

model_config with_defaults(model_config c) {
  auto fill = [](std::int64_t& v, std::int64_t d) {
    if (v == 0) v = d;
  };
  switch (c.kind) {
    case model_kind::mlp: fill(c.depth, mlp_config{}.layers); fill(c.batch, mlp_config{}.batch); break;
    case model_kind::resnet: fill(c.depth, resnet_config{}.depth); fill(c.batch, resnet_config{}.batch); break;
    case model_kind::densenet: fill(c.depth, densenet_config{}.depth); fill(c.batch, densenet_config{}.batch); break;
    case model_kind::lstm: fill(c.seq_len, lstm_config{}.seq_len); fill(c.batch, lstm_config{}.batch); break;
    case model_kind::transformer:
      fill(c.depth, transformer_config{}.layers);
      fill(c.seq_len, transformer_config{}.seq_len);
      fill(c.batch, transformer_config{}.batch);
      break;
  }
  return c;
}

std::unique_ptr<model> make_model(const model_config& requested) {
  const std::string kind(to_string(requested.kind));
  if (requested.depth != 0 && !uses_depth(requested.kind)) {
    throw config_error(kind + " has no depth setting (its size is the sequence length)");
  }
  if (requested.seq_len != 0 && !uses_seq_len(requested.kind)) {
    throw config_error(kind + " has no sequence length (only lstm and transformer do)");
  }
  if (requested.depth < 0 || requested.seq_len < 0 || requested.batch < 0) {
    throw config_error("depth, sequence length and batch must be positive");
  }
  const model_config c = with_defaults(requested);
  switch (c.kind) {
    case model_kind::mlp: {
      mlp_config m;
      m.layers = c.depth;
      m.batch = c.batch;
      return std::make_unique<mlp>(m);
    }
    case model_kind::resnet: {
      resnet_config r;
      r.depth = c.depth;
      r.batch = c.batch;
      return std::make_unique<resnet>(r);
    }
    case model_kind::densenet: {
      densenet_config d;
      d.depth = c.depth;
      d.batch = c.batch;
      return std::make_unique<densenet>(d);
    }
    case model_kind::lstm: {
      lstm_config l;
      l.seq_len = c.seq_len;
      l.batch = c.batch;
      return std::make_unique<lstm>(l);
    }
    case model_kind::transformer: {
      transformer_config t;
      t.layers = c.depth;
      t.seq_len = c.seq_len;
      t.batch = c.batch;
      return std::make_unique<transformer>(t);
    }
  }
  throw config_error("unknown model kind");
}

std::unique_ptr<model> make_small_model(model_kind kind, float learning_rate) {
  const auto lr = [&](float& field) {
    if (learning_rate >= 0.0f) field = learning_rate;
  };
  switch (kind) {
    case model_kind::mlp: {
      mlp_config c;
      c.layers = 3;
      c.input = 8;
      c.hidden = 16;
      c.classes = 4;
      c.batch = 8;
      lr(c.sgd.lr);
      return std::make_unique<mlp>(c);
    }
    case model_kind::resnet: {
      resnet_config c;
      c.depth = 8;  // one block per stage: both shortcut kinds
      c.zero_init_residual = false;  // so every layer gets a gradient in the first step
      c.width = 2;
      c.image = 8;
      c.classes = 4;
      c.batch = 4;
      lr(c.sgd.lr);
      return std::make_unique<resnet>(c);
    }
    case model_kind::densenet: {
      densenet_config c;
      c.depth = 10;  // two layers per block: a concatenation of three inputs
      c.growth = 2;
      c.stem = 4;
      c.image = 8;
      c.classes = 4;
      c.batch = 4;
      lr(c.sgd.lr);
      return std::make_unique<densenet>(c);
    }
    case model_kind::lstm: {
      lstm_config c;
      c.seq_len = 6;
      c.input = 4;
      c.hidden = 8;
      c.classes = 3;
      c.batch = 4;
      lr(c.adam.lr);
      return std::make_unique<lstm>(c);
    }
    case model_kind::transformer: {
      transformer_config c;
      c.layers = 2;
      c.seq_len = 8;
      c.model = 8;
      c.heads = 2;
      c.ff = 16;
      c.vocab = 16;
      c.classes = 4;
      c.batch = 4;
      lr(c.adam.lr);
      return std::make_unique<transformer>(c);
    }
  }
  throw config_error("unknown model kind");
}

}  // namespace sublinear::workloads::models
