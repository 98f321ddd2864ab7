// The training loop the workloads run in, the figures it collects per iteration, and the
// JSON document `sublinear demo --json` writes from them.
//
// Note [Training loop]
// Rationale: the allocator, the tracer and the runtime are judged on what a framework's
//   training loop does to them, so the loop behaves like one: per iteration it takes a
//   batch from a data loader (host memory), allocates device tensors for it and uploads
//   it with memcpy_async, runs the model's step (forward, loss, backward, optimizer),
//   reads the loss back, frees the batch, and waits for the device; persistent state
//   lives across iterations. Every device byte comes through the memory the context
//   names: in the demo, sublinear_alloc/sublinear_free over the installed allocator.
// Approach: before each iteration the allocator's peaks are reset (sublinear_reset_peaks),
//   after it the figures are read (sublinear_get_stats) and the iteration-end hook runs
//   (where a tracer or runtime marks the iteration boundary). In a two-stream run the
//   upload and the optimizer step run on a second stream, ordered with the main stream
//   by events: the side stream waits for the batch's allocation before copying into it,
//   the main stream waits for the copy before the forward, and for the optimizer step
//   before the next iteration (Note [Framework-like models] in models/model.hpp).
// Limitations: one device; no overlap of the next batch's upload with the current
//   step (the loop has no prefetching data loader). The loop drains the device at the
//   end of every iteration (to read the figures), so the main stream's wait for the
//   optimizer step only matters to a loop that does not; the other two waits matter
//   within an iteration (tests/workloads/training_test.cpp; under TSan a missing upload
//   wait is reported as a data race).
//
// Note [Feature-map memory]
// The figure the paper's claims are about. For one iteration:
//   feature-map bytes = peak resident bytes during the iteration - persistent bytes,
// where persistent bytes are the bytes allocated when the loop starts (after the model's
// init: parameters, gradients, optimizer state, buffers such as BatchNorm's running
// statistics), and resident bytes are the allocator's `allocated` minus `evicted` (live
// blocks at their rounded sizes that have pages; without eviction, simply allocated). So it counts activations saved for backward, the
// batch, activation gradients and temporaries such as convolution workspaces: every
// byte that exists because an iteration is running. It is independent of caching;
// "peak mapped" (the budgeted quantity) adds the allocator's cached free blocks and
// rounding to pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "workloads/context.hpp"
#include "workloads/models/model.hpp"
#include "workloads/models/registry.hpp"

namespace sublinear::workloads {

struct iteration_figures {
  std::int64_t index = 0;               // 0-based
  double seconds = 0.0;                 // wall time from the batch's allocation to the device being idle
  std::size_t peak_mapped_bytes = 0;    // allocator's mapped peak during the iteration
  std::size_t peak_allocated_bytes = 0; // allocator's allocated peak during the iteration
  std::size_t feature_map_bytes = 0;    // Note [Feature-map memory]
  std::size_t end_allocated_bytes = 0;  // allocated after the iteration: the persistent bytes unless it leaked
  float loss = 0.0f;
};

struct training_figures {
  std::string model;        // model::name()
  std::string description;  // model::description()
  std::int64_t parameter_count = 0;
  std::size_t persistent_bytes = 0;
  std::vector<iteration_figures> iterations;
  std::uint64_t params_hash = 0;  // parameters_hash() after the last iteration

  // Largest over the iterations.
  [[nodiscard]] std::size_t peak_mapped_bytes() const;
  [[nodiscard]] std::size_t peak_allocated_bytes() const;
  [[nodiscard]] std::size_t feature_map_bytes() const;
  // The median iteration time, leaving out the first iteration (which pays for mapping
  // the allocator's first segments) when there is more than one.
  [[nodiscard]] double iteration_seconds() const;
};

struct training_options {
  std::int64_t iterations = 5;
  std::uint64_t seed = 1;  // the model's initial parameters and the synthetic data set
  int streams = 1;         // 1, or 2: upload and optimizer step on a second stream
  // 0: a fresh synthetic batch every iteration; n > 0: iteration i trains on batch i % n
  // (a data set of n batches, one epoch per n iterations).
  std::int64_t distinct_batches = 0;
  // Called after each iteration, once its work has completed and its figures are read,
  // before the next iteration allocates anything.
  std::function<void(const iteration_figures&)> on_iteration_end;
};

// Trains `m` for options.iterations steps on ctx's device, stream and memory, calling
// m.init(ctx, options.seed) first if the model is not initialized. Memory figures come
// from the process's default allocator through the C API (zero when none is installed).
// Throws config_error for invalid options; errors from the model and the allocator
// (out_of_memory) propagate after the device has been drained.
training_figures train(context& ctx, models::model& m, const training_options& options);

// The model's parameters, downloaded in parameters() order.
std::vector<std::vector<float>> download_parameters(context& ctx, const models::model& m);
// FNV-1a (64-bit) over the bytes of every parameter, in order: equal hashes for
// bit-identical parameters.
std::uint64_t parameters_hash(context& ctx, const models::model& m);

// ---- the figures document -------------------------------------------------------------

// One training run in the document. Its figures appear under keys that start with
// `key_prefix` ("baseline_" for the run without sublinear). `extra` adds keys (prefixed
// too) whose values are raw JSON text, e.g. {"evictions", "12"}.
struct report_run {
  std::string key_prefix;
  const training_figures* figures = nullptr;
  std::vector<std::pair<std::string, std::string>> extra;
};

// Writes the JSON document described in docs/workloads.md: the model and its sizes, then
// for each run <prefix>peak_bytes, <prefix>feature_map_bytes, <prefix>iter_s and the rest,
// then per_iteration, one object per iteration holding every run's figures for it.
// `extra` adds top-level keys (raw JSON values). Throws config_error if the runs differ in
// their number of iterations.
void write_figures_json(std::ostream& out, const models::model_config& config, std::span<const report_run> runs,
                        std::span<const std::pair<std::string, std::string>> extra = {});

// Quotes and escapes a string as JSON text.
[[nodiscard]] std::string json_string(std::string_view s);

}  // namespace sublinear::workloads
