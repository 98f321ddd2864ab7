// Note [Transformer saved tensors]
// Rationale: as for ResNet (Note [ResNet saved tensors]), liveness must be a framework's,
//   and dropout must be replayable from its launch parameters alone.
// Approach: per layer, forward keeps its input (LayerNorm's), LayerNorm's output and
//   statistics, the fused QKV projection, the attention output and probabilities, the
//   mid-layer residual sum, the second LayerNorm's output and statistics, and the MLP's
//   hidden pre- and post-GELU activations. Dropout keeps no mask: its backward
//   recomputes the mask from the (seed, offset) the forward was given, so the dropout
//   outputs and the projections feeding them die right after the residual adds.
//   Backward releases each saved tensor after its last use; a residual's two gradient
//   paths meet in ops::accumulate.
// Limitations: no attention mask or padding; classification by mean pooling.
#include "workloads/models/transformer.hpp"

#include <cmath>
#include <string>

#include "workloads/kernels/attention.hpp"
#include "workloads/kernels/dropout.hpp"
#include "workloads/kernels/elementwise.hpp"
#include "workloads/kernels/embedding.hpp"
#include "workloads/kernels/layernorm.hpp"
#include "workloads/kernels/linear.hpp"
#include "workloads/kernels/loss.hpp"
#include "workloads/kernels/sequence.hpp"
#include "workloads/models/synthetic.hpp"
#include "sublinear/error.hpp"

