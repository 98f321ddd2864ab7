// Activations of the workload library.
#pragma once

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

// x = max(x, 0) IN PLACE ("relu_fwd_inplace_f32"): the input's buffer is overwritten and a
// tensor aliasing it is returned (same data pointer), as torch.relu_ does. A replay of this
// launch is only valid if x's pre-ReLU value is regenerated first: the tracer sees a launch
// that reads and writes one buffer.
tensor relu_inplace(context& ctx, const tensor& x);
// dx = dy where y > 0, else 0 ("relu_bwd_f32"): uses the forward's OUTPUT y, so the in-place
// forward keeps nothing else alive. A new tensor.
tensor relu_backward(context& ctx, const tensor& y, const tensor& dy);

}  // namespace sublinear::workloads::ops
