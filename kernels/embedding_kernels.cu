// Embedding kernels, then their launchers. The token gradient is segmented, not scattered: the (token,
// position) pairs are sorted by token with CUB's stable radix sort, so each distinct token's positions
// form one segment in position order; one block per segment adds its dout rows onto the token's row in
// that order. No atomics, O(B*T*C) work at any V, and bitwise equal to the CPU twin, which adds in the
// same order.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>

#include "kernels/cuda_utils.cuh"
#include "kernels/embedding_kernels.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kSegmentBlock = 128;  // channels of a segment's rows, P per thread

// out[b, t] over P consecutive channels per step (P divides C, so a step stays within one row).
template <int P, typename T>
__global__ void embeddingForwardKernel(const ParamOf<T>* wte, const ParamOf<T>* wpe, const int32_t* tokens, T* out,
                                       int64_t n, int64_t seqLen, int64_t C, int64_t V) {
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * P; i < n;
       i += int64_t(gridDim.x) * blockDim.x * P) {
    const int64_t bt = i / C, c = i % C;
    const int32_t token = tokens[bt];
    AccumOf<T> e[P], p[P];
    if (token >= 0 && token < V) {
      loadAccum<P>(wte + token * C + c, e);
      loadAccum<P>(wpe + (bt % seqLen) * C + c, p);
#pragma unroll
      for (int j = 0; j < P; ++j) e[j] += p[j];
    } else {
#pragma unroll
      for (int j = 0; j < P; ++j) e[j] = AccumOf<T>(NAN);
    }
    storeAccum<P>(out + i, e);
  }
}

// The sort's input: key = the token, or V for a token outside [0, V) (sorted last, then skipped); value =
// the position. Unsigned keys: the radix sort then only needs the bits of V.
__global__ void sortPairsKernel(const int32_t* tokens, uint32_t* keys, int32_t* positions, int64_t n, int64_t V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t token = tokens[i];
    keys[i] = token >= 0 && token < V ? static_cast<uint32_t>(token) : static_cast<uint32_t>(V);
    positions[i] = static_cast<int32_t>(i);
  }
}

// Block per segment start i (the first sorted pair of its token): adds the segment's dout rows, in position
// order, onto the token's row.
template <int P, typename T>
__global__ void tokenSegmentsKernel(const T* dout, const uint32_t* keys, const int32_t* positions, ParamOf<T>* dwte,
                                    int64_t n, int64_t C, int64_t V, bool accumulate) {
  using A = AccumOf<T>;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const uint32_t v = keys[i];
    if (v >= V || (i > 0 && keys[i - 1] == v)) continue;  // skipped token, or inside a segment
    int64_t end = i + 1;
    while (end < n && keys[end] == v) ++end;
    ParamOf<T>* row = dwte + int64_t(v) * C;
    for (int64_t c = threadIdx.x * P; c < C; c += int64_t(blockDim.x) * P) {
      A acc[P], g[P];
      if (accumulate) {
        loadAccum<P>(row + c, acc);
      } else {
#pragma unroll
        for (int j = 0; j < P; ++j) acc[j] = A(0);
      }
      for (int64_t k = i; k < end; ++k) {
        loadAccum<P>(dout + int64_t(positions[k]) * C + c, g);
#pragma unroll
        for (int j = 0; j < P; ++j) acc[j] += g[j];
      }
      storeAccum<P>(row + c, acc);
    }
  }
}

// One thread per element of dwpe (Tmax, C); sums the batch in b order onto the start value.
template <typename T>
__global__ void embeddingBackwardPositionsKernel(const T* dout, ParamOf<T>* dwpe, int64_t B, int64_t seqLen, int64_t C,
                                                 int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (i >= seqLen * C && accumulate) continue;
    AccumOf<T> acc = accumulate ? static_cast<AccumOf<T>>(dwpe[i]) : AccumOf<T>(0);
    if (i < seqLen * C) {
      for (int64_t b = 0; b < B; ++b) acc += toAccum(dout[b * seqLen * C + i]);
    }
    dwpe[i] = static_cast<ParamOf<T>>(acc);
  }
}

// Bits of the sort keys: enough for the sentinel V.
int keyBits(int64_t V) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= V) ++bits;
  return bits;
}

constexpr int64_t kAlign = 256;
int64_t alignUp(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The scratch carved into the sort's buffers.
struct SortScratch {
  uint32_t* keysIn;
  uint32_t* keysOut;
  int32_t* positionsIn;
  int32_t* positionsOut;
  void* temp;
  size_t tempBytes;
};

size_t sortTempBytes(int64_t n, int64_t V) {
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, keyBits(V)));
  return bytes;
}

