// Bias of a linear layer: the broadcast add in forward and the column sums (dbias) in backward. Activations
// T are float, double or (CUDA only) bf16; the bias and its gradient are ParamOf<T> (fp32 for bf16) and
// sums run in AccumOf<T>. CPU twins share the signatures, minus the stream.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"
#include "kernels/column_reduce.h"

namespace minidp::kernels {

/// Accumulators sumColumns needs in `scratch` for an (N, C) input (the CPU twin needs none).
inline int64_t sumColumnsScratchSize(int64_t N, int64_t C) { return columnSlices(N, C) * C; }

#define MINIDP_BIAS_DECLARATIONS(...)                                                                   \
  /* y (N, C) += bias (C), broadcast over the rows. */                                                  \
  template <typename T>                                                                                 \
  void addBias(T* y, const ParamOf<T>* bias, int64_t N, int64_t C __VA_ARGS__);                         \
  /* out (C) = (or += when accumulate) the sum over rows of x (N, C), in a fixed order (no atomics): */ \
  /* row slices into scratch (sumColumnsScratchSize), then the slices in order. */                      \
  template <typename T>                                                                                 \
  void sumColumns(const T* x, ParamOf<T>* out, AccumOf<T>* scratch, int64_t N, int64_t C,               \
                  bool accumulate __VA_ARGS__);

namespace cpu {
MINIDP_BIAS_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_BIAS_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_BIAS_DECLARATIONS

}  // namespace minidp::kernels
