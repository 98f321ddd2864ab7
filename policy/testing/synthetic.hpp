// Synthetic analysed iterations for tests and benchmarks: a forward network described
// tensor by tensor, and the training iteration a framework would run for it (input copy,
// forward, loss, mirrored backward, optimizer step), as the tracer would analyse it.
//
// Note [Synthetic iterations]
// Rationale: planners must be checked on many graphs of controlled shape (chains for the
//   exact solvers, DAGs with skips, in-place ops, workspaces, side outputs, kernels that
//   cannot be replayed) and measured at sizes no test machine can trace. Generating the
//   iteration from a network description keeps every graph realistic in the ways the
//   planners care about: who reads what, who writes what, when buffers are freed.
// Approach: tensor 0 is the input (a host-to-device copy unless said otherwise), tensor
//   k+1 the output of layer k. Each layer is one forward launch reading its inputs, its
//   weight (persistent) and an optional workspace (allocated around the launch), writing
//   its output (a new buffer, or its first input's buffer when in place) and optionally a
//   persistent side output (running statistics). The loss reads every tensor nobody
//   consumes; the backward visits layers in reverse, reading the output's gradient and
//   the tensors the layer saves, writing its inputs' gradients (accumulating after the
//   first) and its weight's gradient (persistent). A final optimizer launch (never
//   replayed) updates the weights. Transient buffers live from their first to their last
//   use; the turning point is the first launch of the live-byte peak.
// Limitations: one stream, costs are given not measured, backward costs a fixed multiple
//   of forward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/iteration.hpp"

namespace sublinear::policy::synthetic {

struct layer {
  std::vector<std::uint32_t> inputs;  // tensor ids: 0 the input, k+1 the output of layer k
  std::size_t output_bytes = 0;
  double cost_s = 1e-3;               // forward launch; its backward costs backward_factor times this
  std::size_t weight_bytes = 0;       // 0: no parameters
  std::size_t workspace_bytes = 0;    // 0: no workspace
  bool in_place = false;              // overwrite inputs[0]'s buffer (ReLU_)
  bool side_output = false;           // also update a persistent buffer (BatchNorm statistics)
  bool replayable = true;             // false: on the never-replay list (its buffers are never_evict)
  bool saves_inputs = true;           // its backward reads its inputs
  bool saves_output = false;          // its backward reads its output
  std::uint32_t same_launch_as = none;  // tensor id whose forward launch also writes this output
  std::string kernel = "layer";
};

struct network {
  std::size_t input_bytes = std::size_t{1} << 20;
  bool input_from_host = true;        // the input arrives by a host-to-device copy (not replayable)
  std::vector<layer> layers;
  std::size_t granularity = std::size_t{2} << 20;
  double backward_factor = 2.0;
};

// The analysed training iteration of `net`.
[[nodiscard]] iteration build(const network& net);

// A chain of `bytes.size()` layers, layer k producing bytes[k] at cost cost_s[k].
[[nodiscard]] network chain(const std::vector<std::size_t>& bytes, const std::vector<double>& cost_s,
                            std::size_t granularity);
// A uniform chain.
[[nodiscard]] network chain(std::size_t layers, std::size_t bytes, std::size_t granularity, double cost_s = 1e-3);

// ResNet-like: a stem, `blocks` residual blocks (conv-bn-relu_-conv-bn-add-relu_ with
// convolution workspaces and BatchNorm statistics), pooling and a classifier.
[[nodiscard]] network resnet(std::size_t blocks, std::size_t activation_bytes, std::size_t granularity);

// LSTM-like: `steps` unrolled cells (embedding, gate GEMM with workspace, one cell launch
// writing h and c), a classifier on the last h.
[[nodiscard]] network lstm(std::size_t steps, std::size_t hidden_bytes, std::size_t granularity);

struct dag_spec {
  std::size_t layers = 16;
  std::size_t window = 6;              // extra inputs come from the last `window` tensors
  double p_second_input = 0.3;
  double p_third_input = 0.1;
  double p_in_place = 0.15;
  double p_workspace = 0.25;
  double p_side_output = 0.1;
  double p_non_replayable = 0.04;
  double p_saves_output = 0.2;
  double p_weight = 0.6;
  std::size_t quantum = std::size_t{1} << 20;  // sizes are multiples of it...
  std::size_t min_quanta = 1;                  // ...between these counts
  std::size_t max_quanta = 8;
  double min_cost_s = 1e-4;
  double max_cost_s = 2e-3;
  std::size_t granularity = std::size_t{1} << 20;
};

// A random DAG: a backbone chain with skip inputs, in-place ops, workspaces, side outputs
// and a few non-replayable kernels. Deterministic in `seed`.
[[nodiscard]] network random_dag(const dag_spec& spec, std::uint64_t seed);

}  // namespace sublinear::policy::synthetic
