// PowerSGD's local arithmetic (the comm hook framework/distributed/hooks/powersgd.cpp): Gram-Schmidt
// orthogonalisation of the columns of a low-rank factor, and the error-feedback difference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {

/// The CUDA Cholesky path: at most this many columns, this many rows per block of the Gram partials.
inline constexpr int64_t kGramMaxCols = 32, kGramRowsPerBlock = 2048;

/// Bytes of device scratch cuda::orthogonalizeColumns needs for a (rows, cols) matrix (0 on the CPU path
/// and for the one-block path).
size_t orthogonalizeScratchBytes(int64_t rows, int64_t cols);

namespace cpu {
/// Orthonormalises the `cols` columns of the row-major (rows, cols) matrix `m` in place, as PyTorch's
/// _orthogonalize_gram_schmidt with epsilon 0: for each column i in turn, col_i /= ||col_i||, then every
/// later column j -= <col_i, col_j> col_i. Sums accumulate in double, in row order. A column (numerically) in the span of the earlier ones comes out
/// zero: what is left of it after the projections is at most 1e-12 of its squared norm.
/// `scratch` is unused (the CUDA launcher's signature).
void orthogonalizeColumns(float* m, int64_t rows, int64_t cols, void* scratch);
/// out = a - b, element by element.
void subtract(const float* a, const float* b, float* out, int64_t n);
}  // namespace cpu

namespace cuda {
/// The same columns as the CPU twin up to rounding (dependent columns zero as there); every sum in double in
/// a fixed order (the same bits on every rank for the same input). Up to 32 columns: Cholesky QR over the whole GPU (R^T R = m^T m in double,
/// then m R^{-1}); wider: one block, Gram-Schmidt as the twin.
/// `scratch`: orthogonalizeScratchBytes(rows, cols) bytes of device memory, free for the stream's use.
void orthogonalizeColumns(float* m, int64_t rows, int64_t cols, void* scratch, cudaStream_t stream);
void subtract(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
}  // namespace cuda

}  // namespace minidp::kernels
