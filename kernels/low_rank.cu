#include <algorithm>
#include <type_traits>

#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/composite_kernels.h"
#include "kernels/low_rank.h"
#include "kernels/matmul.h"

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
constexpr int kMaxPairs = kMaxGramCols * (kMaxGramCols + 1) / 2;  // the upper triangle of a Gram matrix
constexpr int kGramThreads = 256, kTileRows = 128, kBatchMax = 64;
constexpr int kSlotsPerThread = (kMaxPairs + kGramThreads - 1) / kGramThreads;

/// Up to kBatchMax factors of at most kMaxGramCols columns, passed by value: block b of the Gram and apply
/// launches serves rows [(b - firstBlock[t]) * kGramRowsPerBlock, ...) of the factor t with
/// firstBlock[t] <= b < firstBlock[t + 1]; factor t's scratch starts at scratch[offset[t]] (its blocks' Gram
/// triangles, then R^{-1} as floats).
struct CholeskyBatch {
  Factor factors[kBatchMax];
  int64_t offset[kBatchMax];
  int firstBlock[kBatchMax + 1];
  int count;
};
static_assert(sizeof(CholeskyBatch) <= 4000, "kernel arguments are at most 4 KB");

/// The t with firstBlock[t] <= block < firstBlock[t + 1], of a batch of `count` items (their blocks in order).
__device__ int itemOfBlock(const int* firstBlock, int count, int block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (firstBlock[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/// Pair p of the upper triangle (row by row: (0,0), (0,1), ..., (1,1), ...) of a cols x cols matrix.
__device__ void pairOf(int p, int cols, int& i, int& j) {
  i = 0;
  while (p >= cols - i) p -= cols - i++;
  j = i + p;
}

/// Each block: the Gram triangle of its rows of one factor, in double. The rows go through shared memory a
/// tile at a time; thread slot s sums pair s % pairs over the tile rows congruent to s / pairs, in row order,
/// and the slots of a pair are added in slot order: a fixed order, whatever the timing.
__global__ void gramBatchKernel(CholeskyBatch batch, double* scratch) {
  __shared__ float tile[kTileRows * kMaxGramCols];
  __shared__ double slotSums[kMaxPairs > kGramThreads ? kMaxPairs : kGramThreads];
  const int t = itemOfBlock(batch.firstBlock, batch.count, blockIdx.x);
  const Factor f = batch.factors[t];
  const int cols = static_cast<int>(f.cols), pairs = cols * (cols + 1) / 2;
  const int groups = max(1, kGramThreads / pairs), slots = groups * pairs;
  const int local = blockIdx.x - batch.firstBlock[t];
  const int64_t first = static_cast<int64_t>(local) * kGramRowsPerBlock;
  const int64_t last = min(f.rows, first + kGramRowsPerBlock);
  double acc[kSlotsPerThread];
  int pi[kSlotsPerThread], pj[kSlotsPerThread];
#pragma unroll
  for (int k = 0; k < kSlotsPerThread; ++k) {
    acc[k] = 0;
    const int s = threadIdx.x + k * kGramThreads;
    if (s < slots) pairOf(s % pairs, cols, pi[k], pj[k]);
  }
  for (int64_t base = first; base < last; base += kTileRows) {
    const int n = static_cast<int>(min(static_cast<int64_t>(kTileRows), last - base));
    for (int e = threadIdx.x; e < n * cols; e += kGramThreads) tile[e] = f.m[base * cols + e];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kSlotsPerThread; ++k) {
      const int s = threadIdx.x + k * kGramThreads;
      if (s >= slots) continue;
      for (int r = s / pairs; r < n; r += groups) {
        acc[k] += static_cast<double>(tile[r * cols + pi[k]]) * tile[r * cols + pj[k]];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int k = 0; k < kSlotsPerThread; ++k) {
    const int s = threadIdx.x + k * kGramThreads;
    if (s < slots) slotSums[s] = acc[k];
  }
  __syncthreads();
  double* out = scratch + batch.offset[t] + static_cast<int64_t>(local) * pairs;
  for (int p = threadIdx.x; p < pairs; p += kGramThreads) {
    double sum = 0;
    for (int g = 0; g < groups; ++g) sum += slotSums[g * pairs + p];
    out[p] = sum;
  }
}

/// One warp per factor: adds its blocks' triangles in block order into G, factors G = R^T R (Cholesky, lane j
/// computing row i's entry j), and writes R^{-1} (upper triangular, lane j back-substituting column j) as
/// float after the triangles.
__global__ void choleskyBatchKernel(CholeskyBatch batch, double* scratch) {
  __shared__ double g[kMaxGramCols][kMaxGramCols + 1], r[kMaxGramCols][kMaxGramCols + 1];
  __shared__ double inv[kMaxGramCols][kMaxGramCols + 1];
  __shared__ bool dropped[kMaxGramCols];
  const int t = blockIdx.x, lane = threadIdx.x;
  const int cols = static_cast<int>(batch.factors[t].cols), pairs = cols * (cols + 1) / 2;
  const int blocks = batch.firstBlock[t + 1] - batch.firstBlock[t];
  const double* partials = scratch + batch.offset[t];
  for (int p = lane; p < pairs; p += 32) {
    double sum = 0;
    for (int b = 0; b < blocks; ++b) sum += partials[static_cast<int64_t>(b) * pairs + p];
    int i, j;
    pairOf(p, cols, i, j);
    g[i][j] = sum;
  }
  __syncwarp();
  // A column (numerically) in the span of the earlier ones has no direction of its own: its pivot is at
  // most 1e-12 of its squared norm (or the column is zero). It comes out zero (R^{-1}'s row and column i
  // zero), where Gram-Schmidt would normalise rounding noise and Cholesky would take a square root of a
  // negative number.
  for (int i = 0; i < cols; ++i) {
    double d = g[i][i];
    for (int k = 0; k < i; ++k) d -= r[k][i] * r[k][i];
    const bool drop = !(d > 1e-12 * g[i][i]);
    const double rii = drop ? 1.0 : sqrt(d);
    if (lane > i && lane < cols) {
      double v = g[i][lane];
      for (int k = 0; k < i; ++k) v -= r[k][i] * r[k][lane];
      r[i][lane] = drop ? 0.0 : v / rii;
    }
    if (lane == i) {
      r[i][i] = rii;
      dropped[i] = drop;
    }
    __syncwarp();
  }
  // Back substitution, column by column: R inv = I (dropped columns and rows stay zero).
  if (lane < cols) {
    const int j = lane;
    for (int i = cols - 1; i > j; --i) inv[i][j] = 0;
    for (int i = j; i >= 0; --i) {
      double v = i == j ? 1.0 : 0.0;
      for (int k = i + 1; k <= j; ++k) v -= r[i][k] * inv[k][j];
      inv[i][j] = dropped[i] || dropped[j] ? 0.0 : v / r[i][i];
    }
  }
  __syncwarp();
  float* rinv = reinterpret_cast<float*>(scratch + batch.offset[t] + static_cast<int64_t>(blocks) * pairs);
  for (int e = lane; e < cols * cols; e += 32) rinv[e] = static_cast<float>(inv[e / cols][e % cols]);
}

/// Each block: kGramRowsPerBlock / kApplySplit rows of one factor times R^{-1}, a row per thread; R is the
/// batch's widest factor rounded up to a power of two.
constexpr int kApplySplit = kGramRowsPerBlock / kGramThreads;

template <int R>
__global__ void applyBatchKernel(CholeskyBatch batch, const double* scratch) {
  __shared__ float inv[R * R];
  const int gramBlock = blockIdx.x / kApplySplit, part = blockIdx.x % kApplySplit;
  const int t = itemOfBlock(batch.firstBlock, batch.count, gramBlock);
  const Factor f = batch.factors[t];
  const int cols = static_cast<int>(f.cols), pairs = cols * (cols + 1) / 2;
  const int blocks = batch.firstBlock[t + 1] - batch.firstBlock[t];
  const float* rinv = reinterpret_cast<const float*>(scratch + batch.offset[t] + static_cast<int64_t>(blocks) * pairs);
  for (int e = threadIdx.x; e < R * R; e += blockDim.x) {
    const int k = e / R, j = e % R;
    inv[e] = k < cols && j < cols ? rinv[k * cols + j] : 0.0f;
  }
  __syncthreads();
  const int64_t row = static_cast<int64_t>(gramBlock - batch.firstBlock[t]) * kGramRowsPerBlock +
                      static_cast<int64_t>(part) * kGramThreads + threadIdx.x;
  if (row >= f.rows) return;
  float* m = f.m + row * cols;
  float x[R];
#pragma unroll
  for (int k = 0; k < R; ++k) x[k] = k < cols ? m[k] : 0.0f;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    double v = 0;
#pragma unroll
    for (int k = 0; k <= j; ++k) v += static_cast<double>(x[k]) * inv[k * R + j];
    if (j < cols) m[j] = static_cast<float>(v);
  }
}

/// Up to kBatchMax runs by value; blockIdx.y picks the run, the x blocks stride over its elements.
struct RunBatch {
  CopyRun runs[kBatchMax];
  int count;
};
static_assert(sizeof(RunBatch) <= 4000, "kernel arguments are at most 4 KB");

__global__ void copyRunsKernel(const float* src, float* dst, RunBatch batch, float divisor, float* error) {
  const CopyRun run = batch.runs[blockIdx.y];
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < run.count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = src[run.from + k] / divisor;
    dst[run.to + k] = v;
    if (error) error[run.to + k] -= v;
  }
}

// ---- the products of a batch of matrices of rank r <= 32: R is the widest r rounded up to a power of two ----

constexpr int kProjectRowsPerWarp = 4, kProductThreads = 256, kPTile = 64, kExpandRows = 16;
constexpr int kProductMax = static_cast<int>(kProductBatchMax);

/// One matrix of a product launch.
struct ProductItem {
  const float* a;  // M (the projections) or P (expand)
  const float* b;  // Q (projectRows), P (projectColumns) or Q (expand)
  float* out;      // P or Q, or their partial sums in the scratch; expand: its output
  float* error;    // expand: M, which its output is taken off (or null)
  int64_t n, m;
  int r, splits;  // splits: projectRows' column splits, projectColumns' row splits, expand's row-tile blocks
};

/// Up to kProductMax items by value: block b serves item t with firstBlock[t] <= b < firstBlock[t + 1].
template <typename Item>
struct ItemBatch {
  Item items[kProductMax];
  int firstBlock[kProductMax + 1];
  int count;
};

/// A projection's partial sums: out (count) = the sum of the (splits, count) partials, in split order.
struct PartialSum {
  const float* partials;
  float* out;
  int64_t count, splits;
};

using ProductBatch = ItemBatch<ProductItem>;
using PartialSumBatch = ItemBatch<PartialSum>;
static_assert(sizeof(ProductBatch) <= 4000 && sizeof(PartialSumBatch) <= 4000, "kernel arguments are at most 4 KB");

/// P = M Q for row group `group` (32 rows) and column split `split` (columns [split * columnsPerSplit, ...)),
/// whose partial P goes to out + split * n * r: a warp per kProjectRowsPerWarp rows of M, lanes striding over
/// its columns (coalesced), each Q row read once for all of the warp's rows; the lanes' sums added by a
/// butterfly.
template <int R>
__device__ void projectRowsTile(const float* M, const float* Q, float* out, int64_t n, int64_t m, int r,
                                int64_t columnsPerSplit, int64_t group, int64_t split) {
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (group * (kProductThreads / 32) + threadIdx.x / 32) * kProjectRowsPerWarp;
  if (row0 >= n) return;
  const int64_t begin = split * columnsPerSplit, end = min(m, begin + columnsPerSplit);
  float* P = out + split * n * r;
  float acc[kProjectRowsPerWarp][R];
#pragma unroll
  for (int i = 0; i < kProjectRowsPerWarp; ++i) {
#pragma unroll
    for (int j = 0; j < R; ++j) acc[i][j] = 0;
  }
  // kUnroll columns per lane per pass: the loads of a pass are issued before its products.
  constexpr int kUnroll = R >= 32 ? 1 : R >= 16 ? 2 : 4;  // within 255 registers
  int64_t k = begin + lane;
  for (; k + 32 * (kUnroll - 1) < end; k += 32 * kUnroll) {
    float x[kUnroll][kProjectRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int i = 0; i < kProjectRowsPerWarp; ++i) {
        x[u][i] = row0 + i < n ? __ldg(M + (row0 + i) * m + k + 32 * u) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float q[R];
#pragma unroll
      for (int j = 0; j < R; ++j) q[j] = j < r ? __ldg(Q + (k + 32 * u) * r + j) : 0.0f;
#pragma unroll
      for (int i = 0; i < kProjectRowsPerWarp; ++i) {
#pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] = fmaf(x[u][i], q[j], acc[i][j]);
      }
    }
  }
  for (; k < end; k += 32) {
    float q[R];
#pragma unroll
    for (int j = 0; j < R; ++j) q[j] = j < r ? __ldg(Q + k * r + j) : 0.0f;
#pragma unroll
    for (int i = 0; i < kProjectRowsPerWarp; ++i) {
      const float x = row0 + i < n ? __ldg(M + (row0 + i) * m + k) : 0.0f;
#pragma unroll
      for (int j = 0; j < R; ++j) acc[i][j] = fmaf(x, q[j], acc[i][j]);
    }
  }
#pragma unroll
  for (int i = 0; i < kProjectRowsPerWarp; ++i) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      float v = acc[i][j];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0 && j < r && row0 + i < n) P[(row0 + i) * r + j] = v;
    }
  }
}