namespace sublinear::workloads::models {
namespace {

optimizer_config adam(const ops::adam_options& o) {
  optimizer_config c;
  c.kind = optimizer_kind::adam;
  c.adam = o;
  return c;
}

// What one encoder layer keeps for backward. `input` belongs to the previous layer (or
// the embedding) and is released at the end of this layer's backward.
struct layer_saved {
  tensor input;
  ops::layernorm_output ln1;
  tensor qkv;
  ops::attention_output attention;
  tensor mid;  // input + dropout(attention projection)
  ops::layernorm_output ln2;
  tensor ff_hidden;  // before GELU
  tensor ff_act;     // after GELU
  ops::rng_stream drop1, drop2;
};

void release_layernorm(context& ctx, ops::layernorm_output& ln) {
  ctx.release(ln.y);
  ctx.release(ln.mean);
  ctx.release(ln.rstd);
}

}  // namespace

transformer::transformer(transformer_config config) : model(adam(config.adam)), config_(config) {
  const auto check = [](std::int64_t v, std::int64_t min, const char* field) {
    if (v < min) {
      throw config_error(std::string("transformer: ") + field + " must be >= " + std::to_string(min) + ", got " +
                         std::to_string(v));
    }
  };
  check(config_.layers, 1, "layers");
  check(config_.seq_len, 1, "sequence length");
  check(config_.heads, 1, "heads");
  check(config_.model, config_.heads, "model width");
  check(config_.ff, 1, "feed-forward width");
  check(config_.classes, 2, "classes");
  check(config_.vocab, config_.classes, "vocabulary");
  check(config_.batch, 1, "batch");
  if (config_.model % config_.heads != 0) {
    throw config_error("transformer: model width " + std::to_string(config_.model) + " is not a multiple of " +
                       std::to_string(config_.heads) + " heads");
  }
  if (!(config_.dropout >= 0.0f && config_.dropout < 1.0f)) {
    throw config_error("transformer: dropout must be in [0, 1), got " + std::to_string(config_.dropout));
  }
}

std::string transformer::name() const { return "transformer-" + std::to_string(config_.layers); }

std::string transformer::description() const {
  return std::to_string(config_.layers) + " encoder layers, " + std::to_string(config_.seq_len) + " tokens, width " +
         std::to_string(config_.model) + ", " + std::to_string(config_.heads) + " heads, feed-forward " +
         std::to_string(config_.ff) + ", dropout " + std::to_string(config_.dropout).substr(0, 4) + ", batch " +
         std::to_string(config_.batch) + ", " + std::to_string(config_.classes) + " classes, Adam";
}

host_batch transformer::make_batch(std::uint64_t seed, std::int64_t index) const {
  // A sequence of class k draws half its tokens from the k-th slice of the vocabulary and
  // the rest uniformly: the class is the slice that is over-represented.
  synthetic::generator g(seed, synthetic::kBatchStream + 2 * static_cast<std::uint64_t>(index + 1));
  const std::int64_t slice = config_.vocab / config_.classes;
  host_batch out;
  out.input_shape = {config_.batch, config_.seq_len};
  out.target_shape = {config_.batch};
  out.input.resize(static_cast<std::size_t>(config_.batch * config_.seq_len));
  out.target.resize(static_cast<std::size_t>(config_.batch));
  for (std::int64_t s = 0; s < config_.batch; ++s) {
    const std::int64_t k = g.below(config_.classes);
    out.target[static_cast<std::size_t>(s)] = static_cast<float>(k);
    for (std::int64_t t = 0; t < config_.seq_len; ++t) {
      const bool from_class = (g.next() & 1U) != 0;
      const std::int64_t id = from_class ? k * slice + g.below(slice) : g.below(config_.vocab);
      out.input[static_cast<std::size_t>(s * config_.seq_len + t)] = static_cast<float>(id);
    }
  }
  return out;
}

void transformer::build(context& ctx) {
  const std::int64_t d = config_.model;
  const std::int64_t f = config_.ff;
  tokens_ = add_uniform(ctx, {config_.vocab, d}, 1.0f);
  positions_ = add_uniform(ctx, {config_.seq_len, d}, 0.1f);
  const float bd = 1.0f / std::sqrt(static_cast<float>(d));
  const float bf = 1.0f / std::sqrt(static_cast<float>(f));
  for (std::int64_t i = 0; i < config_.layers; ++i) {
    layer l;
    l.ln1_gamma = add_constant(ctx, {d}, 1.0f);
    l.ln1_beta = add_constant(ctx, {d}, 0.0f);
    l.qkv_weight = add_uniform(ctx, {3 * d, d}, bd);
    l.qkv_bias = add_constant(ctx, {3 * d}, 0.0f);
    l.out_weight = add_uniform(ctx, {d, d}, bd);
    l.out_bias = add_constant(ctx, {d}, 0.0f);
    l.ln2_gamma = add_constant(ctx, {d}, 1.0f);
    l.ln2_beta = add_constant(ctx, {d}, 0.0f);
    l.ff1_weight = add_uniform(ctx, {f, d}, bd);
    l.ff1_bias = add_constant(ctx, {f}, 0.0f);
    l.ff2_weight = add_uniform(ctx, {d, f}, bf);
    l.ff2_bias = add_constant(ctx, {d}, 0.0f);
    layers_.push_back(l);
  }
  final_gamma_ = add_constant(ctx, {d}, 1.0f);
  final_beta_ = add_constant(ctx, {d}, 0.0f);
  fc_weight_ = add_uniform(ctx, {config_.classes, d}, bd);
  fc_bias_ = add_constant(ctx, {config_.classes}, 0.0f);
}

tensor transformer::forward_backward(context& ctx, const batch& b, std::int64_t step) {
  const float p = config_.dropout;
  const std::int64_t heads = config_.heads;
  ops::rng_stream rng{seed(), static_cast<std::uint64_t>(step) * 2 * static_cast<std::uint64_t>(config_.layers)};

  std::vector<layer_saved> saved(layers_.size());
  tensor x = ops::embedding_forward(ctx, b.input, tokens_.value, &positions_.value);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const layer& l = layers_[i];
    layer_saved& s = saved[i];
    s.input = x;
    s.ln1 = ops::layernorm_forward(ctx, x, l.ln1_gamma.value, l.ln1_beta.value);
    s.qkv = ops::linear_forward(ctx, s.ln1.y, l.qkv_weight.value, &l.qkv_bias.value);
    s.attention = ops::attention_forward_packed(ctx, s.qkv, heads);
    tensor proj = ops::linear_forward(ctx, s.attention.out, l.out_weight.value, &l.out_bias.value);
    s.drop1 = rng.next();
    tensor dropped = ops::dropout_forward(ctx, proj, p, s.drop1);
    ctx.release(proj);
    s.mid = ops::add(ctx, x, dropped);
    ctx.release(dropped);

    s.ln2 = ops::layernorm_forward(ctx, s.mid, l.ln2_gamma.value, l.ln2_beta.value);
    s.ff_hidden = ops::linear_forward(ctx, s.ln2.y, l.ff1_weight.value, &l.ff1_bias.value);
    s.ff_act = ops::gelu_forward(ctx, s.ff_hidden);
    tensor ff_out = ops::linear_forward(ctx, s.ff_act, l.ff2_weight.value, &l.ff2_bias.value);
    s.drop2 = rng.next();
    dropped = ops::dropout_forward(ctx, ff_out, p, s.drop2);
    ctx.release(ff_out);
    x = ops::add(ctx, s.mid, dropped);
    ctx.release(dropped);
  }

