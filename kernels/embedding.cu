// Embedding kernels, then their launchers. The token gradient is gathered, not scattered: one block owns
// one vocabulary row and adds the matching dout rows in position order, so no atomics are needed and the
// result is bitwise reproducible (and equal to the CPU twin, which adds in the same order).
#include <math_constants.h>

#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/embedding.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;

unsigned gridFor(int64_t n) { return std::min<unsigned>(ceilDiv(n, kBlock), 65535u * 4); }

template <typename T>
__global__ void embeddingForwardKernel(const T* wte, const T* wpe, const int32_t* tokens, T* out,
                                       int64_t n, int64_t seqLen, int64_t C, int64_t V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C, c = i % C;
    const int32_t token = tokens[bt];
    out[i] = token >= 0 && token < V ? wte[token * C + c] + wpe[(bt % seqLen) * C + c] : T(CUDART_NAN);
  }
}

// Grid (V): block v zeroes dwte[v], then walks the n = B*T token ids kBlock at a time. Each warp ballots
// which of its 32 ids equal v; all threads then visit the matches in position order (warp order, then
// lane order) and add dout's row, each thread owning channels c = threadIdx.x (mod kBlock) of row v.
template <typename T>
__global__ void embeddingBackwardTokensKernel(const T* dout, const int32_t* tokens, T* dwte, int64_t n,
                                              int64_t C) {
  __shared__ unsigned matches[kWarps];
  const int32_t v = static_cast<int32_t>(blockIdx.x);
  T* row = dwte + int64_t(v) * C;
  for (int64_t c = threadIdx.x; c < C; c += kBlock) row[c] = T(0);
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t i = start + threadIdx.x;
    const unsigned ballot = __ballot_sync(0xffffffffu, i < n && tokens[i] == v);
    if (threadIdx.x % 32 == 0) matches[threadIdx.x / 32] = ballot;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) {
      for (unsigned bits = matches[w]; bits != 0; bits &= bits - 1) {
        const T* g = dout + (start + w * 32 + __ffs(bits) - 1) * C;
        for (int64_t c = threadIdx.x; c < C; c += kBlock) row[c] += g[c];
      }
    }
    __syncthreads();  // matches[] is rewritten by the next chunk
  }
}

// One thread per element of dwpe (Tmax, C); sums the batch in b order.
template <typename T>
__global__ void embeddingBackwardPositionsKernel(const T* dout, T* dwpe, int64_t B, int64_t seqLen, int64_t C,
                                                 int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T acc = 0;
    if (i < seqLen * C) {
      for (int64_t b = 0; b < B; ++b) acc += dout[b * seqLen * C + i];
    }
    dwpe[i] = acc;
  }
}

}  // namespace

template <typename T>
void embeddingForward(const T* wte, const T* wpe, const int32_t* tokens, T* out, int64_t B, int64_t seqLen,
                      int64_t C, int64_t V, cudaStream_t stream) {
  const int64_t n = B * seqLen * C;
  if (n == 0) return;
  embeddingForwardKernel<T><<<gridFor(n), kBlock, 0, stream>>>(wte, wpe, tokens, out, n, seqLen, C, V);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void embeddingBackwardTokens(const T* dout, const int32_t* tokens, T* dwte, int64_t B, int64_t seqLen,
                             int64_t C, int64_t V, cudaStream_t stream) {
  MINIDP_CHECK(V <= 0x7fffffff, "embedding: vocabulary of " << V << " rows exceeds the grid");
  if (V * C == 0) return;
  embeddingBackwardTokensKernel<T><<<static_cast<unsigned>(V), kBlock, 0, stream>>>(dout, tokens, dwte,
                                                                                    B * seqLen, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void embeddingBackwardPositions(const T* dout, T* dwpe, int64_t B, int64_t seqLen, int64_t C, int64_t Tmax,
                                cudaStream_t stream) {
  const int64_t n = Tmax * C;
  if (n == 0) return;
  embeddingBackwardPositionsKernel<T><<<gridFor(n), kBlock, 0, stream>>>(dout, dwpe, B, seqLen, C, n);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                               \
  template void embeddingForward<T>(const T*, const T*, const int32_t*, T*, int64_t, int64_t, int64_t,     \
                                    int64_t, cudaStream_t);                                                 \
  template void embeddingBackwardTokens<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t, int64_t, \
                                           cudaStream_t);                                                   \
  template void embeddingBackwardPositions<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
