// Token + position embedding lookup and its deterministic backward (no floating-point atomics).
// Shapes: wte (V, C), wpe (Tmax, C), tokens int32 (B, T) with T = seqLen <= Tmax, out/dout (B, T, C).
// The output T is float, double or (CUDA only) bf16; the tables and their gradients are ParamOf<T> (fp32
// for bf16 output). CPU twins share the signatures, minus the stream.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_EMBEDDING_DECLARATIONS(...)                                                                             \
  /* out[b, t] = wte[tokens[b, t]] + wpe[t]. A token outside [0, V): the CPU twin throws; the GPU */                   \
  /* kernel cannot report it without a host sync, so it writes NaN to that output row instead. */                      \
  template <typename T>                                                                                                \
  void embeddingForward(const ParamOf<T>* wte, const ParamOf<T>* wpe, const int32_t* tokens, T* out, int64_t B,        \
                        int64_t seqLen, int64_t C, int64_t V __VA_ARGS__);                                             \
  /* dwte[v] (= or += when accumulate) the sum of dout[b, t] over the positions with tokens[b, t] == v, */             \
  /* added in (b, t) order onto the row's start value (0 or the old row), so the CPU and GPU bits agree. */            \
  /* Rows of tokens that do not occur are zeroed or left alone. scratch: embeddingBackwardScratchBytes */              \
  /* (the CPU twin needs none). Out-of-range tokens: the CPU twin throws, the GPU kernel skips them. */                \
  template <typename T>                                                                                                \
  void embeddingBackwardTokens(const T* dout, const int32_t* tokens, ParamOf<T>* dwte, void* scratch, int64_t B,       \
                               int64_t seqLen, int64_t C, int64_t V, bool accumulate __VA_ARGS__);                     \
  /* dwpe[t] (= or += when accumulate) the sum over b of dout[b, t], in b order, for t < T; rows */                    \
  /* T <= t < Tmax are zeroed or left alone. */                                                                        \
  template <typename T>                                                                                                \
  void embeddingBackwardPositions(const T* dout, ParamOf<T>* dwpe, int64_t B, int64_t seqLen, int64_t C, int64_t Tmax, \
                                  bool accumulate __VA_ARGS__);

namespace cpu {
MINIDP_EMBEDDING_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_EMBEDDING_DECLARATIONS(, cudaStream_t stream)
/// Bytes of scratch embeddingBackwardTokens needs for n = B * seqLen tokens of a V-row vocabulary: the
/// (token, position) pairs before and after CUB's radix sort, and the sort's temporary storage.
int64_t embeddingBackwardScratchBytes(int64_t n, int64_t V);
}  // namespace cuda

#undef MINIDP_EMBEDDING_DECLARATIONS

}  // namespace minidp::kernels
