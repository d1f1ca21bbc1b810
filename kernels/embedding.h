// Token + position embedding lookup and its deterministic backward (no floating-point atomics).
// Shapes: wte (V, C), wpe (Tmax, C), tokens int32 (B, T) with T = seqLen <= Tmax, out/dout (B, T, C).
// CPU twins share the signatures, minus the stream. Instantiated for float and double.
#pragma once

#include <cstdint>

#include "kernels/stream.h"

namespace minidp::kernels {

#define MINIDP_EMBEDDING_DECLARATIONS(...)                                                           \
  /* out[b, t] = wte[tokens[b, t]] + wpe[t]. A token outside [0, V): the CPU twin throws; the GPU */  \
  /* kernel cannot report it without a host sync, so it writes NaN to that output row instead. */    \
  template <typename T>                                                                              \
  void embeddingForward(const T* wte, const T* wpe, const int32_t* tokens, T* out, int64_t B,       \
                        int64_t seqLen, int64_t C, int64_t V __VA_ARGS__);                           \
  /* dwte[v] = sum of dout[b, t] over the positions with tokens[b, t] == v, in (b, t) order; dwte */ \
  /* (V, C) is overwritten. Out-of-range tokens: the CPU twin throws, the GPU kernel skips them. */  \
  template <typename T>                                                                              \
  void embeddingBackwardTokens(const T* dout, const int32_t* tokens, T* dwte, int64_t B,            \
                               int64_t seqLen, int64_t C, int64_t V __VA_ARGS__);                    \
  /* dwpe[t] = sum over b of dout[b, t], in b order, for t < T and 0 for T <= t < Tmax; dwpe */      \
  /* (Tmax, C) is overwritten. */                                                                    \
  template <typename T>                                                                              \
  void embeddingBackwardPositions(const T* dout, T* dwpe, int64_t B, int64_t seqLen, int64_t C,     \
                                  int64_t Tmax __VA_ARGS__);

namespace cpu {
MINIDP_EMBEDDING_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_EMBEDDING_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_EMBEDDING_DECLARATIONS

}  // namespace minidp::kernels
