// Token embedding lookup, with an optional learned positional table.
#pragma once

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// Token ids travel in a float32 tensor holding integral values (workload tensors are
// float32; ids are exact up to 2^24). An id outside [0, vocab) is padding: its output row
// is zero (plus the position row, if any) and it receives no gradient.
//
// out[..., :] = table[ids[...], :] (+ positions[s, :] where s is the index along dim 1 of
// a 2-D [B, S] ids tensor). table: [V, D]; positions, if given: [S_max >= S, D].
// Returns ids.shape + [D].
tensor embedding_forward(context& ctx, const tensor& ids, const tensor& table, const tensor* positions = nullptr);

// Accumulates dtable[ids[n]] += dy[n] for every token n in index order (and, if given,
// dpositions[s] += sum_b dy[b, s], batch rows in index order): no atomics, so repeated
// ids sum in a fixed order. dy: ids.shape + [D].
void embedding_backward(context& ctx, const tensor& dy, const tensor& ids, tensor& dtable,
                        tensor* dpositions = nullptr);

}  // namespace sublinear::workloads::ops
