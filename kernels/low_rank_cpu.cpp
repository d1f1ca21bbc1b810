#include <cmath>
#include <vector>

#include "kernels/low_rank.h"

namespace minidp::kernels {

size_t orthogonalizeScratchBytes(int64_t rows, int64_t cols) {
  if (cols > kGramMaxCols || rows == 0 || cols == 0) return 0;
  const int64_t blocks = (rows + kGramRowsPerBlock - 1) / kGramRowsPerBlock;
  return static_cast<size_t>(blocks * cols * cols) * sizeof(double) + static_cast<size_t>(cols * cols) * sizeof(float);
}

}  // namespace minidp::kernels

namespace minidp::kernels::cpu {

void orthogonalizeColumns(float* m, int64_t rows, int64_t cols, void*) {
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

void subtract(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = a[k] - b[k];
}

}  // namespace minidp::kernels::cpu
