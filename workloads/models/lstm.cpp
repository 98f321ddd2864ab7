// Note [LSTM saved tensors]
// Rationale: the unrolled LSTM is the sequence workload of Chen et al. 2016: memory
//   linear in T, each step a few small launches.
// Approach: each step allocates its input slice (sequence_select), h_t, c_t and the
//   activated gates (lstm_cell_forward) and the head's logits; all are kept for
//   backward. Backward runs the steps in reverse: the head's gradient plus the gradient
//   from step t + 1 reach h_t, lstm_cell_backward returns the gradients for h_{t-1} and
//   c_{t-1}, and step t's tensors are released (h_t and c_t are also step t + 1's
//   inputs, whose backward has already run). The input's gradient is computed by the
//   cell op and released at once: the data needs none.
// Limitations: one layer; the batch input [B, T, I] lives for the whole iteration.
#include "workloads/models/lstm.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "workloads/kernels/elementwise.hpp"
#include "workloads/kernels/linear.hpp"
#include "workloads/kernels/loss.hpp"
#include "workloads/kernels/lstm.hpp"
#include "workloads/kernels/model_extras.hpp"
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

}  // namespace

lstm::lstm(lstm_config config) : model(adam(config.adam)), config_(config) {
  const auto check = [](std::int64_t v, std::int64_t min, const char* field) {
    if (v < min) {
      throw config_error(std::string("lstm: ") + field + " must be >= " + std::to_string(min) + ", got " +
                         std::to_string(v));
    }
  };
  check(config_.seq_len, 1, "sequence length");
  check(config_.input, 1, "input size");
  check(config_.hidden, 1, "hidden size");
  check(config_.classes, 2, "classes");
  check(config_.batch, 1, "batch");
}

std::string lstm::name() const { return "lstm-" + std::to_string(config_.seq_len); }

std::string lstm::description() const {
  return "1 layer unrolled over " + std::to_string(config_.seq_len) + " steps, input " + std::to_string(config_.input) +
         ", hidden " + std::to_string(config_.hidden) + ", batch " + std::to_string(config_.batch) + ", " +
         std::to_string(config_.classes) + " classes predicted at every step, Adam";
}

host_batch lstm::make_batch(std::uint64_t seed, std::int64_t index) const {
  const std::int64_t features = config_.seq_len * config_.input;
  auto data = synthetic::prototype_batch(seed, index, config_.batch, config_.classes,
                                         synthetic::prototypes(seed, config_.classes, features), features, 1.0f);
  return host_batch{std::move(data.values),
                    {config_.batch, config_.seq_len, config_.input},
                    std::move(data.labels),
                    {config_.batch}};
}

void lstm::build(context& ctx) {
  const std::int64_t h = config_.hidden;
  const float bound = 1.0f / std::sqrt(static_cast<float>(h));  // PyTorch's LSTM init
  w_ih_ = add_uniform(ctx, {4 * h, config_.input}, bound);
  w_hh_ = add_uniform(ctx, {4 * h, h}, bound);
  bias_ = add_uniform(ctx, {4 * h}, bound);
  fc_weight_ = add_uniform(ctx, {config_.classes, h}, bound);
  fc_bias_ = add_uniform(ctx, {config_.classes}, bound);
}

tensor lstm::forward_backward(context& ctx, const batch& b, std::int64_t /*step*/) {
  struct step_saved {
    tensor x;  // the input slice at this step
    ops::lstm_cell_output out;
    tensor logits;  // the head's output, for the loss's backward
  };
  const auto steps = static_cast<std::size_t>(config_.seq_len);
  const float per_step = 1.0f / static_cast<float>(steps);
  tensor h0 = ctx.empty({config_.batch, config_.hidden});
  ops::zero(ctx, h0);
  tensor c0 = ctx.empty({config_.batch, config_.hidden});
  ops::zero(ctx, c0);
  tensor loss = ctx.empty({1});
  ops::zero(ctx, loss);

  std::vector<step_saved> saved(steps);
  for (std::size_t t = 0; t < steps; ++t) {
    step_saved& s = saved[t];
    const tensor& h_prev = t == 0 ? h0 : saved[t - 1].out.h;
    const tensor& c_prev = t == 0 ? c0 : saved[t - 1].out.c;
    s.x = ops::sequence_select_forward(ctx, b.input, static_cast<std::int64_t>(t));
    s.out = ops::lstm_cell_forward(ctx, s.x, h_prev, c_prev, w_ih_.value, w_hh_.value, bias_.value);
    s.logits = ops::linear_forward(ctx, s.out.h, fc_weight_.value, &fc_bias_.value);
    tensor step_loss = ops::softmax_cross_entropy_forward(ctx, s.logits, b.target);
    ops::accumulate(ctx, loss, step_loss);
    ctx.release(step_loss);
  }
  ops::scale(ctx, loss, per_step);

  tensor dh, dc;  // gradients reaching h_t and c_t from step t + 1 (none for the last step)
  for (std::size_t t = steps; t-- > 0;) {
    step_saved& s = saved[t];
    tensor dlogits = ops::softmax_cross_entropy_backward(ctx, s.logits, b.target, per_step);
    ctx.release(s.logits);
    tensor dh_head = ops::linear_backward(ctx, s.out.h, fc_weight_.value, dlogits, fc_weight_.grad, &fc_bias_.grad);
    ctx.release(dlogits);
    if (dh.data != nullptr) {
      ops::accumulate(ctx, dh_head, dh);
      ctx.release(dh);
    }
    const tensor& h_prev = t == 0 ? h0 : saved[t - 1].out.h;
    const tensor& c_prev = t == 0 ? c0 : saved[t - 1].out.c;
    auto g = ops::lstm_cell_backward(ctx, dh_head, dc.data != nullptr ? &dc : nullptr, s.x, h_prev, c_prev, s.out.c,
                                     s.out.gates, w_ih_.value, w_hh_.value, w_ih_.grad, w_hh_.grad, bias_.grad);
    ctx.release(dh_head);
    ctx.release(dc);
    ctx.release(g.dx);  // the data needs no gradient
    // Step t + 1's backward (the other reader of h_t and c_t) has run.
    ctx.release(s.x);
    ctx.release(s.out.gates);
    ctx.release(s.out.c);
    ctx.release(s.out.h);
    dh = g.dh_prev;
    dc = g.dc_prev;
  }
  ctx.release(dh);
  ctx.release(dc);
  ctx.release(h0);
  ctx.release(c0);
  return loss;
}

}  // namespace sublinear::workloads::models
