// Strided block copies, the kernel of narrow, split and cat: `blocks` runs of `blockLen` contiguous
// elements, run o read at src + o * srcStride and written at dst + o * dstStride. A slice of dimension k
// of a contiguous tensor is such a copy with blocks = the product of the extents before k. Repeated
// blocks, the kernels of repeatInterleave: each block written `repeats` times in a row, and back, the
// copies of a block summed. CPU twins share the signatures, minus the stream. Instantiated for float and
// double, and on CUDA for bf16.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_SLICE_DECLARATIONS(...)                                                                    \
  /* dst[o * dstStride + j] = src[o * srcStride + j] for o < blocks, j < blockLen (no overlap). */        \
  template <typename T>                                                                                   \
  void copyBlocks(const T* src, int64_t srcStride, T* dst, int64_t dstStride, int64_t blocks,             \
                  int64_t blockLen __VA_ARGS__);                                                          \
  /* dst[(o * repeats + r) * blockLen + j] = src[o * blockLen + j] for o < blocks, r < repeats. */        \
  template <typename T>                                                                                   \
  void repeatBlocks(const T* src, T* dst, int64_t blocks, int64_t repeats, int64_t blockLen __VA_ARGS__); \
  /* dst[o * blockLen + j] = the sum of src[(o * repeats + r) * blockLen + j] over r = 0, 1, ... in */    \
  /* that order, added in AccumOf<T> and rounded once (repeatBlocks' backward). */                        \
  template <typename T>                                                                                   \
  void sumRepeatedBlocks(const T* src, T* dst, int64_t blocks, int64_t repeats, int64_t blockLen __VA_ARGS__);

namespace cpu {
MINIDP_SLICE_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_SLICE_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_SLICE_DECLARATIONS

}  // namespace minidp::kernels
