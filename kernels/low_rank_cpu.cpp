#include <cmath>
#include <vector>

#include "kernels/composite_kernels.h"
#include "kernels/low_rank.h"
#include "kernels/matmul.h"

namespace minidp::kernels::cpu {

namespace {

void orthogonalizeColumns(float* m, int64_t rows, int64_t cols) {
  const auto squaredNorm = [&](int64_t i) {
    double squares = 0;
    for (int64_t r = 0; r < rows; ++r) squares += static_cast<double>(m[r * cols + i]) * m[r * cols + i];
    return squares;
  };
  std::vector<double> initial(cols);
  for (int64_t i = 0; i < cols; ++i) initial[i] = squaredNorm(i);
  for (int64_t i = 0; i < cols; ++i) {
    const double squares = squaredNorm(i);
    // A column (numerically) in the span of the earlier ones, or zero, comes out zero, as on CUDA: what is
    // left of it after the projections is at most 1e-12 of its squared norm. PyTorch's epsilon-free
    // Gram-Schmidt would normalise that rounding noise (or divide 0 by 0).
    if (!(squares > 1e-12 * initial[i])) {
      for (int64_t r = 0; r < rows; ++r) m[r * cols + i] = 0;
      continue;
    }
    const float norm = static_cast<float>(std::sqrt(squares));
    for (int64_t r = 0; r < rows; ++r) m[r * cols + i] /= norm;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t r = 0; r < rows; ++r) dot += static_cast<double>(m[r * cols + i]) * m[r * cols + j];
      const float d = static_cast<float>(dot);
      for (int64_t r = 0; r < rows; ++r) m[r * cols + j] -= d * m[r * cols + i];
    }
  }
}

}  // namespace

void orthogonalizeBatch(const Factor* factors, int64_t count, void*) {
  for (int64_t k = 0; k < count; ++k) orthogonalizeColumns(factors[k].m, factors[k].rows, factors[k].cols);
}

void copyRuns(const float* src, float* dst, const CopyRun* runs, int64_t count, float divisor, float* error) {
  for (int64_t k = 0; k < count; ++k) {
    for (int64_t e = runs[k].to; e < runs[k].to + runs[k].count; ++e) {
      dst[e] = src[runs[k].from + e - runs[k].to] / divisor;
      if (error) error[e] -= dst[e];
    }
  }
}

void projectRowsBatch(const LowRankMatrix* mats, int64_t count, void*) {
  for (int64_t k = 0; k < count; ++k) {
    const LowRankMatrix& x = mats[k];
    gemm<float>(false, false, x.n, x.r, x.m, 1.0f, x.matrix, 0, x.q, 0, 0.0f, x.p, 0, 1);
  }
}

void projectColumnsBatch(const LowRankMatrix* mats, int64_t count, void*) {
  for (int64_t k = 0; k < count; ++k) {
    const LowRankMatrix& x = mats[k];
    gemm<float>(true, false, x.m, x.r, x.n, 1.0f, x.matrix, 0, x.p, 0, 0.0f, x.q, 0, 1);
  }
}

void expandBatch(const LowRankMatrix* mats, int64_t count, bool updateError) {
  for (int64_t k = 0; k < count; ++k) {
    const LowRankMatrix& x = mats[k];
    gemm<float>(false, true, x.n, x.m, x.r, 1.0f, x.p, 0, x.q, 0, 0.0f, x.out, 0, 1);
    if (updateError) binaryForward<float, float>(BinaryOp::Sub, Broadcast::Same, x.matrix, x.out, x.matrix, x.n, x.m);
  }
}

}  // namespace minidp::kernels::cpu
