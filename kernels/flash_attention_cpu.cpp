// CPU twins of kernels/flash_attention.cu: one query row at a time, the same contract (q, k, v read in
// place through AttentionOperands, query head h reading key/value head h / G, lse saved, probabilities
// recomputed in backward from lse, dk and dv per key/value head summed over its group), no (T, T) buffer.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/flash_attention.h"

namespace minidp::kernels::cpu {

namespace {

// Row t of head h of batch b in a tensor whose rows lie `stride` elements apart, and in a (B, T, C)
// tensor (out, dout).
struct HeadIndex {
  int64_t seqLen, H, d;
  int64_t C() const { return H * d; }
  int64_t row(int64_t stride, int64_t b, int64_t t, int64_t h) const { return (b * seqLen + t) * stride + h * d; }
  int64_t outRow(int64_t b, int64_t t, int64_t h) const { return (b * seqLen + t) * C() + h * d; }
  int64_t lseIndex(int64_t b, int64_t h, int64_t t) const { return (b * H + h) * seqLen + t; }
};

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

}  // namespace

template <typename T>
void flashAttentionForward(AttentionOperands<T> in, T* out, AccumOf<T>* lse, int64_t B, int64_t seqLen, int64_t H,
                           int64_t d) {
  const HeadIndex ix{seqLen, H, d};
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
  std::vector<T> score(seqLen);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvHead = h / in.group;
      for (int64_t i = 0; i < seqLen; ++i) {
        const T* q = in.q + ix.row(in.qStride, b, i, h);
        T top = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          score[j] = dot(q, in.k + ix.row(in.kStride, b, j, kvHead), d) * scale;
          top = std::max(top, score[j]);
        }
        T total = 0;
        for (int64_t j = 0; j <= i; ++j) total += (score[j] = std::exp(score[j] - top));
        T* y = out + ix.outRow(b, i, h);
        std::fill(y, y + d, T(0));
        for (int64_t j = 0; j <= i; ++j) {
          const T* v = in.v + ix.row(in.vStride, b, j, kvHead);
          const T p = score[j] / total;
          for (int64_t c = 0; c < d; ++c) y[c] += p * v[c];
        }
        lse[ix.lseIndex(b, h, i)] = top + std::log(total);
      }
    }
}

template <typename T>
void flashAttentionBackward(const T* dout, AttentionOperands<T> in, const T* out, const AccumOf<T>* lse,
                            AccumOf<T>* rowDot, AttentionGradients<T> grads, int64_t B, int64_t seqLen, int64_t H,
                            int64_t d) {
  const HeadIndex ix{seqLen, H, d};
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < seqLen; ++t)
      for (int64_t h = 0; h < H; ++h) {
        std::fill_n(grads.dq + ix.row(grads.dqStride, b, t, h), d, T(0));
        if (h % in.group != 0) continue;
        std::fill_n(grads.dk + ix.row(grads.dkStride, b, t, h / in.group), d, T(0));
        std::fill_n(grads.dv + ix.row(grads.dvStride, b, t, h / in.group), d, T(0));
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvHead = h / in.group;
      for (int64_t i = 0; i < seqLen; ++i)
        rowDot[ix.lseIndex(b, h, i)] = dot(dout + ix.outRow(b, i, h), out + ix.outRow(b, i, h), d);
      for (int64_t i = 0; i < seqLen; ++i) {
        const T* q = in.q + ix.row(in.qStride, b, i, h);
        const T* dy = dout + ix.outRow(b, i, h);
        T* dq = grads.dq + ix.row(grads.dqStride, b, i, h);
        const T rowLse = lse[ix.lseIndex(b, h, i)], rowD = rowDot[ix.lseIndex(b, h, i)];
        for (int64_t j = 0; j <= i; ++j) {
          const T* k = in.k + ix.row(in.kStride, b, j, kvHead);
          const T* v = in.v + ix.row(in.vStride, b, j, kvHead);
          T* dk = grads.dk + ix.row(grads.dkStride, b, j, kvHead);  // the group's heads summed in order
          T* dv = grads.dv + ix.row(grads.dvStride, b, j, kvHead);
          const T p = std::exp(dot(q, k, d) * scale - rowLse);
          const T dscore = p * (dot(dy, v, d) - rowD) * scale;  // d loss / d (q . k)
          for (int64_t c = 0; c < d; ++c) {
            dq[c] += dscore * k[c];
            dk[c] += dscore * q[c];
            dv[c] += p * dy[c];
          }
        }
      }
    }
}

#define MINIDP_INSTANTIATE(T)                                                                                        \
  template void flashAttentionForward<T>(AttentionOperands<T>, T*, AccumOf<T>*, int64_t, int64_t, int64_t, int64_t); \
  template void flashAttentionBackward<T>(const T*, AttentionOperands<T>, const T*, const AccumOf<T>*, AccumOf<T>*,  \
                                          AttentionGradients<T>, int64_t, int64_t, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cpu
