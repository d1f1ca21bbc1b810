// CPU twin of kernels/slice.cu.
#include <algorithm>

#include "kernels/slice.h"

namespace minidp::kernels::cpu {

template <typename T>
void copyBlocks(const T* src, int64_t srcStride, T* dst, int64_t dstStride, int64_t blocks, int64_t blockLen) {
  for (int64_t o = 0; o < blocks; ++o) std::copy_n(src + o * srcStride, blockLen, dst + o * dstStride);
}

template void copyBlocks<float>(const float*, int64_t, float*, int64_t, int64_t, int64_t);
template void copyBlocks<double>(const double*, int64_t, double*, int64_t, int64_t, int64_t);

}  // namespace minidp::kernels::cpu
