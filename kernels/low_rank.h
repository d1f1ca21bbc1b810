// PowerSGD's local arithmetic (the comm hook framework/distributed/gradient/hooks/powersgd.cpp), batched over the
// matrices of a bucket so that a bucket costs a few launches, not a few per matrix: orthogonalisation of the
// columns of each low-rank factor, packing of the uncompressed gradients, the products P = M Q, Q = M^T P and
// P Q^T, and the error feedback.
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

/// One matrix of PowerSGD's products, all row-major: M (n, m) (the hook's error buffer, which holds the
/// gradient with feedback), its factors P (n, r) and Q (m, r), and expandBatch's output (n, m) (the bucket's
/// gradient). Device memory on CUDA; the arrays of them are host memory.
struct LowRankMatrix {
  float* matrix = nullptr;
  float* p = nullptr;
  float* q = nullptr;
  float* out = nullptr;
  int64_t n = 0, m = 0, r = 0;
};

/// The CUDA products launch the matrices of up to kProductBatchMax consecutive entries of a batch together
/// (those of rank r <= kGramMaxCols; wider ones go to cuBLAS one by one). The two projections split a matrix
/// into parts whose partial sums go to the scratch and are added in split order: projectRows its columns (a
/// split per 256 at most, for each of its row groups of 32 rows), projectColumns its rows (a split per 32 at
/// most, for each of its column blocks of 256 columns). A matrix takes about its share by elements of kProductBlocks
/// blocks (4 per SM of an H200) in its launch, as long as its partial sums stay at most 1 / kPartialShare of its
/// elements (so at most 2 / kPartialShare of the bytes of M moved again, written once and read once).
inline constexpr int64_t kProductBatchMax = 64, kProductBlocks = 528, kPartialShare = 8;

/// Whether a matrix of a batch goes to the CUDA product kernels (else to cuBLAS).
inline bool onProductKernels(const LowRankMatrix& x) { return x.r <= kGramMaxCols; }
/// The elements of the matrices of mats[0, count) that go to the product kernels: one launch's.
inline int64_t productLaunchElements(const LowRankMatrix* mats, int64_t count) {
  int64_t elements = 0;
  for (int64_t k = 0; k < count; ++k) elements += onProductKernels(mats[k]) ? mats[k].n * mats[k].m : 0;
  return elements;
}
/// The splits of a matrix of a launch of `launchElements` elements: projectRows' column splits (rows) and
/// projectColumns' row splits (columns).
struct ProductSplits {
  int64_t rows = 1, columns = 1;
};
inline ProductSplits productSplits(const LowRankMatrix& x, int64_t launchElements) {
  const auto ceilDiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t share = ceilDiv(kProductBlocks * x.n * x.m, std::max<int64_t>(launchElements, 1));
  const auto splits = [&](int64_t unsplitBlocks, int64_t extent, int64_t minPerSplit) {
    const int64_t most = std::min(ceilDiv(extent, minPerSplit), extent / (kPartialShare * std::max<int64_t>(x.r, 1)));
    return std::max<int64_t>(1, std::min(ceilDiv(share, std::max<int64_t>(unsplitBlocks, 1)), most));
  };
  return {splits(ceilDiv(x.n, 32), x.m, 256), splits(ceilDiv(x.m, 256), x.n, 32)};
}
/// Bytes of device scratch the CUDA products of the batch mats[0, count) need: the largest of its launches'
/// partial sums (a launch's splits one after the other; the two projections in turn).
inline size_t productScratchBytes(const LowRankMatrix* mats, int64_t count) {
  int64_t most = 0;
  for (int64_t first = 0; first < count; first += kProductBatchMax) {
    const int64_t size = std::min(kProductBatchMax, count - first);
    const int64_t elements = productLaunchElements(mats + first, size);
    int64_t rows = 0, columns = 0;
    for (int64_t k = first; k < first + size; ++k) {
      const LowRankMatrix& x = mats[k];
      if (!onProductKernels(x)) continue;
      const ProductSplits s = productSplits(x, elements);
      rows += s.rows == 1 ? 0 : s.rows * x.n * x.r;
      columns += s.columns == 1 ? 0 : s.columns * x.m * x.r;
    }
    most = std::max({most, rows, columns});
  }
  return static_cast<size_t>(most) * sizeof(float);
}

#define MINIDP_LOW_RANK_DECLARATIONS(...)                                                                     \
  /* Orthonormalises the columns of every factor in place (the array itself is host memory). */               \
  void orthogonalizeBatch(const Factor* factors, int64_t count, void* scratch __VA_ARGS__);                   \
  /* The runs (host memory) of dst = src / divisor, element by element (divisor 1: a copy); where error */    \
  /* is not null, also error[to + k] -= the value written. */                                                 \
  void copyRuns(const float* src, float* dst, const CopyRun* runs, int64_t count, float divisor,              \
                float* error __VA_ARGS__);                                                                    \
  /* For each matrix of the batch (host memory): P = M Q. scratch: productScratchBytes(mats, count) bytes. */ \
  void projectRowsBatch(const LowRankMatrix* mats, int64_t count, void* scratch __VA_ARGS__);                 \
  /* For each matrix: Q = M^T P. scratch: productScratchBytes(mats, count) bytes. */                          \
  void projectColumnsBatch(const LowRankMatrix* mats, int64_t count, void* scratch __VA_ARGS__);              \
  /* For each matrix: out = P Q^T; with updateError, M -= out too (the error feedback's last step). */        \
  void expandBatch(const LowRankMatrix* mats, int64_t count, bool updateError __VA_ARGS__);

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
/// a projection's splits in order), so the same bits on every rank; up to rank 32 our kernels, one launch
/// per kProductBatchMax matrices for each product and one for each projection's partial sums (cuBLAS picks
/// square tiles for these shapes, most of their work on padding), wider ones cuBLAS, a call per matrix.
MINIDP_LOW_RANK_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_LOW_RANK_DECLARATIONS

}  // namespace minidp::kernels