/// Q = M^T P for columns [256 column, ...) and rows [split * rowsPerSplit, ...) of M, whose partial (m, r) goes
/// to out + split * m * r: a thread per column, the rows in order, P's rows from shared memory.
template <int R>
__device__ void projectColumnsTile(const float* M, const float* P, float* out, int64_t n, int64_t m, int r,
                                   int64_t rowsPerSplit, int64_t column, int64_t split) {
  __shared__ float p[kPTile][R];
  const int64_t k = column * kProductThreads + threadIdx.x;
  const int64_t first = split * rowsPerSplit, last = min(n, first + rowsPerSplit);
  float acc[R];
#pragma unroll
  for (int j = 0; j < R; ++j) acc[j] = 0;
  for (int64_t base = first; base < last; base += kPTile) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kPTile), last - base));
    for (int e = threadIdx.x; e < kPTile * R; e += kProductThreads) {
      const int i = e / R, j = e % R;
      p[i][j] = i < rows && j < r ? P[(base + i) * r + j] : 0.0f;
    }
    __syncthreads();
    if (k < m) {
      // Four rows per pass, their loads issued first; the products still in row order.
      int i = 0;
      for (; i + 4 <= rows; i += 4) {
        float x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = __ldg(M + (base + i + u) * m + k);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int j = 0; j < R; ++j) acc[j] = fmaf(x[u], p[i + u][j], acc[j]);
        }
      }
      for (; i < rows; ++i) {
        const float x = __ldg(M + (base + i) * m + k);
#pragma unroll
        for (int j = 0; j < R; ++j) acc[j] = fmaf(x, p[i][j], acc[j]);
      }
    }
    __syncthreads();
  }
  if (k >= m) return;
  float* dst = out + (split * m + k) * r;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    if (j < r) dst[j] = acc[j];
  }
}

