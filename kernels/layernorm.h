// LayerNorm and RMSNorm over the last dimension of an (N, C) array, forward and backward: RMSNorm is
// LayerNorm without the mean subtracted and without a bias, on the same kernels. Activations T are float,
// double or (CUDA only) bf16; weight, bias and their gradients are ParamOf<T> (fp32 for bf16), statistics
// and sums AccumOf<T>. The weight and bias gradients are column reductions in a fixed order (no atomics).
// CPU twins share the signatures, minus the stream.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"
#include "kernels/column_reduce.h"

namespace minidp::kernels {

/// Accumulators layerNormBackward needs in `scratch` for an (N, C) input (the CPU twin needs none).
inline int64_t layerNormBackwardScratchSize(int64_t N, int64_t C) { return 2 * columnSlices(N, C) * C; }
/// Accumulators rmsNormBackward needs in `scratch` (the CPU twin needs none).
inline int64_t rmsNormBackwardScratchSize(int64_t N, int64_t C) { return columnSlices(N, C) * C; }

#define MINIDP_LAYERNORM_DECLARATIONS(...)                                                                           \
  /* y = (x - mean) * rstd * weight + bias per row; x, y (N, C); weight, bias (C); saves mean, rstd */               \
  /* (N) with rstd = 1 / sqrt(var + eps), var the biased variance. */                                                \
  template <typename T>                                                                                              \
  void layerNormForward(const T* x, const ParamOf<T>* weight, const ParamOf<T>* bias, T* y, AccumOf<T>* mean,        \
                        AccumOf<T>* rstd, int64_t N, int64_t C, AccumOf<T> eps __VA_ARGS__);                         \
  /* From dy (N, C) and the saved mean, rstd: dx (N, C), dweight and dbias (C), each overwritten or, */              \
  /* when its accumulate flag is set, added to (+=; dx's term rounded to T first, as a separate add */               \
  /* would). scratch: layerNormBackwardScratchSize(N, C) accumulators. */                                            \
  template <typename T>                                                                                              \
  void layerNormBackward(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* mean,                  \
                         const AccumOf<T>* rstd, T* dx, ParamOf<T>* dweight, ParamOf<T>* dbias, AccumOf<T>* scratch, \
                         int64_t N, int64_t C, bool accumulateDx, bool accumulateWeight,                             \
                         bool accumulateBias __VA_ARGS__);                                                           \
  /* y = x * rstd * weight per row, rstd = 1 / sqrt(mean(x^2) + eps) (saved, N). */                                  \
  template <typename T>                                                                                              \
  void rmsNormForward(const T* x, const ParamOf<T>* weight, T* y, AccumOf<T>* rstd, int64_t N, int64_t C,            \
                      AccumOf<T> eps __VA_ARGS__);                                                                   \
  /* From dy (N, C) and the saved rstd: dx (N, C) and dweight (C), each overwritten or added to, as */               \
  /* layerNormBackward's. scratch: rmsNormBackwardScratchSize(N, C) accumulators. */                                 \
  template <typename T>                                                                                              \
  void rmsNormBackward(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* rstd, T* dx,             \
                       ParamOf<T>* dweight, AccumOf<T>* scratch, int64_t N, int64_t C, bool accumulateDx,            \
                       bool accumulateWeight __VA_ARGS__);

namespace cpu {
MINIDP_LAYERNORM_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_LAYERNORM_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_LAYERNORM_DECLARATIONS

}  // namespace minidp::kernels
