// CPU twin of kernels/extreme_kernels.cu.
#include "kernels/extreme_kernels.h"

namespace minidp::kernels::cpu {

template <typename T>
void extremeAlongDim(const T* x, T* values, int32_t* indices, int64_t outer, int64_t D, int64_t inner, bool largest) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const T* column = x + o * D * inner + i;  // stride inner
      int32_t at = 0;
      for (int64_t d = 1; d < D; ++d) {
        if (replacesExtreme(column[d * inner], column[at * inner], largest)) at = static_cast<int32_t>(d);
      }
      indices[o * inner + i] = at;
      if (values) values[o * inner + i] = column[at * inner];
    }
  }
}

template <typename T>
void scatterAlongDim(const T* g, const int32_t* indices, T* dx, int64_t outer, int64_t D, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t i = 0; i < inner; ++i)
        dx[(o * D + d) * inner + i] = indices[o * inner + i] == d ? g[o * inner + i] : T(0);
    }
  }
}

#define MINIDP_INSTANTIATE(T)                                                                \
  template void extremeAlongDim<T>(const T*, T*, int32_t*, int64_t, int64_t, int64_t, bool); \
  template void scatterAlongDim<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
