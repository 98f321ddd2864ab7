// One LSTM cell step, forward and backward, for models unrolled over time.
//
// Gate order is PyTorch's: the 4H rows of W_ih [4H, I], W_hh [4H, H] and bias [4H] are
// the input (i), forget (f), cell (g) and output (o) gates, H rows each.
//   i = sigmoid(.), f = sigmoid(.), g = tanh(.), o = sigmoid(.)  of  x W_ih^T + h W_hh^T + b
//   c_t = f * c_{t-1} + i * g,  h_t = o * tanh(c_t)
//
// Saved state (what a step keeps for backward): `gates`, the four activated gates
// [B, 4H]. Backward also reads x_t, h_{t-1}, c_{t-1} and c_t, which an unrolled model keeps
// anyway (each is another step's input or output). So a step costs 6H floats per batch
// row beyond its input: h_t, c_t and the gates; tanh(c_t) is recomputed, not saved.
#pragma once

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

struct lstm_cell_output {
  tensor h;      // [B, H]
  tensor c;      // [B, H]
  tensor gates;  // [B, 4H] activated i | f | g | o, saved for backward
};

struct lstm_cell_grads {
  tensor dx;       // [B, I]
  tensor dh_prev;  // [B, H]
  tensor dc_prev;  // [B, H]
};

// x: [B, I], h_prev and c_prev: [B, H] (zeros for the first step).
lstm_cell_output lstm_cell_forward(context& ctx, const tensor& x, const tensor& h_prev, const tensor& c_prev,
                                   const tensor& w_ih, const tensor& w_hh, const tensor& bias);

// dh: the gradient reaching h_t [B, H]; dc: the gradient reaching c_t from the next step
// [B, H], or nullptr for the last step. c and gates come from this step's forward.
// Returns new dx, dh_prev, dc_prev; accumulates dw_ih, dw_hh and dbias (+=, batch rows in
// index order).
lstm_cell_grads lstm_cell_backward(context& ctx, const tensor& dh, const tensor* dc, const tensor& x,
                                   const tensor& h_prev, const tensor& c_prev, const tensor& c,
                                   const tensor& gates, const tensor& w_ih, const tensor& w_hh, tensor& dw_ih,
                                   tensor& dw_hh, tensor& dbias);

}  // namespace sublinear::workloads::ops
