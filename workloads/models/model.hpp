// The interface every workload model implements, and the persistent state they share.
//
// Note [Framework-like models]
// Rationale: sublinear is a drop-in allocator, so the workloads that prove it must
//   allocate and free the way an eager framework does, or the traced liveness would be
//   one nobody sees in practice. In PyTorch a tensor dies when its last reference does:
//   an activation saved for backward dies when its backward node has run, a temporary
//   dies right after the op that consumed it, parameters, gradients and optimizer state
//   live as long as the module and the optimizer.
// Approach: a model owns its persistent state (parameters, their gradients, optimizer
//   state, buffers such as BatchNorm running statistics), allocated once by init() and
//   freed by release() or the destructor. forward_backward() keeps the activations it
//   saves for backward in plain structs and releases each right after its last backward
//   use; every temporary is released right after the op that consumes it. Gradients are
//   zeroed at the start of a step and accumulated into by the backward ops. The optimizer
//   step is one multi-tensor launch per 32 parameters (ops::sgd_step / ops::adam_step).
//   In a two-stream step (step_context::side) the optimizer runs on the side stream,
//   ordered after backward and before the next forward by events, as a framework that
//   overlaps its optimizer with other work would.
// Limitations: float32 only; the optimizer is chosen per model (SGD with momentum for the
//   convolutional models and the MLP, Adam for the sequence models).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device/host/device.hpp"
#include "workloads/context.hpp"
#include "workloads/kernels/optimizer.hpp"

namespace sublinear::workloads::models {

// A synthetic batch in host memory: what a data loader hands the training loop.
struct host_batch {
  std::vector<float> input;
  std::vector<std::int64_t> input_shape;
  std::vector<float> target;  // class indices as float values
  std::vector<std::int64_t> target_shape;
};

// A batch on the device (allocated and uploaded by the training loop, which frees it).
struct batch {
  tensor input;
  tensor target;
};

// Where one training step runs.
struct step_context {
  context& main;
  // Two-stream run: the optimizer step runs here, after `grads_ready` (recorded on main
  // when backward is queued) and before main continues past `params_ready`. nullptr: one
  // stream.
  context* side = nullptr;
  device::host::event* grads_ready = nullptr;
  device::host::event* params_ready = nullptr;
  std::int64_t index = 0;  // 0-based iteration number (Adam's step, dropout offsets)
};

enum class optimizer_kind { sgd, adam };

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::sgd;
  ops::sgd_options sgd;
  ops::adam_options adam;
};

class model {
 public:
  virtual ~model();
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  // Short name with the size that matters, e.g. "resnet-56".
  [[nodiscard]] virtual std::string name() const = 0;
  // One line for humans: layers, widths, batch, classes, optimizer.
  [[nodiscard]] virtual std::string description() const = 0;
  // Synthetic batch number `index` of the data set `seed`: a pure function of both.
  [[nodiscard]] virtual host_batch make_batch(std::uint64_t seed, std::int64_t index) const = 0;

  // Allocates and initializes the persistent state from `seed` on ctx's stream; `ctx`'s
  // device and memory must outlive the model (they free the state). Throws config_error
  // if already initialized.
  void init(context& ctx, std::uint64_t seed);
  // Zeroes the gradients, runs forward, loss and backward on sc.main, then the optimizer
  // step (on sc.side if set). Returns the loss, a 1-element tensor on sc.main the caller
  // releases. Everything else allocated during the step has been released when this
  // returns (stream-ordered: queued work may still be running).
  tensor train_step(step_context& sc, const batch& b);

  // The trainable tensors, in a fixed order: compare runs by downloading them.
  [[nodiscard]] std::vector<tensor> parameters() const;
  // Their gradients, in the same order: after a step, what its backward accumulated.
  [[nodiscard]] std::vector<tensor> gradients() const;
  // Elements over all parameters.
  [[nodiscard]] std::int64_t parameter_count() const;
  [[nodiscard]] bool initialized() const noexcept { return home_.has_value(); }
  [[nodiscard]] const optimizer_config& optimizer() const noexcept { return optimizer_; }
  // Frees the persistent state (stream-ordered on the init context). Idempotent.
  void release();

 protected:
  explicit model(optimizer_config optimizer) : optimizer_(optimizer) {}

  struct param {
    tensor value;
    tensor grad;
  };

  // Declares the persistent state through the add_* helpers below (called by init).
  virtual void build(context& ctx) = 0;
  // Forward, loss and backward for one batch, accumulating into every param's grad.
  // Returns the loss tensor (released by the caller of train_step).
  virtual tensor forward_backward(context& ctx, const batch& b, std::int64_t step) = 0;

  // A parameter with values uniform in [-bound, bound) (Philox stream: init seed, offset =
  // the parameter's index), its gradient and optimizer state.
  param add_uniform(context& ctx, std::vector<std::int64_t> shape, float bound);
  // A parameter filled with `value` (BatchNorm's gamma = 1, beta = 0).
  param add_constant(context& ctx, std::vector<std::int64_t> shape, float value);
  // A persistent non-trainable buffer filled with `value` (running statistics).
  tensor add_buffer(context& ctx, std::vector<std::int64_t> shape, float value);

  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }

 private:
  struct slot {
    tensor value, grad, state_a, state_b;  // state: momentum, or Adam's m and v
  };
  param add_parameter(context& ctx, std::vector<std::int64_t> shape);
  void optimizer_step(context& ctx, std::int64_t index);

  optimizer_config optimizer_;
  std::uint64_t seed_ = 0;
  std::optional<context> home_;  // where the persistent state lives and is freed
  std::vector<slot> params_;
  std::vector<tensor> buffers_;
};

}  // namespace sublinear::workloads::models
