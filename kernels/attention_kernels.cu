// Attention layout and softmax kernels, then their launchers. The softmax runs one warp per score row;
// its reductions are warp butterflies, so the result is the same bits every run.
#include "kernels/attention_kernels.h"
#include "kernels/cuda_utils.cuh"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kRowsPerBlock = kBlock / 32;  // one warp per score row

// Offset in the token layout (rows of rowStride) of element i of the (B, H, T, d) head layout.
__device__ int64_t tokenOffset(int64_t i, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride) {
  const int64_t j = i % d, t = (i / d) % seqLen, h = (i / (d * seqLen)) % H, b = i / (d * seqLen * H);
  return (b * seqLen + t) * rowStride + h * d + j;
}

// toHeads: out[i] = x[tokenOffset(i)]; otherwise x[tokenOffset(i)] = out[i]. Coalesced on the head side.
template <typename T>
__global__ void moveHeadsKernel(const T* src, T* dst, bool toHeads, int64_t n, int64_t seqLen, int64_t H, int64_t d,
                                int64_t rowStride) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tok = tokenOffset(i, seqLen, H, d, rowStride);
    if (toHeads) {
      dst[i] = src[tok];
    } else {
      dst[tok] = src[i];
    }
  }
}

template <typename T>
void launchMoveHeads(const T* src, T* dst, bool toHeads, int64_t B, int64_t seqLen, int64_t H, int64_t d,
                     int64_t rowStride, cudaStream_t stream) {
  const int64_t n = B * H * seqLen * d;
  if (n == 0) return;
  moveHeadsKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(src, dst, toHeads, n, seqLen, H, d, rowStride);
  CUDA_CHECK_LAUNCH();
}

// In place is safe: each lane writes only elements it alone read, after the warp-wide reductions.
template <typename T>
__global__ void causalSoftmaxForwardKernel(const T* scores, T* probs, int64_t rows, int64_t seqLen) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t i = row % seqLen;  // query position: keys 0..i are visible
  const T* s = scores + row * seqLen;
  T* p = probs + row * seqLen;
  T maxScore = s[0];
  for (int64_t j = lane; j <= i; j += 32) maxScore = s[j] > maxScore ? s[j] : maxScore;
  maxScore = warpMax(maxScore);
  T sum = 0;
  for (int64_t j = lane; j <= i; j += 32) sum += exp(s[j] - maxScore);
  const T inv = T(1) / warpSum(sum);
  for (int64_t j = lane; j < seqLen; j += 32) p[j] = j <= i ? exp(s[j] - maxScore) * inv : T(0);
}

template <typename T>
__global__ void causalSoftmaxBackwardKernel(const T* probs, const T* dprobs, T* dscores, int64_t rows, int64_t seqLen) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t i = row % seqLen;
  const T* p = probs + row * seqLen;
  const T* dp = dprobs + row * seqLen;
  T* ds = dscores + row * seqLen;
  T dot = 0;
  for (int64_t j = lane; j <= i; j += 32) dot += p[j] * dp[j];
  dot = warpSum(dot);
  for (int64_t j = lane; j < seqLen; j += 32) ds[j] = j <= i ? p[j] * (dp[j] - dot) : T(0);
}

}  // namespace

template <typename T>
void splitHeads(const T* x, T* out, int64_t B, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride,
                cudaStream_t stream) {
  launchMoveHeads(x, out, true, B, seqLen, H, d, rowStride, stream);
}

template <typename T>
void mergeHeads(const T* in, T* x, int64_t B, int64_t seqLen, int64_t H, int64_t d, int64_t rowStride,
                cudaStream_t stream) {
  launchMoveHeads(in, x, false, B, seqLen, H, d, rowStride, stream);
}

template <typename T>
void causalSoftmaxForward(const T* scores, T* probs, int64_t matrices, int64_t seqLen, cudaStream_t stream) {
  const int64_t rows = matrices * seqLen;
  if (rows == 0) return;
  causalSoftmaxForwardKernel<T><<<ceilDiv(rows, kRowsPerBlock), kBlock, 0, stream>>>(scores, probs, rows, seqLen);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void causalSoftmaxBackward(const T* probs, const T* dprobs, T* dscores, int64_t matrices, int64_t seqLen,
                           cudaStream_t stream) {
  const int64_t rows = matrices * seqLen;
  if (rows == 0) return;
  causalSoftmaxBackwardKernel<T>
      <<<ceilDiv(rows, kRowsPerBlock), kBlock, 0, stream>>>(probs, dprobs, dscores, rows, seqLen);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                           \
  template void splitHeads<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, cudaStream_t); \
  template void mergeHeads<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, cudaStream_t); \
  template void causalSoftmaxForward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);                  \
  template void causalSoftmaxBackward<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
