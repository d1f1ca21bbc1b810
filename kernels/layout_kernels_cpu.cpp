// CPU twin of kernels/layout_kernels.cu.
#include "kernels/layout_kernels.h"

namespace minidp::kernels::cpu {

template <typename T>
void gatherStrided(const T* x, T* y, StridedLayout layout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[stridedOffset(layout, i)];
}

template <typename T>
void sumStrided(const T* x, T* y, StridedLayout outer, int64_t n, StridedLayout inner, int64_t m) {
  for (int64_t j = 0; j < n; ++j) {
    const T* base = x + stridedOffset(outer, j);
    T sum = 0;
    for (int64_t k = 0; k < m; ++k) sum += base[stridedOffset(inner, k)];
    y[j] = sum;
  }
}

#define MINIDP_INSTANTIATE(T)                                           \
  template void gatherStrided<T>(const T*, T*, StridedLayout, int64_t); \
  template void sumStrided<T>(const T*, T*, StridedLayout, int64_t, StridedLayout, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
