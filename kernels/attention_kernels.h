// The pieces of causal self-attention that are not GEMMs: moving heads between the token layout
// (B, T, ..., H*d, ...) and the head layout (B, H, T, d), and the causal softmax over (rows of) T x T
// score matrices. CPU twins share the signatures, minus the stream. Instantiated for float and double.
#pragma once

#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_ATTENTION_DECLARATIONS(...)                                                                             \
  /* out[b, h, t, j] = x[(b * T + t) * rowStride + h * d + j]: x holds B*T rows of rowStride elements, */              \
  /* of which this reads the H*d starting at x (pass qkv + C for k of a (B, T, 3C) qkv); out (B, H, T, d). */          \
  template <typename T>                                                                                                \
  void splitHeads(const T* x, T* out, int64_t B, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride __VA_ARGS__); \
  /* The inverse: x[(b * T + t) * rowStride + h * d + j] = in[b, h, t, j]; other elements untouched. */                \
  template <typename T>                                                                                                \
  void mergeHeads(const T* in, T* x, int64_t B, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride __VA_ARGS__);  \
  /* probs[m, i, j] = softmax over j <= i of scores[m, i, :] (max-subtracted), exactly 0 for j > i; */                 \
  /* scores, probs (matrices, T, T); probs may equal scores (in place). */                                             \
  template <typename T>                                                                                                \
  void causalSoftmaxForward(const T* scores, T* probs, int64_t matrices, int64_t seqLen __VA_ARGS__);                  \
  /* dscores = probs * (dprobs - rowsum(dprobs * probs)), 0 above the diagonal; all (matrices, T, T); */               \
  /* dscores may equal dprobs (in place). */                                                                           \
  template <typename T>                                                                                                \
  void causalSoftmaxBackward(const T* probs, const T* dprobs, T* dscores, int64_t matrices,                            \
                             int64_t seqLen __VA_ARGS__);

namespace cpu {
MINIDP_ATTENTION_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_ATTENTION_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_ATTENTION_DECLARATIONS

}  // namespace minidp::kernels
