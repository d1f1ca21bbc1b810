// Where the attention kernels read q, k and v and write their gradients: AttentionOperands and
// AttentionGradients (base pointers and row strides, grouped key/value heads), and the two for the packed
// (B, T, 3C) qkv. Shared by the flash attention kernels (kernels/flash_attention.h) and the Hopper ones
// (kernels/flash_attention_sm90.h).
#pragma once

#include <cstdint>

namespace minidp::kernels {

/// Where the kernels read q, k and v: each points at head 0 of token 0 of batch 0, token t of batch b is
/// (b T + t) rows of its stride (elements) further, and head j of a row is j d elements into it. Query
/// head h reads key/value head h / group. CUDA: pointers and strides (in bytes) 16-byte aligned.
template <typename T>
struct AttentionOperands {
  const T* q;
  const T* k;
  const T* v;
  int64_t qStride, kStride, vStride;
  int64_t group;  // G = H / Hkv
};

/// Where backward writes dq (H query heads of d in each row) and dk, dv (H / G key/value heads of d in each
/// row), rows as in AttentionOperands.
template <typename T>
struct AttentionGradients {
  T* dq;
  T* dk;
  T* dv;
  int64_t dqStride, dkStride, dvStride;
};

/// q, k and v of the (B, T, 3C) qkv, C = H d, read in place: rows 3C apart, no grouping.
template <typename T>
AttentionOperands<T> packedOperands(const T* qkv, int64_t H, int64_t d) {
  const int64_t C = H * d;
  return {qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, 3 * C, 1};
}

/// dq, dk and dv written into the (B, T, 3C) dqkv.
template <typename T>
AttentionGradients<T> packedGradients(T* dqkv, int64_t H, int64_t d) {
  const int64_t C = H * d;
  return {dqkv, dqkv + C, dqkv + 2 * C, 3 * C, 3 * C, 3 * C};
}

}  // namespace minidp::kernels
