// Causal flash attention (FlashAttention-2 style): softmax(q k^T / sqrt(d)) v with an online softmax,
// never forming the (B, H, T, T) scores. Reads q, k, v in place from the (B, T, 3C) qkv of the attention
// projection ([q | k | v] along 3C, heads (H, d) inside each), writes y (B, T, C) and the row logsumexp
// (B, H, T) that backward recomputes the probabilities from. CUDA: float (exact FFMA, the reference
// path) and bf16 (tensor cores, fp32 accumulation and softmax statistics), head dims of
// flashAttentionSupportsHeadDim, any sequence length; deterministic. CPU twins: float and double, any
// head dim.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

/// Head dims the CUDA kernels are compiled for, in float and in bf16 (the CPU twins take any).
inline bool flashAttentionSupportsHeadDim(int64_t d) {
  return d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}

/// The head dims of flashAttentionSupportsHeadDim, as a list for messages: "32, 64, 80, 96, 128 or 256".
inline const char* flashAttentionHeadDims() { return "32, 64, 80, 96, 128 or 256"; }

#define MINIDP_FLASH_ATTENTION_DECLARATIONS(...)                                                                    \
  /* qkv (B, T, 3C), C = H * d; out (B, T, C); lse (B, H, T): logsumexp of the scaled causal scores of */           \
  /* each query row, in natural-log units. */                                                                       \
  template <typename T>                                                                                             \
  void flashAttentionForward(const T* qkv, T* out, AccumOf<T>* lse, int64_t B, int64_t seqLen, int64_t H,           \
                             int64_t d __VA_ARGS__);                                                                \
  /* dqkv (B, T, 3C), fully written, from dout and out (B, T, C), qkv and lse of the forward; */                    \
  /* rowDot (B, H, T) is scratch for D = rowsum(dout * out). Deterministic: no atomics. */                          \
  template <typename T>                                                                                             \
  void flashAttentionBackward(const T* dout, const T* qkv, const T* out, const AccumOf<T>* lse, AccumOf<T>* rowDot, \
                              T* dqkv, int64_t B, int64_t seqLen, int64_t H, int64_t d __VA_ARGS__);

namespace cpu {
MINIDP_FLASH_ATTENTION_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_FLASH_ATTENTION_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_FLASH_ATTENTION_DECLARATIONS

}  // namespace minidp::kernels
