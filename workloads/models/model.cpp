#include "workloads/models/model.hpp"

#include <span>
#include <utility>

#include "workloads/kernels/elementwise.hpp"
#include "sublinear/error.hpp"

namespace sublinear::workloads::models {

model::~model() { release(); }

void model::init(context& ctx, std::uint64_t seed) {
  if (home_) throw config_error(name() + ": init() called twice");
  home_.emplace(ctx);
  seed_ = seed;
  try {
    build(ctx);
  } catch (...) {
    release();
    throw;
  }
}

model::param model::add_parameter(context& ctx, std::vector<std::int64_t> shape) {
  slot s;
  s.value = ctx.empty(shape);
  s.grad = ctx.empty(shape);
  ops::zero(ctx, s.grad);
  s.state_a = ctx.empty(shape);
  ops::zero(ctx, s.state_a);
  if (optimizer_.kind == optimizer_kind::adam) {
    s.state_b = ctx.empty(std::move(shape));
    ops::zero(ctx, s.state_b);
  }
  params_.push_back(s);
  return param{s.value, s.grad};
}

model::param model::add_uniform(context& ctx, std::vector<std::int64_t> shape, float bound) {
  const auto index = static_cast<std::uint64_t>(params_.size());
  param p = add_parameter(ctx, std::move(shape));
  ops::init_uniform(ctx, p.value, -bound, bound, seed_, index);
  return p;
}

model::param model::add_constant(context& ctx, std::vector<std::int64_t> shape, float value) {
  param p = add_parameter(ctx, std::move(shape));
  ops::fill(ctx, p.value, value);
  return p;
}

tensor model::add_buffer(context& ctx, std::vector<std::int64_t> shape, float value) {
  tensor t = ctx.empty(std::move(shape));
  ops::fill(ctx, t, value);
  buffers_.push_back(t);
  return t;
}

tensor model::train_step(step_context& sc, const batch& b) {
  if (!home_) throw config_error(name() + ": train_step() before init()");
  context& ctx = sc.main;
  for (const slot& s : params_) ops::zero(ctx, s.grad);
  tensor loss = forward_backward(ctx, b, sc.index);
  if (sc.side == nullptr) {
    optimizer_step(ctx, sc.index);
    return loss;
  }
  if (sc.grads_ready == nullptr || sc.params_ready == nullptr) {
    throw config_error(name() + ": a two-stream step needs both events");
  }
  // The side stream must not read gradients before backward has written them, and the
  // next forward (and the next zeroing of the gradients) must not run before the update.
  ctx.dev.record_event(sc.grads_ready, ctx.stream);
  ctx.dev.stream_wait_event(sc.side->stream, sc.grads_ready);
  optimizer_step(*sc.side, sc.index);
  ctx.dev.record_event(sc.params_ready, sc.side->stream);
  ctx.dev.stream_wait_event(ctx.stream, sc.params_ready);
  return loss;
}

void model::optimizer_step(context& ctx, std::int64_t index) {
  std::vector<tensor> values, grads, state_a, state_b;
  values.reserve(params_.size());
  grads.reserve(params_.size());
  state_a.reserve(params_.size());
  for (const slot& s : params_) {
    values.push_back(s.value);
    grads.push_back(s.grad);
    state_a.push_back(s.state_a);
    if (optimizer_.kind == optimizer_kind::adam) state_b.push_back(s.state_b);
  }
  if (optimizer_.kind == optimizer_kind::sgd) {
    ops::sgd_step(ctx, values, grads, state_a, optimizer_.sgd);
  } else {
    ops::adam_step(ctx, values, grads, state_a, state_b, index + 1, optimizer_.adam);
  }
}

std::vector<tensor> model::parameters() const {
  std::vector<tensor> out;
  out.reserve(params_.size());
  for (const slot& s : params_) out.push_back(s.value);
  return out;
}

std::vector<tensor> model::gradients() const {
  std::vector<tensor> out;
  out.reserve(params_.size());
  for (const slot& s : params_) out.push_back(s.grad);
  return out;
}

std::int64_t model::parameter_count() const {
  std::int64_t n = 0;
  for (const slot& s : params_) n += s.value.numel();
  return n;
}

void model::release() {
  if (!home_) return;
  context& ctx = *home_;
  // Reverse allocation order, as a framework's module teardown would roughly do.
  for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) ctx.release(*it);
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    ctx.release(it->state_b);
    ctx.release(it->state_a);
    ctx.release(it->grad);
    ctx.release(it->value);
  }
  buffers_.clear();
  params_.clear();
  home_.reset();
}

}  // namespace sublinear::workloads::models