/// M = P Q^T for columns [256 column, ...) and the row tiles rowTile, rowTile + rowTiles, ... (kExpandRows
/// rows each): a thread per column holding its Q row, P's rows from shared memory; where error is not null,
/// error -= M too.
template <int R>
__device__ void expandTile(const float* P, const float* Q, float* M, float* error, int64_t n, int64_t m, int r,
                           int64_t column, int64_t rowTile, int64_t rowTiles) {
  __shared__ float p[kExpandRows][R];
  const int64_t k = column * kProductThreads + threadIdx.x;
  float q[R];
#pragma unroll
  for (int j = 0; j < R; ++j) q[j] = k < m && j < r ? __ldg(Q + k * r + j) : 0.0f;
  for (int64_t row0 = rowTile * kExpandRows; row0 < n; row0 += rowTiles * kExpandRows) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kExpandRows), n - row0));
    __syncthreads();  // the previous tile's p is read by every thread before it is overwritten
    for (int e = threadIdx.x; e < kExpandRows * R; e += kProductThreads) {
      const int i = e / R, j = e % R;
      p[i][j] = i < rows && j < r ? P[(row0 + i) * r + j] : 0.0f;
    }
    __syncthreads();
    if (k >= m) continue;
    for (int i = 0; i < rows; ++i) {
      float v = 0;
#pragma unroll
      for (int j = 0; j < R; ++j) v = fmaf(p[i][j], q[j], v);
      M[(row0 + i) * m + k] = v;
      if (error) error[(row0 + i) * m + k] -= v;
    }
  }
}

