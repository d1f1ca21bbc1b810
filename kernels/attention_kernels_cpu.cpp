// CPU twins of kernels/attention_kernels.cu.
#include <algorithm>
#include <cmath>

#include "kernels/attention_kernels.h"

namespace minidp::kernels::cpu {

namespace {
// Calls f(token-layout offset, head-layout offset) for every element of the (B, H, T, d) head layout.
template <typename F>
void forEachHeadElement(int64_t B, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride, F f) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < seqLen; ++t) {
        const int64_t tokenRow = (b * seqLen + t) * rowStride + h * d;
        const int64_t headRow = ((b * H + h) * seqLen + t) * d;
        for (int64_t j = 0; j < d; ++j) f(tokenRow + j, headRow + j);
      }
    }
  }
}
}  // namespace

template <typename T>
void splitHeads(const T* x, T* out, int64_t B, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride) {
  forEachHeadElement(B, seqLen, H, d, rowStride, [&](int64_t tok, int64_t head) { out[head] = x[tok]; });
}

template <typename T>
void mergeHeads(const T* in, T* x, int64_t B, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride) {
  forEachHeadElement(B, seqLen, H, d, rowStride, [&](int64_t tok, int64_t head) { x[tok] = in[head]; });
}

template <typename T>
void causalSoftmaxForward(const T* scores, T* probs, int64_t matrices, int64_t seqLen) {
  for (int64_t r = 0; r < matrices * seqLen; ++r) {
    const int64_t i = r % seqLen;  // query position: keys 0..i are visible
    const T* s = scores + r * seqLen;
    T* p = probs + r * seqLen;
    T maxScore = s[0];
    for (int64_t j = 1; j <= i; ++j) maxScore = std::max(maxScore, s[j]);
    T sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      p[j] = std::exp(s[j] - maxScore);
      sum += p[j];
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j <= i; ++j) p[j] *= inv;
    std::fill(p + i + 1, p + seqLen, T(0));
  }
}

template <typename T>
void causalSoftmaxBackward(const T* probs, const T* dprobs, T* dscores, int64_t matrices, int64_t seqLen) {
  for (int64_t r = 0; r < matrices * seqLen; ++r) {
    const int64_t i = r % seqLen;
    const T* p = probs + r * seqLen;
    const T* dp = dprobs + r * seqLen;
    T* ds = dscores + r * seqLen;
    T dot = 0;
    for (int64_t j = 0; j <= i; ++j) dot += p[j] * dp[j];
    for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (dp[j] - dot);
    std::fill(ds + i + 1, ds + seqLen, T(0));
  }
}

#define MINIDP_INSTANTIATE(T)                                                             \
  template void splitHeads<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t); \
  template void mergeHeads<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t); \
  template void causalSoftmaxForward<T>(const T*, T*, int64_t, int64_t);                  \
  template void causalSoftmaxBackward<T>(const T*, const T*, T*, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
