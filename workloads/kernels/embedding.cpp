// Note [Embedding kernels]
// Rationale: the Transformer's and the LSTM's input layer. Its backward is the classic
//   source of nondeterminism on GPUs (atomicAdd into the table when ids repeat), which
//   would break the bit-identical gradients sublinear promises.
// Approach: `embedding_fwd_f32` (grid.x = tokens) copies one table row per token and adds the
//   position row. `embedding_bwd_f32` (grid.x = 1, deliberately serial over tokens) walks the
//   tokens in index order and adds each gradient row onto its table row, so every table
//   element receives its contributions in a fixed order; the positional gradient is summed
//   the same way. The table gradient is the dense [V, D] tensor the caller owns.
// Limitations: ids are float-coded (see embedding.hpp); a dense table gradient costs
//   O(V * D) memory regardless of how many ids occur.
#include "workloads/kernels/embedding.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "workloads/kernels/sequence_detail.hpp"

namespace sublinear::workloads::ops {
namespace {

// The table row for a float-coded id, or -1 for padding.
std::int64_t row_of(float id, std::int64_t vocab) {
  if (!(id >= 0.0f && id < static_cast<float>(vocab))) return -1;  // also rejects NaN
  return static_cast<std::int64_t>(id);
}

struct embedding_fwd_params {
  const float* ids;
  const float* table;
  const float* positions;  // nullptr: none
  float* out;
  std::int64_t tokens;
  std::int64_t vocab;
  std::int64_t d;
  std::int64_t seq;  // positions index = token index mod seq
};

void embedding_fwd(const device::host::launch_config& /*cfg*/, const embedding_fwd_params& p) {
  for (std::int64_t n = 0; n < p.tokens; ++n) {
    float* out = p.out + n * p.d;
    const std::int64_t row = row_of(p.ids[n], p.vocab);
    if (row >= 0) {
      std::memcpy(out, p.table + row * p.d, static_cast<std::size_t>(p.d) * sizeof(float));
    } else {
      for (std::int64_t j = 0; j < p.d; ++j) out[j] = 0.0f;
    }
    if (p.positions != nullptr) {
      const float* pos = p.positions + (n % p.seq) * p.d;
      for (std::int64_t j = 0; j < p.d; ++j) out[j] += pos[j];
    }
  }
}

struct embedding_bwd_params {
  const float* dy;
  const float* ids;
  float* dtable;
  float* dpositions;  // nullptr: none
  std::int64_t tokens;
  std::int64_t vocab;
  std::int64_t d;
  std::int64_t seq;
};

void embedding_bwd(const device::host::launch_config& /*cfg*/, const embedding_bwd_params& p) {
  for (std::int64_t n = 0; n < p.tokens; ++n) {
    const float* dy = p.dy + n * p.d;
    const std::int64_t row = row_of(p.ids[n], p.vocab);
    if (row >= 0) detail::axpy(1.0f, dy, p.dtable + row * p.d, p.d);
    if (p.dpositions != nullptr) detail::axpy(1.0f, dy, p.dpositions + (n % p.seq) * p.d, p.d);
  }
}

}  // namespace

tensor embedding_forward(context& ctx, const tensor& ids, const tensor& table, const tensor* positions) {
  static const device::host::kernel& k = device::host::register_kernel<embedding_fwd_params, embedding_fwd>(
      "embedding_fwd_f32",
      {SUBLINEAR_PARAM(embedding_fwd_params, ids), SUBLINEAR_PARAM(embedding_fwd_params, table),
       SUBLINEAR_PARAM(embedding_fwd_params, positions), SUBLINEAR_PARAM(embedding_fwd_params, out),
       SUBLINEAR_PARAM(embedding_fwd_params, tokens), SUBLINEAR_PARAM(embedding_fwd_params, vocab), SUBLINEAR_PARAM(embedding_fwd_params, d),
       SUBLINEAR_PARAM(embedding_fwd_params, seq)});
  kernels::require(table.shape.size() == 2, "embedding_forward",
                  "table must be [V, D], got " + kernels::shape_string(table));
  kernels::require(!ids.shape.empty(), "embedding_forward", "ids must have at least one dimension");
  const std::int64_t vocab = table.dim(0), d = table.dim(1);
  std::int64_t seq = 1;
  if (positions != nullptr) {
    kernels::require(ids.shape.size() == 2, "embedding_forward",
                    "positions need [B, S] ids, got " + kernels::shape_string(ids));
    seq = ids.dim(1);
    kernels::require(positions->shape.size() == 2 && positions->dim(0) >= seq && positions->dim(1) == d,
                    "embedding_forward",
                    "positions must be [S_max >= " + std::to_string(seq) + ", " + std::to_string(d) + "], got " +
                        kernels::shape_string(*positions));
  }
  std::vector<std::int64_t> shape = ids.shape;
  shape.push_back(d);
  tensor out = ctx.empty(std::move(shape));
  if (ids.numel() == 0 || seq == 0) return out;
  auto p = kernels::zeroed<embedding_fwd_params>();
  p.ids = ids.data;
  p.table = table.data;
  p.positions = positions != nullptr ? positions->data : nullptr;
  p.out = out.data;
  p.tokens = ids.numel();
  p.vocab = vocab;
  p.d = d;
  p.seq = seq;
  kernels::launch(ctx, k, {kernels::blocks_for(ids.numel()), 1, 1}, p, {128, 1, 1});
  return out;
}

void embedding_backward(context& ctx, const tensor& dy, const tensor& ids, tensor& dtable, tensor* dpositions) {
  static const device::host::kernel& k = device::host::register_kernel<embedding_bwd_params, embedding_bwd>(
      "embedding_bwd_f32",
      {SUBLINEAR_PARAM(embedding_bwd_params, dy), SUBLINEAR_PARAM(embedding_bwd_params, ids),
       SUBLINEAR_PARAM(embedding_bwd_params, dtable), SUBLINEAR_PARAM(embedding_bwd_params, dpositions),
       SUBLINEAR_PARAM(embedding_bwd_params, tokens), SUBLINEAR_PARAM(embedding_bwd_params, vocab),
       SUBLINEAR_PARAM(embedding_bwd_params, d), SUBLINEAR_PARAM(embedding_bwd_params, seq)});
  kernels::require(dtable.shape.size() == 2, "embedding_backward",
                  "dtable must be [V, D], got " + kernels::shape_string(dtable));
  const std::int64_t vocab = dtable.dim(0), d = dtable.dim(1);
  std::vector<std::int64_t> expect = ids.shape;
  expect.push_back(d);
  kernels::require(dy.shape == expect, "embedding_backward",
                  "dy must be ids.shape + [D], got " + kernels::shape_string(dy));
  std::int64_t seq = 1;
  if (dpositions != nullptr) {
    kernels::require(ids.shape.size() == 2, "embedding_backward",
                    "positions need [B, S] ids, got " + kernels::shape_string(ids));
    seq = ids.dim(1);
    kernels::require(dpositions->shape.size() == 2 && dpositions->dim(0) >= seq && dpositions->dim(1) == d,
                    "embedding_backward", "dpositions must be [S_max >= S, D], got " +
                                              kernels::shape_string(*dpositions));
  }
  if (ids.numel() == 0 || seq == 0) return;
  auto p = kernels::zeroed<embedding_bwd_params>();
  p.dy = dy.data;
  p.ids = ids.data;
  p.dtable = dtable.data;
  p.dpositions = dpositions != nullptr ? dpositions->data : nullptr;
  p.tokens = ids.numel();
  p.vocab = vocab;
  p.d = d;
  p.seq = seq;
  kernels::launch(ctx, k, {1, 1, 1}, p, {128, 1, 1});
}

}  // namespace sublinear::workloads::ops
