// Fused, numerically stable softmax cross-entropy over the rows of logits (N, V), stored with rows ld >= V
// elements apart (ld = V: packed; a padded ld, e.g. V rounded up to 64, aligns every row; the columns
// past V are neither read nor written). Logits T are float,
// double or (CUDA only) bf16; the loss, the saved logsumexp and the upstream gradient are AccumOf<T>
// (fp32 for bf16 logits). CPU twins share the signatures, minus the stream.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_SOFTMAX_XENT_DECLARATIONS(...)                                                                      \
  /* Per row r: lse[r] = logsumexp(logits[r, :]), loss[r] = lse[r] - logits[r, targets[r]]. */                     \
  template <typename T>                                                                                            \
  void softmaxXentForward(const T* logits, const int32_t* targets, AccumOf<T>* loss, AccumOf<T>* lse, int64_t N,   \
                          int64_t V, int64_t ld __VA_ARGS__);                                                      \
  /* dlogits[r, j] = (exp(logits[r, j] - lse[r]) - (j == targets[r])) * g[0] / N, where g points to the            \
     scalar upstream gradient in the same memory space as logits (read there, never copied). dlogits may           \
     be logits itself: each element is read before it is overwritten (the in-place classifier backward); both      \
     have row stride ld. */                                                                                        \
  template <typename T>                                                                                            \
  void softmaxXentBackward(const T* logits, const int32_t* targets, const AccumOf<T>* lse, const AccumOf<T>* g,    \
                           T* dlogits, int64_t N, int64_t V, int64_t ld __VA_ARGS__);                              \
  /* softmaxXentForward, then over the logits the gradient of the mean loss for an upstream gradient of 1:         \
     logits[r, j] becomes (exp(logits[r, j] - lse[r]) - (j == targets[r])) / N, the bits softmaxXentBackward       \
     gives with g[0] = 1. The classifier's forward when backward follows: one read and one write of the logits     \
     (CUDA rows up to 104 KiB stay in shared memory in between). */                                                \
  template <typename T>                                                                                            \
  void softmaxXentForwardGradient(T* logits, const int32_t* targets, AccumOf<T>* loss, AccumOf<T>* lse, int64_t N, \
                                  int64_t V, int64_t ld __VA_ARGS__);                                              \
  /* dlogits *= g[0] (g in dlogits' memory space, read there), nothing written when g[0] is 1: the upstream        \
     gradient applied to what softmaxXentForwardGradient left. */                                                  \
  template <typename T>                                                                                            \
  void softmaxXentScaleGradient(T* dlogits, const AccumOf<T>* g, int64_t N, int64_t V, int64_t ld __VA_ARGS__);

namespace cpu {
/// Throws when a target is outside [0, V).
MINIDP_SOFTMAX_XENT_DECLARATIONS()
}  // namespace cpu

namespace cuda {
/// One block per row, one pass over the logits in forward (online max and sum), 16-byte loads. A target
/// outside [0, V) cannot throw without a host sync: it makes that row's loss and gradient NaN instead,
/// which the logged loss then shows.
MINIDP_SOFTMAX_XENT_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_SOFTMAX_XENT_DECLARATIONS

}  // namespace minidp::kernels
