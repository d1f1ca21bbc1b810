// Softmax and log-softmax over the last dimension, max-subtracted, and their backward. Statistics (the
// maximum, the sum of exponentials, the backward's dot product) in AccumOf<T>: fp32 for bf16.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_SOFTMAX_DECLARATIONS(...)                                                                    \
  /* y (rows, C) = softmax(x) over the last dimension, or log-softmax with `log`: x - max is exponentiated, \
     so no entry overflows. */                                                                              \
  template <typename T>                                                                                     \
  void softmaxForward(const T* x, T* y, int64_t rows, int64_t C, bool log __VA_ARGS__);                     \
  /* dx (rows, C) from the forward's output y and dy: y (dy - sum(dy y)) for softmax, dy - exp(y) sum(dy)   \
     for log-softmax. */                                                                                    \
  template <typename T>                                                                                     \
  void softmaxBackward(const T* y, const T* dy, T* dx, int64_t rows, int64_t C, bool log __VA_ARGS__);

namespace cpu {
MINIDP_SOFTMAX_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_SOFTMAX_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_SOFTMAX_DECLARATIONS

}  // namespace minidp::kernels
