// Bias of a linear layer: the broadcast add in forward and the column sums (dbias) in backward.
#pragma once

#include <cstdint>

#include "kernels/stream.h"

namespace minidp::kernels {

#define MINIDP_BIAS_DECLARATIONS(...)                                                          \
  /* y (N, C) += bias (C), broadcast over the rows. */                                         \
  template <typename T>                                                                        \
  void addBias(T* y, const T* bias, int64_t N, int64_t C __VA_ARGS__);                         \
  /* out (C) = sum over rows of x (N, C), each column summed in a fixed order (no atomics). */ \
  template <typename T>                                                                        \
  void sumColumns(const T* x, T* out, int64_t N, int64_t C __VA_ARGS__);

namespace cpu {
MINIDP_BIAS_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_BIAS_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_BIAS_DECLARATIONS

}  // namespace minidp::kernels
