// CPU twin of kernels/rotary_kernels.cu: the angles once per (position, pair), then every sequence and head.
#include <cmath>

#include "kernels/rotary_kernels.h"

namespace minidp::kernels::cpu {

template <typename T>
void rotary(const T* x, T* y, int64_t B, int64_t seqLen, int64_t H, int64_t d, double theta, bool inverse) {
  const int64_t half = d / 2;
  for (int64_t t = 0; t < seqLen; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = rotaryAngle(t, i, d, theta);
      const T c = static_cast<T>(std::cos(angle));
      const T s = static_cast<T>(inverse ? -std::sin(angle) : std::sin(angle));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          const int64_t row = ((b * seqLen + t) * H + h) * d;
          const T x1 = x[row + i], x2 = x[row + i + half];
          y[row + i] = x1 * c - x2 * s;
          y[row + i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
}

template void rotary<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t, double, bool);
template void rotary<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t, double, bool);

}  // namespace minidp::kernels::cpu
