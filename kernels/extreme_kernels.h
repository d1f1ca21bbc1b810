// Max and min along one dimension with the position of the chosen entry, and the backward that hands the
// gradient to that position. x is (outer, D, inner): the dimension reduced is D.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/host_device.h"
#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_EXTREME_DECLARATIONS(...)                                                                    \
  /* values (outer, inner) and int32 indices (outer, inner) of the largest (`largest`) or smallest entry of \
     x (outer, D, inner) along D, D >= 1: the first of equal entries; a NaN wins over any number. `values`  \
     may be null (argmax). */                                                                               \
  template <typename T>                                                                                     \
  void extremeAlongDim(const T* x, T* values, int32_t* indices, int64_t outer, int64_t D, int64_t inner,    \
                       bool largest __VA_ARGS__);                                                           \
  /* dx (outer, D, inner) = g[o, i] where d = indices[o, i], 0 elsewhere: every element written. */         \
  template <typename T>                                                                                     \
  void scatterAlongDim(const T* g, const int32_t* indices, T* dx, int64_t outer, int64_t D,                 \
                       int64_t inner __VA_ARGS__);

namespace cpu {
MINIDP_EXTREME_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_EXTREME_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_EXTREME_DECLARATIONS

/// Whether v replaces `best` in a scan from the first entry: strictly larger (smaller), or the first NaN.
template <typename A>
MINIDP_HOST_DEVICE inline bool replacesExtreme(A v, A best, bool largest) {
  if (v != v) return best == best;  // v NaN: replaces a number, not an earlier NaN
  return largest ? v > best : v < best;
}

}  // namespace minidp::kernels
