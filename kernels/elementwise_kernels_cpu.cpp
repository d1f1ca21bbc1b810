// CPU twins of kernels/elementwise_kernels.cu.
#include <algorithm>

#include "kernels/elementwise_kernels.h"
#include "kernels/gelu_math.h"

namespace minidp::kernels::cpu {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
template <typename T>
void addInPlace(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
template <typename T>
void mul(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
template <typename T>
void scale(const T* x, AccumOf<T> s, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}
template <typename T>
void fill(T* out, T value, int64_t n) {
  std::fill(out, out + n, value);
}
template <typename T>
void reluForward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}
template <typename T>
void reluBackward(const T* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
}
template <typename T>
void geluForward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = geluValue(x[i]);
}
template <typename T>
void geluBackward(const T* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * geluDerivative(x[i]);
}

#define MINIDP_INSTANTIATE(T)                                     \
  template void add<T>(const T*, const T*, T*, int64_t);          \
  template void addInPlace<T>(T*, const T*, int64_t);             \
  template void mul<T>(const T*, const T*, T*, int64_t);          \
  template void scale<T>(const T*, AccumOf<T>, T*, int64_t);      \
  template void fill<T>(T*, T, int64_t);                          \
  template void reluForward<T>(const T*, T*, int64_t);            \
  template void reluBackward<T>(const T*, const T*, T*, int64_t); \
  template void geluForward<T>(const T*, T*, int64_t);            \
  template void geluBackward<T>(const T*, const T*, T*, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
template void fill<int32_t>(int32_t*, int32_t, int64_t);
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
