// Copies through a strided layout (permute, expand) and the sum back over repeated dimensions (expand's
// backward).
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/host_device.h"
#include "base/stream.h"

namespace minidp::kernels {

/// Most dimensions a layout describes.
constexpr int kMaxLayoutDims = 8;

/// Extents and element strides of a view of a buffer; a stride may be 0 (a repeated dimension).
struct StridedLayout {
  int ndim = 0;
  int64_t size[kMaxLayoutDims] = {};
  int64_t stride[kMaxLayoutDims] = {};
};

/// The buffer offset of the i-th entry of `layout` in row-major order of its extents.
MINIDP_HOST_DEVICE inline int64_t stridedOffset(const StridedLayout& layout, int64_t i) {
  int64_t offset = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    offset += (i % layout.size[d]) * layout.stride[d];
    i /= layout.size[d];
  }
  return offset;
}

#define MINIDP_LAYOUT_DECLARATIONS(...)                                                                     \
  /* y[i] = x[stridedOffset(layout, i)] for the n entries of `layout`: y contiguous in layout's extents. */ \
  template <typename T>                                                                                     \
  void gatherStrided(const T* x, T* y, StridedLayout layout, int64_t n __VA_ARGS__);                        \
  /* y[j] = sum over k in [0, m) of x[stridedOffset(outer, j) + stridedOffset(inner, k)], j in [0, n), in k \
     order, in AccumOf<T> (fp32 for bf16), rounded once. */                                                 \
  template <typename T>                                                                                     \
  void sumStrided(const T* x, T* y, StridedLayout outer, int64_t n, StridedLayout inner, int64_t m __VA_ARGS__);

namespace cpu {
MINIDP_LAYOUT_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_LAYOUT_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_LAYOUT_DECLARATIONS

}  // namespace minidp::kernels
