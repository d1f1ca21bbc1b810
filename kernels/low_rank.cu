#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/low_rank.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kOrthoBlock = 512;

struct Add {
  __device__ double operator()(double a, double b) const { return a + b; }
};

/// One block: the columns in order, each sum a fixed-order block reduction in double.
__device__ double columnSquares(const float* m, int64_t rows, int64_t cols, int64_t i) {
  double squares = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) {
    const double v = m[r * cols + i];
    squares += v * v;
  }
  return blockReduce<kOrthoBlock>(squares, Add{});
}

constexpr int kOrthoMaxCols = 1024;  // --powersgd-rank's range

__global__ void orthogonalizeKernel(float* m, int64_t rows, int64_t cols) {
  __shared__ double initial[kOrthoMaxCols];
  for (int64_t i = 0; i < cols; ++i) {
    const double squares = columnSquares(m, rows, cols, i);
    if (threadIdx.x == 0) initial[i] = squares;
  }
  __syncthreads();
  for (int64_t i = 0; i < cols; ++i) {
    const double squares = columnSquares(m, rows, cols, i);
    // As the CPU twin: a column in the span of the earlier ones comes out zero.
    if (!(squares > 1e-12 * initial[i])) {
      for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) m[r * cols + i] = 0;
      __syncthreads();
      continue;
    }
    const float norm = static_cast<float>(sqrt(squares));
    for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) m[r * cols + i] /= norm;
    __syncthreads();
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) {
        dot += static_cast<double>(m[r * cols + i]) * m[r * cols + j];
      }
      const float d = static_cast<float>(blockReduce<kOrthoBlock>(dot, Add{}));
      for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) m[r * cols + j] -= d * m[r * cols + i];
      __syncthreads();
    }
  }
}

constexpr int kMaxGramCols = static_cast<int>(kGramMaxCols);
constexpr int kGramBlock = 128;

/// Partial Gram matrices: block b sums m[r, i] m[r, j] (i <= j) over its rows, in row order, in double.
__global__ void gramPartialsKernel(const float* m, int64_t rows, int cols, double* partials) {
  __shared__ double acc[kGramBlock][kMaxGramCols];  // one column's products per thread, then reduced
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kGramRowsPerBlock;
  const int64_t last = min(rows, first + kGramRowsPerBlock);
  double* out = partials + static_cast<int64_t>(blockIdx.x) * cols * cols;
  for (int i = 0; i < cols; ++i) {
    double local[kMaxGramCols];
    for (int j = 0; j < cols; ++j) local[j] = 0;
    for (int64_t r = first + threadIdx.x; r < last; r += kGramBlock) {
      const double vi = m[r * cols + i];
      for (int j = i; j < cols; ++j) local[j] += vi * m[r * cols + j];
    }
    for (int j = i; j < cols; ++j) acc[threadIdx.x][j] = local[j];
    __syncthreads();
    // Column j's sum over the threads, by thread j of the block: a fixed order.
    if (threadIdx.x >= i && threadIdx.x < cols) {
      double sum = 0;
      for (int t = 0; t < kGramBlock; ++t) sum += acc[t][threadIdx.x];
      out[i * cols + threadIdx.x] = sum;
    }
    __syncthreads();
  }
}

