// Matrix products of tensors and the destination of parameter gradients: what the ops built on GEMMs
// share (linear.cpp: linear and matmul; loss.cpp: the fused classifier).
#pragma once

#include "framework/autograd/variable.h"
#include "kernels/matmul.h"

namespace minidp::ops {

/// c[i] = op(a[i]) @ op(b[i]) + beta * c[i] for i in [0, batch); strides in elements (0 reuses one
/// matrix), leading dimensions as kernels::GemmLd (default packed). fp32/fp64: a, b and c share the dtype.
/// bf16 a and b (CUDA): c is bf16 or fp32, accumulation fp32, and `bias` (c's dtype, one per column of c)
/// may be added in the GEMM's epilogue.
/// With `addend` (c's shape and dtype, batch 1): c = op(a) op(b) + addend (+ bias), beta must be 1; bf16
/// reads it in the GEMM's epilogue, the others copy it into c first.
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const Tensor& a, int64_t strideA, const Tensor& b,
          int64_t strideB, Tensor& c, int64_t strideC, int64_t batch, double beta = 0, const Tensor& bias = Tensor(),
          kernels::GemmLd ld = {}, const Tensor& addend = Tensor());

/// Where backward puts the gradient of parameter input `index` (shaped and typed like `param`).
struct GradSink {
  Tensor out;       // what the op writes
  Tensor returned;  // what backward returns for the input: `out`, or undefined when it was installed
  double beta = 0;  // 1: accumulate into the installed gradient; 0: overwrite (a new tensor, or known zeros)
};

/// Inside an op's backward: the installed gradient of input `index` (leafGradTarget) or a new tensor. An
/// installed gradient known to hold zeros (Variable::markGradZero) is overwritten (beta 0), else added to.
GradSink gradSink(size_t index, const Tensor& param);

}  // namespace minidp::ops
