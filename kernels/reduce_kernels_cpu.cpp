// CPU twins of kernels/reduce_kernels.cu.
#include "kernels/reduce_kernels.h"

namespace minidp::kernels::cpu {

template <typename T>
void sumAll(const T* x, T* out, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  out[0] = s;
}

template <typename T>
void broadcastScalar(const T* scalar, T s, T* out, int64_t n) {
  const T v = scalar[0] * s;
  for (int64_t i = 0; i < n; ++i) out[i] = v;
}

template void sumAll<float>(const float*, float*, int64_t);
template void sumAll<double>(const double*, double*, int64_t);
template void broadcastScalar<float>(const float*, float, float*, int64_t);
template void broadcastScalar<double>(const double*, double, double*, int64_t);

}  // namespace minidp::kernels::cpu