/// One thread: adds the partials in block order into G (upper triangle), factors G = R^T R (Cholesky), and
/// writes R^{-1} (upper triangular) as float.
__global__ void choleskyInverseKernel(const double* partials, int blocks, int cols, float* rinv) {
  double g[kMaxGramCols][kMaxGramCols], r[kMaxGramCols][kMaxGramCols], inv[kMaxGramCols][kMaxGramCols];
  for (int i = 0; i < cols; ++i) {
    for (int j = i; j < cols; ++j) {
      double sum = 0;
      for (int b = 0; b < blocks; ++b) sum += partials[static_cast<int64_t>(b) * cols * cols + i * cols + j];
      g[i][j] = sum;
    }
  }
  for (int i = 0; i < cols; ++i) {
    for (int j = 0; j < cols; ++j) r[i][j] = 0, inv[i][j] = 0;
  }
  // A column (numerically) in the span of the earlier ones has no direction of its own: its pivot is at
  // most 1e-12 of its squared norm (or the column is zero). It comes out zero (R^{-1}'s row and column i
  // zero), where Gram-Schmidt would normalise rounding noise and Cholesky would take a square root of a
  // negative number.
  bool dropped[kMaxGramCols];
  for (int i = 0; i < cols; ++i) {
    double d = g[i][i];
    for (int k = 0; k < i; ++k) d -= r[k][i] * r[k][i];
    dropped[i] = !(d > 1e-12 * g[i][i]);
    r[i][i] = dropped[i] ? 1.0 : sqrt(d);
    for (int j = i + 1; j < cols; ++j) {
      double v = g[i][j];
      for (int k = 0; k < i; ++k) v -= r[k][i] * r[k][j];
      r[i][j] = dropped[i] ? 0.0 : v / r[i][i];
    }
  }
  // Back substitution, column by column: R inv = I (dropped columns and rows stay zero).
  for (int j = 0; j < cols; ++j) {
    for (int i = j; i >= 0; --i) {
      double v = i == j ? 1.0 : 0.0;
      for (int k = i + 1; k <= j; ++k) v -= r[i][k] * inv[k][j];
      inv[i][j] = dropped[i] || dropped[j] ? 0.0 : v / r[i][i];
    }
  }
  for (int i = 0; i < cols; ++i) {
    for (int j = 0; j < cols; ++j) rinv[i * cols + j] = static_cast<float>(inv[i][j]);
  }
}

/// m (rows, cols) = m R^{-1}, one row per thread.
__global__ void applyInverseKernel(float* m, int64_t rows, int cols, const float* rinv) {
  __shared__ float inv[kMaxGramCols * kMaxGramCols];
  for (int k = threadIdx.x; k < cols * cols; k += blockDim.x) inv[k] = rinv[k];
  __syncthreads();
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float row[kMaxGramCols];
    for (int j = 0; j < cols; ++j) row[j] = m[r * cols + j];
    for (int j = 0; j < cols; ++j) {
      double v = 0;
      for (int k = 0; k <= j; ++k) v += static_cast<double>(row[k]) * inv[k * cols + j];
      m[r * cols + j] = static_cast<float>(v);
    }
  }
}

__global__ void subtractKernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[k] = a[k] - b[k];
  }
}

}  // namespace

void orthogonalizeColumns(float* m, int64_t rows, int64_t cols, void* scratch, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  MINIDP_CHECK(cols <= kOrthoMaxCols,
               "orthogonalizeColumns: " << cols << " columns (at most " << kOrthoMaxCols << ")");
  if (cols > kMaxGramCols) {
    // Wide factors: one block, Gram-Schmidt as the CPU twin (its column loop costs r^2 / 2 block reductions).
    orthogonalizeKernel<<<1, kOrthoBlock, 0, stream>>>(m, rows, cols);
    CUDA_CHECK_LAUNCH();
    return;
  }
  // The thin QR's Q by Cholesky, R^T R = M^T M in double, then M R^{-1}: the same Q as Gram-Schmidt
  // (upper-triangular R, positive diagonal) up to rounding, in three launches at any rank, with the rows
  // spread over the GPU. The caller's scratch: the partial Gram matrices, then R^{-1}.
  const int blocks = static_cast<int>((rows + kGramRowsPerBlock - 1) / kGramRowsPerBlock);
  double* partials = static_cast<double*>(scratch);
  float* rinv = reinterpret_cast<float*>(partials + static_cast<int64_t>(blocks) * cols * cols);
  gramPartialsKernel<<<blocks, kGramBlock, 0, stream>>>(m, rows, static_cast<int>(cols), partials);
  CUDA_CHECK_LAUNCH();
  choleskyInverseKernel<<<1, 1, 0, stream>>>(partials, blocks, static_cast<int>(cols), rinv);
  CUDA_CHECK_LAUNCH();
  applyInverseKernel<<<gridFor(rows, 256), 256, 0, stream>>>(m, rows, static_cast<int>(cols), rinv);
  CUDA_CHECK_LAUNCH();
}

void subtract(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  subtractKernel<<<gridFor(n, 256), 256, 0, stream>>>(a, b, out, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minidp::kernels::cuda
