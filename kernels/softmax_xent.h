// Fused, numerically stable softmax cross-entropy over the rows of logits (N, V).
#pragma once

#include <cstdint>

#include "kernels/stream.h"

namespace minidp::kernels {

#define MINIDP_SOFTMAX_XENT_DECLARATIONS(...)                                                             \
  /* Per row r: lse[r] = logsumexp(logits[r, :]), loss[r] = lse[r] - logits[r, targets[r]]. */            \
  template <typename T>                                                                                   \
  void softmaxXentForward(const T* logits, const int32_t* targets, T* loss, T* lse, int64_t N,            \
                          int64_t V __VA_ARGS__);                                                         \
  /* dlogits[r, j] = (exp(logits[r, j] - lse[r]) - (j == targets[r])) * g[0] / N, where g points to the   \
     scalar upstream gradient in the same memory space as logits (read there, never copied). */           \
  template <typename T>                                                                                   \
  void softmaxXentBackward(const T* logits, const int32_t* targets, const T* lse, const T* g, T* dlogits, \
                           int64_t N, int64_t V __VA_ARGS__);

namespace cpu {
/// Throws when a target is outside [0, V).
MINIDP_SOFTMAX_XENT_DECLARATIONS()
}  // namespace cpu

namespace cuda {
/// One block per row. A target outside [0, V) cannot throw without a host sync: it makes that row's
/// loss and gradient NaN instead, which the logged loss then shows.
MINIDP_SOFTMAX_XENT_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_SOFTMAX_XENT_DECLARATIONS

}  // namespace minidp::kernels
