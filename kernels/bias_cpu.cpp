// CPU twin of kernels/bias.cu.
#include "kernels/bias.h"

namespace minidp::kernels::cpu {

template <typename T>
void addBias(T* y, const T* bias, int64_t N, int64_t C) {
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < C; ++c) y[r * C + c] += bias[c];
  }
}

template <typename T>
void sumColumns(const T* x, T* out, int64_t N, int64_t C) {
  for (int64_t c = 0; c < C; ++c) out[c] = 0;
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < C; ++c) out[c] += x[r * C + c];
  }
}

#define MINIDP_INSTANTIATE(T)                               \
  template void addBias<T>(T*, const T*, int64_t, int64_t); \
  template void sumColumns<T>(const T*, T*, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
