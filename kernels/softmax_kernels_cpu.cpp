// CPU twin of kernels/softmax_kernels.cu: each row in three passes (max, sum of exponentials, write).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/softmax_kernels.h"

namespace minidp::kernels::cpu {

template <typename T>
void softmaxForward(const T* x, T* y, int64_t rows, int64_t C, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T max = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < C; ++c) max = std::max(max, xr[c]);
    T sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(xr[c] - max);
    if (log) {
      const T shift = max + std::log(sum);
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] - shift;
    } else {
      for (int64_t c = 0; c < C; ++c) yr[c] = std::exp(xr[c] - max) / sum;
    }
  }
}

template <typename T>
void softmaxBackward(const T* y, const T* dy, T* dx, int64_t rows, int64_t C, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * C;
    const T* gr = dy + r * C;
    T* dr = dx + r * C;
    T dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += log ? gr[c] : gr[c] * yr[c];
    for (int64_t c = 0; c < C; ++c) dr[c] = log ? gr[c] - std::exp(yr[c]) * dot : yr[c] * (gr[c] - dot);
  }
}

template void softmaxForward<float>(const float*, float*, int64_t, int64_t, bool);
template void softmaxForward<double>(const double*, double*, int64_t, int64_t, bool);
template void softmaxBackward<float>(const float*, const float*, float*, int64_t, int64_t, bool);
template void softmaxBackward<double>(const double*, const double*, double*, int64_t, int64_t, bool);

}  // namespace minidp::kernels::cpu
