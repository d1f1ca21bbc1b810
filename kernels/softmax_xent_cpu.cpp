// CPU twin of kernels/softmax_xent.cu (float and double; bf16 is CUDA-only).
#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/softmax_xent.h"

namespace minidp::kernels::cpu {

namespace {
void checkArguments(const int32_t* targets, int64_t N, int64_t V, int64_t ld) {
  MINIDP_CHECK(V > 0 && ld >= V, "cross-entropy over " << V << " classes in rows of " << ld);
  for (int64_t r = 0; r < N; ++r) {
    MINIDP_CHECK(targets[r] >= 0 && targets[r] < V,
                 "cross-entropy: target " << targets[r] << " of row " << r << " is outside [0, " << V << ")");
  }
}
}  // namespace

template <typename T>
void softmaxXentForward(const T* logits, const int32_t* targets, AccumOf<T>* loss, AccumOf<T>* lse, int64_t N,
                        int64_t V, int64_t ld) {
  checkArguments(targets, N, V, ld);
  for (int64_t r = 0; r < N; ++r) {
    const T* x = logits + r * ld;  // (V)
    const T maxValue = *std::max_element(x, x + V);
    T sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - maxValue);
    lse[r] = maxValue + std::log(sum);
    loss[r] = lse[r] - x[targets[r]];
  }
}

template <typename T>
void softmaxXentBackward(const T* logits, const int32_t* targets, const AccumOf<T>* lse, const AccumOf<T>* g,
                         T* dlogits, int64_t N, int64_t V, int64_t ld) {
  checkArguments(targets, N, V, ld);
  const T scale = g[0] / static_cast<T>(N);
  for (int64_t r = 0; r < N; ++r) {
    const T* x = logits + r * ld;  // (V)
    T* dx = dlogits + r * ld;      // (V), may be x: each element is read before it is written
    for (int64_t j = 0; j < V; ++j) dx[j] = (std::exp(x[j] - lse[r]) - T(j == targets[r])) * scale;
  }
}

template <typename T>
void softmaxXentForwardGradient(T* logits, const int32_t* targets, AccumOf<T>* loss, AccumOf<T>* lse, int64_t N,
                                int64_t V, int64_t ld) {
  softmaxXentForward(logits, targets, loss, lse, N, V, ld);
  const T one = 1;
  softmaxXentBackward(logits, targets, lse, &one, logits, N, V, ld);
}

template <typename T>
void softmaxXentScaleGradient(T* dlogits, const AccumOf<T>* g, int64_t N, int64_t V, int64_t ld) {
  MINIDP_CHECK(V > 0 && ld >= V, "cross-entropy over " << V << " classes in rows of " << ld);
  if (g[0] == T(1)) return;
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < V; ++j) dlogits[r * ld + j] *= g[0];
  }
}

#define MINIDP_INSTANTIATE(T)                                                                                        \
  template void softmaxXentForward<T>(const T*, const int32_t*, T*, T*, int64_t, int64_t, int64_t);                  \
  template void softmaxXentBackward<T>(const T*, const int32_t*, const T*, const T*, T*, int64_t, int64_t, int64_t); \
  template void softmaxXentForwardGradient<T>(T*, const int32_t*, T*, T*, int64_t, int64_t, int64_t);                \
  template void softmaxXentScaleGradient<T>(T*, const T*, int64_t, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
