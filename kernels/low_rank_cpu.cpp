#include <cmath>

#include "kernels/low_rank.h"

namespace minidp::kernels::cpu {

void orthogonalizeColumns(float* m, int64_t rows, int64_t cols) {
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
