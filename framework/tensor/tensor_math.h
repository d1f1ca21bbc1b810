// Tensor-level math without autograd: the building blocks of backward functions and optimizers.
#pragma once

#include "framework/tensor/tensor.h"

namespace minidp::ops {

/// a + b (same shape).
Tensor add(const Tensor& a, const Tensor& b);
/// dst += src.
void addInPlace(Tensor& dst, const Tensor& src);
/// a * b elementwise.
Tensor mul(const Tensor& a, const Tensor& b);
/// x * s.
Tensor scale(const Tensor& x, double s);
/// x *= s.
void scaleInPlace(Tensor& x, double s);
/// Sum of all elements as a tensor of shape [1] on x's device.
Tensor sumAll(const Tensor& x);
/// A tensor of `shape` filled with `value`.
Tensor full(const Shape& shape, double value, DType dtype, Device device);
/// x converted to `dtype` (float types; bf16 rounds to nearest even); x itself when it has that dtype.
Tensor cast(const Tensor& x, DType dtype);
/// Writes x converted to y's dtype into y (same numel, same device).
void castInto(const Tensor& x, Tensor& y);

/// How fp32 GEMMs compute on CUDA: exactly (fp32 FMA, the reference path) or on TF32 tensor cores.
enum class Fp32Gemm { Exact, Tf32 };
/// Sets the fp32 GEMM mode for the process (default Exact); a no-op without CUDA.
void setFp32Gemm(Fp32Gemm mode);
/// How bf16 GEMMs run on CUDA: cuBLASLt (the fast path), or a plain kernel of minidp's own that
/// compute-sanitizer's initcheck can follow (kernels::cuda::setPlainBf16Gemms).
enum class Bf16Gemm { CublasLt, Plain };
/// Sets the bf16 GEMM path for the process (default CublasLt); a no-op without CUDA.
void setBf16Gemm(Bf16Gemm mode);

}  // namespace minidp::ops