/// Each block: (row group, column split) of its matrix, the row groups of a split adjacent.
template <int R>
__global__ void projectRowsBatchKernel(ProductBatch batch) {
  const int t = itemOfBlock(batch.firstBlock, batch.count, blockIdx.x);
  const ProductItem x = batch.items[t];
  const int64_t local = blockIdx.x - batch.firstBlock[t], groups = (x.n + 31) / 32;
  projectRowsTile<R>(x.a, x.b, x.out, x.n, x.m, x.r, (x.m + x.splits - 1) / x.splits, local % groups, local / groups);
}

/// Each block: (column block, row split) of its matrix, the column blocks of a split adjacent.
template <int R>
__global__ void projectColumnsBatchKernel(ProductBatch batch) {
  const int t = itemOfBlock(batch.firstBlock, batch.count, blockIdx.x);
  const ProductItem x = batch.items[t];
  const int64_t local = blockIdx.x - batch.firstBlock[t], columns = (x.m + kProductThreads - 1) / kProductThreads;
  projectColumnsTile<R>(x.a, x.b, x.out, x.n, x.m, x.r, (x.n + x.splits - 1) / x.splits, local % columns,
                        local / columns);
}

/// Each block: (column block, first row tile) of its matrix, which has x.splits row-tile blocks per column.
template <int R>
__global__ void expandBatchKernel(ProductBatch batch) {
  const int t = itemOfBlock(batch.firstBlock, batch.count, blockIdx.x);
  const ProductItem x = batch.items[t];
  const int64_t local = blockIdx.x - batch.firstBlock[t], columns = (x.m + kProductThreads - 1) / kProductThreads;
  expandTile<R>(x.a, x.b, x.out, x.error, x.n, x.m, x.r, local % columns, local / columns, x.splits);
}

