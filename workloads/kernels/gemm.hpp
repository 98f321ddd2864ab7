// General matrix multiply for the workload kernels: C = alpha * op(A) op(B) + beta * C,
// row-major float32, optionally strided-batched.
#pragma once

#include <cstdint>

#include "workloads/context.hpp"

namespace sublinear::workloads::ops {

enum class transpose { none, trans };

// One GEMM problem on raw device pointers (row-major; ld* are row strides in elements).
// op(A) is m x k, op(B) is k x n, C is m x n. A is stored m x k (lda >= k) when not
// transposed, k x m (lda >= m) when transposed; likewise B.
struct gemm_args {
  transpose trans_a = transpose::none;
  transpose trans_b = transpose::none;
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  std::int64_t ldc = 0;
  // Strided batch: problem i uses a + i*stride_a, b + i*stride_b, c + i*stride_c. Problems
  // run in order, so stride_c == 0 with beta == 1 sums every problem into one C.
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Launches "gemm_nn_f32", "gemm_nt_f32" or "gemm_tn_f32" on ctx.stream (A^T B^T is not
// supported and throws config_error). beta == 0 never reads C (it may be uninitialized).
void gemm(context& ctx, const gemm_args& args);

// The same product computed at once on the calling thread, for a kernel body that fuses a
// GEMM with other work (a convolution's lowering, conv2d.cpp): the same arithmetic and so
// the same bits as the launched kernels. Throws config_error as gemm does.
void gemm_on_this_thread(const gemm_args& args);

// Plain 2-D product of tensors: returns op(a) op(b) as a new [m, n] tensor.
tensor matmul(context& ctx, const tensor& a, const tensor& b, transpose ta = transpose::none,
              transpose tb = transpose::none);

}  // namespace sublinear::workloads::ops
