// CPU twin of kernels/bias.cu (float and double; bf16 is CUDA-only).
#include "kernels/bias.h"

namespace minidp::kernels::cpu {

template <typename T>
void addBias(T* y, const ParamOf<T>* bias, int64_t N, int64_t C) {
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < C; ++c) y[r * C + c] += bias[c];
  }
}

template <typename T>
void sumColumns(const T* x, ParamOf<T>* out, AccumOf<T>* /*scratch: the CPU sums rows in order*/, int64_t N, int64_t C,
                bool accumulate) {
  for (int64_t c = 0; c < C; ++c) {
    AccumOf<T> s = 0;
    for (int64_t r = 0; r < N; ++r) s += x[r * C + c];
    out[c] = accumulate ? out[c] + s : s;
  }
}

#define MINIDP_INSTANTIATE(T)                                        \
  template void addBias<T>(T*, const ParamOf<T>*, int64_t, int64_t); \
  template void sumColumns<T>(const T*, ParamOf<T>*, AccumOf<T>*, int64_t, int64_t, bool);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