/// Each item's blocks stride over its values; each value the sum of its splits' partials in split order.
__global__ void partialSumBatchKernel(PartialSumBatch batch) {
  const int t = itemOfBlock(batch.firstBlock, batch.count, blockIdx.x);
  const PartialSum x = batch.items[t];
  const int64_t local = blockIdx.x - batch.firstBlock[t];
  const int64_t stride = static_cast<int64_t>(batch.firstBlock[t + 1] - batch.firstBlock[t]) * blockDim.x;
  for (int64_t e = local * blockDim.x + threadIdx.x; e < x.count; e += stride) {
    float sum = 0;
    for (int64_t s = 0; s < x.splits; ++s) sum += x.partials[s * x.count + e];
    x.out[e] = sum;
  }
}

/// Calls launch(std::integral_constant<int, R>) with R = r rounded up to a power of two (r <= 32).
template <typename Launch>
void withRankTile(int64_t r, Launch&& launch) {
  if (r <= 1) {
    launch(std::integral_constant<int, 1>{});
  } else if (r <= 2) {
    launch(std::integral_constant<int, 2>{});
  } else if (r <= 4) {
    launch(std::integral_constant<int, 4>{});
  } else if (r <= 8) {
    launch(std::integral_constant<int, 8>{});
  } else if (r <= 16) {
    launch(std::integral_constant<int, 16>{});
  } else {
    launch(std::integral_constant<int, 32>{});
  }
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The items of one product launch, and the partial sums that follow it.
struct ProductLaunch {
  ProductBatch batch{};
  PartialSumBatch sums{};
  int widest = 0;        // the largest r
  int64_t partials = 0;  // floats of the scratch taken

  void add(const ProductItem& item, int64_t blocks) {
    MINIDP_CHECK(batch.firstBlock[batch.count] + blocks <= INT32_MAX,
                 "low-rank products: " << blocks << " blocks for one matrix overflow the launch");
    batch.items[batch.count] = item;
    batch.firstBlock[batch.count + 1] = batch.firstBlock[batch.count] + static_cast<int>(blocks);
    ++batch.count;
    widest = std::max(widest, item.r);
  }
  /// Where a projection of `splits` splits writes its (splits, count) partials: `out` itself with one split;
  /// else the scratch at `scratch`, and their sum into `out` follows the launch (run()).
  float* partialsFor(float* out, int64_t count, int64_t splits, float* scratch) {
    if (splits == 1) return out;
    float* at = scratch + partials;
    partials += splits * count;
    sums.items[sums.count] = PartialSum{at, out, count, splits};
    sums.firstBlock[sums.count + 1] = sums.firstBlock[sums.count] + static_cast<int>(gridFor(count, 256));
    ++sums.count;
    return at;
  }
  /// The launch of kernel<R> for the batch's widest r, then that of the partial sums (if any).
  template <typename Launch>
  void run(cudaStream_t stream, Launch&& kernel) {
    if (batch.count == 0) return;
    withRankTile(widest, [&](auto tile) { kernel(tile, batch.firstBlock[batch.count]); });
    CUDA_CHECK_LAUNCH();
    if (sums.count == 0) return;
    partialSumBatchKernel<<<sums.firstBlock[sums.count], 256, 0, stream>>>(sums);
    CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

void orthogonalizeBatch(const Factor* factors, int64_t count, void* scratch, cudaStream_t stream) {
  double* doubles = static_cast<double*>(scratch);
  int64_t offset = 0;
  CholeskyBatch batch{};
  const auto flush = [&] {
    if (batch.count == 0) return;
    const int blocks = batch.firstBlock[batch.count];
    gramBatchKernel<<<blocks, kGramThreads, 0, stream>>>(batch, doubles);
    CUDA_CHECK_LAUNCH();
    choleskyBatchKernel<<<batch.count, 32, 0, stream>>>(batch, doubles);
    CUDA_CHECK_LAUNCH();
    int widest = 1;
    for (int k = 0; k < batch.count; ++k) widest = std::max(widest, static_cast<int>(batch.factors[k].cols));
    withRankTile(widest, [&](auto tile) {
      constexpr int R = decltype(tile)::value;
      applyBatchKernel<R><<<blocks * kApplySplit, kGramThreads, 0, stream>>>(batch, doubles);
    });
    CUDA_CHECK_LAUNCH();
    batch = CholeskyBatch{};
  };
  for (int64_t k = 0; k < count; ++k) {
    const Factor& f = factors[k];
    if (f.rows == 0 || f.cols == 0) continue;
    MINIDP_CHECK(f.cols <= kOrthoMaxCols,
                 "orthogonalizeBatch: " << f.cols << " columns (at most " << kOrthoMaxCols << ")");
    if (f.cols > kMaxGramCols) {
      // Wide factors: one block, Gram-Schmidt as the CPU twin (its column loop costs r^2 / 2 block reductions).
      orthogonalizeKernel<<<1, kOrthoBlock, 0, stream>>>(f.m, f.rows, f.cols);
      CUDA_CHECK_LAUNCH();
      continue;
    }
    // The thin QR's Q by Cholesky, R^T R = M^T M in double, then M R^{-1}: the same Q as Gram-Schmidt
    // (upper-triangular R, positive diagonal) up to rounding.
    const int blocks = static_cast<int>((f.rows + kGramRowsPerBlock - 1) / kGramRowsPerBlock);
    batch.factors[batch.count] = f;
    batch.offset[batch.count] = offset;
    batch.firstBlock[batch.count + 1] = batch.firstBlock[batch.count] + blocks;
    ++batch.count;
    offset += choleskyScratchDoubles(f.rows, f.cols);
    if (batch.count == kBatchMax) flush();
  }
  flush();
}

void copyRuns(const float* src, float* dst, const CopyRun* runs, int64_t count, float divisor, float* error,
              cudaStream_t stream) {
  for (int64_t first = 0; first < count; first += kBatchMax) {
    RunBatch batch{};
    int64_t longest = 0;
    for (int64_t k = first; k < std::min<int64_t>(count, first + kBatchMax); ++k) {
      batch.runs[batch.count++] = runs[k];
      longest = std::max(longest, runs[k].count);
    }
    if (longest == 0) continue;
    const dim3 grid(std::min<unsigned>(gridFor(longest, 256), 64), batch.count);
    copyRunsKernel<<<grid, 256, 0, stream>>>(src, dst, batch, divisor, error);
    CUDA_CHECK_LAUNCH();
  }
}

// P = M Q (kRows: M's rows against Q) or Q = M^T P (M's columns against P) for every matrix of the batch: the
// matrices of kProductBatchMax consecutive entries run as one launch (their splits from productSplits, as
// productScratchBytes counts them); the scratch is free again after each launch's sums.
template <bool kRows>
void projectBatch(const LowRankMatrix* mats, int64_t count, void* scratch, cudaStream_t stream) {
  static_assert(kProjectRowsPerWarp * (kProductThreads / 32) == 32, "productSplits' row groups of 32 rows");
  for (int64_t first = 0; first < count; first += kProductBatchMax) {
    const int64_t size = std::min(kProductBatchMax, count - first);
    const int64_t elements = productLaunchElements(mats + first, size);
    ProductLaunch launch;
    for (int64_t k = first; k < first + size; ++k) {
      const LowRankMatrix& x = mats[k];
      const int64_t length = kRows ? x.n : x.m;  // rows of the product
      if (length == 0 || x.r == 0) continue;
      if (!onProductKernels(x)) {
        if constexpr (kRows) {
          gemm<float>(false, false, x.n, x.r, x.m, 1.0f, x.matrix, 0, x.q, 0, 0.0f, x.p, 0, 1, stream);
        } else {
          gemm<float>(true, false, x.m, x.r, x.n, 1.0f, x.matrix, 0, x.p, 0, 0.0f, x.q, 0, 1, stream);
        }
        continue;
      }
      const ProductSplits splits = productSplits(x, elements);
      const int64_t split = kRows ? splits.rows : splits.columns;
      float* out = launch.partialsFor(kRows ? x.p : x.q, length * x.r, split, static_cast<float*>(scratch));
      launch.add({x.matrix, kRows ? x.q : x.p, out, nullptr, x.n, x.m, static_cast<int>(x.r), static_cast<int>(split)},
                 (kRows ? ceilDiv(x.n, 32) : ceilDiv(x.m, kProductThreads)) * split);
    }
    launch.run(stream, [&](auto tile, int blocks) {
      constexpr int R = decltype(tile)::value;
      if constexpr (kRows) {
        projectRowsBatchKernel<R><<<blocks, kProductThreads, 0, stream>>>(launch.batch);
      } else {
        projectColumnsBatchKernel<R><<<blocks, kProductThreads, 0, stream>>>(launch.batch);
      }
    });
  }
}

void projectRowsBatch(const LowRankMatrix* mats, int64_t count, void* scratch, cudaStream_t stream) {
  projectBatch<true>(mats, count, scratch, stream);
}

void projectColumnsBatch(const LowRankMatrix* mats, int64_t count, void* scratch, cudaStream_t stream) {
  projectBatch<false>(mats, count, scratch, stream);
}

void expandBatch(const LowRankMatrix* mats, int64_t count, bool updateError, cudaStream_t stream) {
  for (int64_t first = 0; first < count; first += kProductBatchMax) {
    ProductLaunch launch;
    for (int64_t k = first; k < std::min(count, first + kProductBatchMax); ++k) {
      const LowRankMatrix& x = mats[k];
      if (x.n == 0 || x.m == 0) continue;
      if (!onProductKernels(x)) {
        gemm<float>(false, true, x.n, x.m, x.r, 1.0f, x.p, 0, x.q, 0, 0.0f, x.out, 0, 1, stream);
        if (updateError) {
          binaryForward<float, float>(BinaryOp::Sub, Broadcast::Same, x.matrix, x.out, x.matrix, x.n, x.m, stream);
        }
        continue;
      }
      // A block per row tile of a column block, up to 65535 of them: each then takes every 65535th tile.
      const int64_t rowBlocks = std::min<int64_t>(ceilDiv(x.n, kExpandRows), 65535);
      launch.add({x.p, x.q, x.out, updateError ? x.matrix : nullptr, x.n, x.m, static_cast<int>(x.r),
                  static_cast<int>(rowBlocks)},
                 ceilDiv(x.m, kProductThreads) * rowBlocks);
    }
    launch.run(stream, [&](auto tile, int blocks) {
      constexpr int R = decltype(tile)::value;
      expandBatchKernel<R><<<blocks, kProductThreads, 0, stream>>>(launch.batch);
    });
  }
}

}  // namespace minidp::kernels::cuda