  auto final_ln = ops::layernorm_forward(ctx, x, final_gamma_.value, final_beta_.value);
  tensor pooled = ops::sequence_mean_forward(ctx, final_ln.y);
  tensor logits = ops::linear_forward(ctx, pooled, fc_weight_.value, &fc_bias_.value);
  tensor loss = ops::softmax_cross_entropy_forward(ctx, logits, b.target);

  tensor dlogits = ops::softmax_cross_entropy_backward(ctx, logits, b.target);
  ctx.release(logits);
  tensor dpooled = ops::linear_backward(ctx, pooled, fc_weight_.value, dlogits, fc_weight_.grad, &fc_bias_.grad);
  ctx.release(dlogits);
  ctx.release(pooled);
  tensor dfinal = ops::sequence_mean_backward(ctx, dpooled, config_.seq_len);
  ctx.release(dpooled);
  tensor dx = ops::layernorm_backward(ctx, dfinal, x, final_gamma_.value, final_ln.mean, final_ln.rstd,
                                      final_gamma_.grad, final_beta_.grad);
  ctx.release(dfinal);
  release_layernorm(ctx, final_ln);
  ctx.release(x);

  for (std::size_t i = layers_.size(); i-- > 0;) {
    layer& l = layers_[i];
    layer_saved& s = saved[i];
    // out = mid + dropout(ff(ln2(mid))): dx reaches mid directly and through the branch.
    tensor dff_out = ops::dropout_backward(ctx, dx, p, s.drop2);
    tensor dact = ops::linear_backward(ctx, s.ff_act, l.ff2_weight.value, dff_out, l.ff2_weight.grad, &l.ff2_bias.grad);
    ctx.release(dff_out);
    ctx.release(s.ff_act);
    tensor dhidden = ops::gelu_backward(ctx, dact, s.ff_hidden);
    ctx.release(dact);
    ctx.release(s.ff_hidden);
    tensor dln2 = ops::linear_backward(ctx, s.ln2.y, l.ff1_weight.value, dhidden, l.ff1_weight.grad, &l.ff1_bias.grad);
    ctx.release(dhidden);
    tensor dmid = ops::layernorm_backward(ctx, dln2, s.mid, l.ln2_gamma.value, s.ln2.mean, s.ln2.rstd, l.ln2_gamma.grad,
                                          l.ln2_beta.grad);
    ctx.release(dln2);
    release_layernorm(ctx, s.ln2);
    ctx.release(s.mid);
    ops::accumulate(ctx, dmid, dx);
    ctx.release(dx);

    // mid = input + dropout(proj(attention(qkv(ln1(input))))).
    tensor dproj = ops::dropout_backward(ctx, dmid, p, s.drop1);
    tensor dattn = ops::linear_backward(ctx, s.attention.out, l.out_weight.value, dproj, l.out_weight.grad,
                                        &l.out_bias.grad);
    ctx.release(dproj);
    ctx.release(s.attention.out);
    tensor dqkv = ops::attention_backward_packed(ctx, dattn, s.qkv, s.attention.probs, heads);
    ctx.release(dattn);
    ctx.release(s.attention.probs);
    ctx.release(s.qkv);
    tensor dln1 = ops::linear_backward(ctx, s.ln1.y, l.qkv_weight.value, dqkv, l.qkv_weight.grad, &l.qkv_bias.grad);
    ctx.release(dqkv);
    tensor dinput = ops::layernorm_backward(ctx, dln1, s.input, l.ln1_gamma.value, s.ln1.mean, s.ln1.rstd,
                                            l.ln1_gamma.grad, l.ln1_beta.grad);
    ctx.release(dln1);
    release_layernorm(ctx, s.ln1);
    ctx.release(s.input);
    ops::accumulate(ctx, dinput, dmid);
    ctx.release(dmid);
    dx = dinput;
  }
  ops::embedding_backward(ctx, dx, b.input, tokens_.grad, &positions_.grad);
  ctx.release(dx);
  return loss;
}

}  // namespace sublinear::workloads::models
