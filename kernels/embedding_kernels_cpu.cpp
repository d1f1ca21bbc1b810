// CPU twins of kernels/embedding_kernels.cu (float and double; bf16 is CUDA-only).
#include <algorithm>

#include "base/check.h"
#include "kernels/embedding_kernels.h"

namespace minidp::kernels::cpu {

namespace {
void checkToken(int32_t token, int64_t b, int64_t t, int64_t V) {
  MINIDP_CHECK(token >= 0 && token < V, "embedding: token id " << token << " at (batch " << b << ", position " << t
                                                               << ") is outside the vocabulary [0, " << V << ")");
}
}  // namespace

template <typename T>
void embeddingForward(const ParamOf<T>* wte, const ParamOf<T>* wpe, const int32_t* tokens, T* out, int64_t B,
                      int64_t seqLen, int64_t C, int64_t V) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < seqLen; ++t) {
      const int32_t token = tokens[b * seqLen + t];
      checkToken(token, b, t, V);
      const T* e = wte + token * C;
      const T* p = wpe + t * C;
      T* o = out + (b * seqLen + t) * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

template <typename T>
void embeddingBackwardTokens(const T* dout, const int32_t* tokens, ParamOf<T>* dwte, void* /*scratch*/, int64_t B,
                             int64_t seqLen, int64_t C, int64_t V, bool accumulate) {
  for (int64_t i = 0; i < B * seqLen; ++i) checkToken(tokens[i], i / seqLen, i % seqLen, V);
  if (!accumulate) std::fill(dwte, dwte + V * C, T(0));
  for (int64_t i = 0; i < B * seqLen; ++i) {
    T* row = dwte + tokens[i] * C;
    const T* g = dout + i * C;
    for (int64_t c = 0; c < C; ++c) row[c] += g[c];
  }
}

template <typename T>
void embeddingBackwardPositions(const T* dout, ParamOf<T>* dwpe, int64_t B, int64_t seqLen, int64_t C, int64_t Tmax,
                                bool accumulate) {
  if (!accumulate) std::fill(dwpe, dwpe + Tmax * C, T(0));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < seqLen * C; ++i) dwpe[i] += dout[b * seqLen * C + i];
  }
}

#define MINIDP_INSTANTIATE(T)                                                                                       \
  template void embeddingForward<T>(const T*, const T*, const int32_t*, T*, int64_t, int64_t, int64_t, int64_t);    \
  template void embeddingBackwardTokens<T>(const T*, const int32_t*, T*, void*, int64_t, int64_t, int64_t, int64_t, \
                                           bool);                                                                   \
  template void embeddingBackwardPositions<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, bool);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
