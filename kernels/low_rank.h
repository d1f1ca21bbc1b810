// PowerSGD's local arithmetic (the comm hook framework/distributed/hooks/powersgd.cpp), batched over the
// factors of a bucket so that a bucket costs a few launches, not a few per matrix: orthogonalisation of the
// columns of each low-rank factor, packing of the uncompressed gradients, and the error feedback.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {

/// The CUDA Cholesky path: at most this many columns, this many rows per block of the Gram partials.
inline constexpr int64_t kGramMaxCols = 32, kGramRowsPerBlock = 2048;

/// One factor of a batch: the row-major (rows, cols) float matrix at `m` (device memory on CUDA).
struct Factor {
  float* m = nullptr;
  int64_t rows = 0, cols = 0;
};

/// One run of a batched copy: dst[to + k] = src[from + k] / divisor for k < count.
struct CopyRun {
  int64_t from = 0, to = 0, count = 0;
};

/// Doubles of scratch one factor takes on the CUDA Cholesky path (its blocks' Gram triangles, then R^{-1}
/// as floats); 0 for the other paths. The factors of a batch take theirs one after the other.
inline int64_t choleskyScratchDoubles(int64_t rows, int64_t cols) {
  if (cols > kGramMaxCols || rows == 0 || cols == 0) return 0;
  const int64_t blocks = (rows + kGramRowsPerBlock - 1) / kGramRowsPerBlock;
  return blocks * cols * (cols + 1) / 2 + (cols * cols + 1) / 2;
}
/// Bytes of device scratch cuda::orthogonalizeBatch needs for `factors`.
inline size_t orthogonalizeScratchBytes(const Factor* factors, int64_t count) {
  int64_t doubles = 0;
  for (int64_t k = 0; k < count; ++k) doubles += choleskyScratchDoubles(factors[k].rows, factors[k].cols);
  return static_cast<size_t>(doubles) * sizeof(double);
}

/// The CUDA products of a rank-r factor (r <= kGramMaxCols; wider ones go to cuBLAS) split a matrix into
/// about kProductBlocks blocks so that one matrix fills the GPU; each split writes partial sums to the
/// scratch, added in split order. The column projection splits the rows (at least 32 per block); the row
/// projection splits the columns (at least 256 per block) of its row groups (32 rows each).
inline constexpr int64_t kProductBlocks = 528;
inline int64_t projectColumnsRowBlocks(int64_t n, int64_t m) {
  const int64_t columnBlocks = (m + 255) / 256, wanted = (kProductBlocks + columnBlocks - 1) / columnBlocks;
  return std::max<int64_t>(1, std::min<int64_t>(wanted, (n + 31) / 32));
}
inline int64_t projectRowsSplits(int64_t n, int64_t m) {
  const int64_t rowGroups = (n + 31) / 32, wanted = (kProductBlocks + rowGroups - 1) / rowGroups;
  return std::max<int64_t>(1, std::min<int64_t>(wanted, (m + 255) / 256));
}
/// Bytes of device scratch the CUDA products of an (n, m) matrix at rank r need (the larger of the two
/// projections' partial sums).
inline size_t productScratchBytes(int64_t n, int64_t m, int64_t r) {
  if (r > kGramMaxCols) return 0;
  const int64_t columns = projectColumnsRowBlocks(n, m), rows = projectRowsSplits(n, m);
  return static_cast<size_t>(std::max(columns == 1 ? 0 : columns * m * r, rows == 1 ? 0 : rows * n * r)) *
         sizeof(float);
}

#define MINIDP_LOW_RANK_DECLARATIONS(...)                                                                    \
  /* Orthonormalises the columns of every factor in place (the array itself is host memory). */            \
  void orthogonalizeBatch(const Factor* factors, int64_t count, void* scratch __VA_ARGS__);                 \
  /* The runs (host memory) of dst = src / divisor, element by element (divisor 1: a copy); where error */  \
  /* is not null, also error[to + k] -= the value written. */                                                \
  void copyRuns(const float* src, float* dst, const CopyRun* runs, int64_t count, float divisor, float* error \
                __VA_ARGS__);                                                                               \
  /* P (n, r) = M (n, m) Q (m, r), all row-major; scratch: productScratchBytes(n, m, r) bytes. */           \
  void projectRows(const float* M, const float* Q, float* P, int64_t n, int64_t m, int64_t r, void* scratch   \
                   __VA_ARGS__);                                                                            \
  /* Q (m, r) = M^T P for M (n, m), P (n, r); scratch: productScratchBytes(n, m, r) bytes. */               \
  void projectColumns(const float* M, const float* P, float* Q, int64_t n, int64_t m, int64_t r, void* scratch \
                      __VA_ARGS__);                                                                         \
  /* M (n, m) = P (n, r) Q^T for Q (m, r); where error is not null (laid out as M), error -= M too. */      \
  void expand(const float* P, const float* Q, float* M, float* error, int64_t n, int64_t m, int64_t r __VA_ARGS__);

namespace cpu {
/// Each factor as PyTorch's _orthogonalize_gram_schmidt with epsilon 0: for each column i in turn,
/// col_i /= ||col_i||, then every later column j -= <col_i, col_j> col_i. Sums accumulate in double, in row
/// order. A column (numerically) in the span of the earlier ones comes out zero: what is left of it after
/// the projections is at most 1e-12 of its squared norm. `scratch` is unused.
MINIDP_LOW_RANK_DECLARATIONS()
}  // namespace cpu

namespace cuda {
/// orthogonalizeBatch: the same columns as the CPU twin up to rounding (dependent columns zero as there);
/// every sum in double in a fixed order (the same bits on every rank for the same input). Factors of up to
/// 32 columns: Cholesky QR (R^T R = m^T m in double, then m R^{-1}), three launches per 64 factors with the
/// rows of all of them spread over the GPU; wider ones: one block each, Gram-Schmidt as the twin.
/// `scratch`: orthogonalizeScratchBytes(factors, count) bytes of device memory, free for the stream's use.
/// The products: each output element summed in a fixed order (a warp's butterfly, a block's rows in order,
/// the column projection's row blocks in order), so the same bits on every rank; up to 32 columns our
/// kernels (cuBLAS picks square tiles for these shapes, most of their work on padding), wider ones cuBLAS.
MINIDP_LOW_RANK_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_LOW_RANK_DECLARATIONS

}  // namespace minidp::kernels
