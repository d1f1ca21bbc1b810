// LayerNorm over the last dimension of an (N, C) array, forward and backward. The weight and bias
// gradients are column reductions in a fixed order (no atomics). CPU twins share the signatures, minus the
// stream. Instantiated for float and double.
#pragma once

#include <cstdint>

#include "kernels/stream.h"

namespace minidp::kernels {

#define MINIDP_LAYERNORM_DECLARATIONS(...)                                                             \
  /* y = (x - mean) * rstd * weight + bias per row; x, y (N, C); weight, bias (C); saves mean, rstd */  \
  /* (N) with rstd = 1 / sqrt(var + eps), var the biased variance. */                                   \
  template <typename T>                                                                                \
  void layerNormForward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t N,  \
                        int64_t C, T eps __VA_ARGS__);                                                  \
  /* From dy (N, C) and the saved mean, rstd: dx (N, C), dweight and dbias (C), all overwritten. */    \
  template <typename T>                                                                                \
  void layerNormBackward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, \
                         T* dweight, T* dbias, int64_t N, int64_t C __VA_ARGS__);

namespace cpu {
MINIDP_LAYERNORM_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_LAYERNORM_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_LAYERNORM_DECLARATIONS

}  // namespace minidp::kernels