SortScratch carve(void* scratch, int64_t n, int64_t V) {
  char* p = static_cast<char*>(scratch);
  const int64_t pairs = alignUp(n * 4);
  return SortScratch{reinterpret_cast<uint32_t*>(p),
                     reinterpret_cast<uint32_t*>(p + pairs),
                     reinterpret_cast<int32_t*>(p + 2 * pairs),
                     reinterpret_cast<int32_t*>(p + 3 * pairs),
                     p + 4 * pairs,
                     sortTempBytes(n, V)};
}

void checkSizes(int64_t n, int64_t V) {
  MINIDP_CHECK(n <= INT_MAX && V < UINT_MAX, "embedding: " << n << " tokens or " << V << " rows exceed the sort");
}

}  // namespace

int64_t embeddingBackwardScratchBytes(int64_t n, int64_t V) {
  checkSizes(n, V);
  return 4 * alignUp(n * 4) + static_cast<int64_t>(sortTempBytes(n, V));
}

template <typename T>
void embeddingForward(const ParamOf<T>* wte, const ParamOf<T>* wpe, const int32_t* tokens, T* out, int64_t B,
                      int64_t seqLen, int64_t C, int64_t V, cudaStream_t stream) {
  const int64_t n = B * seqLen * C;
  if (n == 0) return;
  constexpr int P = kPack<T>;
  if (C % P == 0 && aligned16(wte) && aligned16(wpe) && aligned16(out)) {
    embeddingForwardKernel<P, T><<<gridFor(n / P, kBlock), kBlock, 0, stream>>>(wte, wpe, tokens, out, n, seqLen, C, V);
  } else {
    embeddingForwardKernel<1, T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(wte, wpe, tokens, out, n, seqLen, C, V);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void embeddingBackwardTokens(const T* dout, const int32_t* tokens, ParamOf<T>* dwte, void* scratch, int64_t B,
                             int64_t seqLen, int64_t C, int64_t V, bool accumulate, cudaStream_t stream) {
  const int64_t n = B * seqLen;
  checkSizes(n, V);
  if (V * C == 0) return;
  if (!accumulate) CUDA_CHECK(cudaMemsetAsync(dwte, 0, V * C * sizeof(ParamOf<T>), stream));
  if (n == 0) return;
  SortScratch s = carve(scratch, n, V);
  sortPairsKernel<<<gridFor(n, kBlock), kBlock, 0, stream>>>(tokens, s.keysIn, s.positionsIn, n, V);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp, s.tempBytes, s.keysIn, s.keysOut, s.positionsIn, s.positionsOut,
                                             static_cast<int>(n), 0, keyBits(V), stream));
  constexpr int P = kPack<T>;
  const unsigned grid = gridFor(n, 1);  // a block per token
  if (C % P == 0 && aligned16(dout) && aligned16(dwte)) {
    tokenSegmentsKernel<P, T>
        <<<grid, kSegmentBlock, 0, stream>>>(dout, s.keysOut, s.positionsOut, dwte, n, C, V, accumulate);
  } else {
    tokenSegmentsKernel<1, T>
        <<<grid, kSegmentBlock, 0, stream>>>(dout, s.keysOut, s.positionsOut, dwte, n, C, V, accumulate);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void embeddingBackwardPositions(const T* dout, ParamOf<T>* dwpe, int64_t B, int64_t seqLen, int64_t C, int64_t Tmax,
                                bool accumulate, cudaStream_t stream) {
  const int64_t n = Tmax * C;
  if (n == 0) return;
  embeddingBackwardPositionsKernel<T>
      <<<gridFor(n, kBlock), kBlock, 0, stream>>>(dout, dwpe, B, seqLen, C, n, accumulate);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                                       \
  template void embeddingForward<T>(const ParamOf<T>*, const ParamOf<T>*, const int32_t*, T*, int64_t, int64_t,     \
                                    int64_t, int64_t, cudaStream_t);                                                \
  template void embeddingBackwardTokens<T>(const T*, const int32_t*, ParamOf<T>*, void*, int64_t, int64_t, int64_t, \
                                           int64_t, bool, cudaStream_t);                                            \
  template void embeddingBackwardPositions<T>(const T*, ParamOf<T>*, int64_t, int64_t, int64_t, int64_t, bool,      \
                                              cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
