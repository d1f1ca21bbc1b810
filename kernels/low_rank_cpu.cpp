#include <cmath>

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
  for (int64_t i = 0; i < cols; ++i) {
    double squares = 0;
    for (int64_t r = 0; r < rows; ++r) squares += static_cast<double>(m[r * cols + i]) * m[r * cols + i];
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
