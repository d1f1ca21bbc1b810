// CPU twin of kernels/slice_kernels.cu.
#include <algorithm>

#include "kernels/slice_kernels.h"

namespace minidp::kernels::cpu {

template <typename T>
void copyBlocks(const T* src, int64_t srcStride, T* dst, int64_t dstStride, int64_t blocks, int64_t blockLen) {
  for (int64_t o = 0; o < blocks; ++o) std::copy_n(src + o * srcStride, blockLen, dst + o * dstStride);
}

template <typename T>
void repeatBlocks(const T* src, T* dst, int64_t blocks, int64_t repeats, int64_t blockLen) {
  for (int64_t o = 0; o < blocks; ++o) {
    for (int64_t r = 0; r < repeats; ++r) std::copy_n(src + o * blockLen, blockLen, dst + (o * repeats + r) * blockLen);
  }
}

template <typename T>
void sumRepeatedBlocks(const T* src, T* dst, int64_t blocks, int64_t repeats, int64_t blockLen) {
  for (int64_t o = 0; o < blocks; ++o) {
    for (int64_t j = 0; j < blockLen; ++j) {
      AccumOf<T> sum = 0;
      for (int64_t r = 0; r < repeats; ++r) sum += src[(o * repeats + r) * blockLen + j];
      dst[o * blockLen + j] = static_cast<T>(sum);
    }
  }
}

#define MINIDP_SLICE_INSTANTIATE(T)                                              \
  template void copyBlocks<T>(const T*, int64_t, T*, int64_t, int64_t, int64_t); \
  template void repeatBlocks<T>(const T*, T*, int64_t, int64_t, int64_t);        \
  template void sumRepeatedBlocks<T>(const T*, T*, int64_t, int64_t, int64_t);
MINIDP_SLICE_INSTANTIATE(float)
MINIDP_SLICE_INSTANTIATE(double)
#undef MINIDP_SLICE_INSTANTIATE

}  // namespace minidp::kernels::cpu
