// Causal flash attention (FlashAttention-2 style): softmax(q k^T / sqrt(d)) v with an online softmax,
// never forming the (B, H, T, T) scores. Reads q, k, v in place through AttentionOperands: three base
// pointers with their own row strides (the (B, T, 3C) qkv of the attention projection, [q | k | v] along
// 3C, or separate q (B, T, H, d) and k, v (B, T, Hkv, d)), query head h reading key/value head h / G
// (grouped-query attention). Writes y (B, T, H d) and the row logsumexp (B, H, T) that backward
// recomputes the probabilities from; backward writes dq per query head and dk, dv per key/value head,
// each the sum over its group's G query heads (accumulated in AccumOf<T>, rounded once). CUDA: float (exact FFMA, the
// reference path) and bf16 (tensor cores, fp32 accumulation and softmax statistics), head dims of
// flashAttentionSupportsHeadDim, any sequence length; deterministic. CPU twins: float and double, any head dim.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"
#include "kernels/attention_operands.h"  // AttentionOperands, AttentionGradients

namespace minidp::kernels {

/// Head dims the CUDA kernels are compiled for, in float and in bf16 (the CPU twins take any).
inline bool flashAttentionSupportsHeadDim(int64_t d) {
  return d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}

/// The head dims of flashAttentionSupportsHeadDim, as a list for messages: "32, 64, 80, 96, 128 or 256".
inline const char* flashAttentionHeadDims() { return "32, 64, 80, 96, 128 or 256"; }

#define MINIDP_FLASH_ATTENTION_DECLARATIONS(...)                                                                     \
  /* q, k, v as `in` says, H query heads of d; out (B, T, H d); lse (B, H, T): logsumexp of the scaled */            \
  /* causal scores of each query row, in natural-log units. */                                                       \
  template <typename T>                                                                                              \
  void flashAttentionForward(AttentionOperands<T> in, T* out, AccumOf<T>* lse, int64_t B, int64_t seqLen, int64_t H, \
                             int64_t d __VA_ARGS__);                                                                 \
  /* The rows of `grads` (B T rows of H or H / G heads), fully written, from dout and out (B, T, H d), `in` and */   \
  /* lse of the forward; rowDot (B, H, T) is scratch for D = rowsum(dout * out). Deterministic: no atomics. */       \
  template <typename T>                                                                                              \
  void flashAttentionBackward(const T* dout, AttentionOperands<T> in, const T* out, const AccumOf<T>* lse,           \
                              AccumOf<T>* rowDot, AttentionGradients<T> grads, int64_t B, int64_t seqLen, int64_t H, \
                              int64_t d __VA_ARGS__);

namespace cpu {
MINIDP_FLASH_ATTENTION_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_FLASH_ATTENTION_DECLARATIONS(, cudaStream_t stream)
/// Bytes of scratch the backward below can use at this shape, 0 where it uses none: bf16 at head dims 80,
/// 96 and 128 (at 64 and below recomputing was faster), while B H (T/64)(T/64 + 1)/2 tiles of 64 x 64 bf16 take at most
/// 1 GiB, and not where the attention mode gives the backward to the Hopper kernel (kernels/flash_attention_sm90.h).
/// With it, the key pass stores each score gradient dS it forms and the query pass reads them back instead of
/// recomputing S, P and dP. A size taken under one mode is safe to pass under another.
template <typename T>
size_t flashAttentionBackwardScratchBytes(int64_t B, int64_t seqLen, int64_t H, int64_t d);
/// rowDot (B, H, T) = rowsum(dout * out) over each head's d columns, in fp32: the backward's first step (dout and
/// out (B, T, H d), 16-byte aligned; d of flashAttentionSupportsHeadDim). Exposed for the Hopper backward.
void flashAttentionRowDot(const bf16* dout, const bf16* out, float* rowDot, int64_t B, int64_t seqLen, int64_t H,
                          int64_t d, cudaStream_t stream);
/// flashAttentionBackward with `scratchBytes` of scratch (16-byte aligned; at least
/// flashAttentionBackwardScratchBytes, else an error; null with 0 bytes, or any at a shape that uses none:
/// the recomputing path). Same dk and dv bits either way.
template <typename T>
void flashAttentionBackward(const T* dout, AttentionOperands<T> in, const T* out, const AccumOf<T>* lse,
                            AccumOf<T>* rowDot, AttentionGradients<T> grads, int64_t B, int64_t seqLen, int64_t H,
                            int64_t d, void* scratch, size_t scratchBytes, cudaStream_t stream);
}  // namespace cuda

#undef MINIDP_FLASH_ATTENTION_DECLARATIONS

}  // namespace minidp::kernels
