// LayerNorm kernels, then their launchers. One warp per row for the row statistics and dx; the weight and
// bias gradients are column sums in a fixed order (strided partial sums, then a fixed-order combine), so
// every run gives the same bits.
#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/layernorm.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kTile = 32;         // the column kernel: kTile columns x kTile row strides per block

// Butterfly sum: every lane adds the same pairs (a + b == b + a), so all lanes end with identical bits.
template <typename T>
__device__ T warpSum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__global__ void layerNormForwardKernel(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd,
                                       int64_t N, int64_t C, T eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + row * C;
  T sum = 0;
  for (int64_t c = lane; c < C; c += 32) sum += xr[c];
  const T m = warpSum(sum) / static_cast<T>(C);
  T sq = 0;  // two passes, as the CPU twin: no cancellation in the variance
  for (int64_t c = lane; c < C; c += 32) sq += (xr[c] - m) * (xr[c] - m);
  const T s = T(1) / sqrt(warpSum(sq) / static_cast<T>(C) + eps);
  T* yr = y + row * C;
  for (int64_t c = lane; c < C; c += 32) yr[c] = (xr[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight, one warp per row.
template <typename T>
__global__ void layerNormBackwardInputKernel(const T* dy, const T* x, const T* weight, const T* mean,
                                             const T* rstd, T* dx, int64_t N, int64_t C) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + row * C;
  const T* dyr = dy + row * C;
  const T m = mean[row], s = rstd[row];
  T sumG = 0, sumGx = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const T g = dyr[c] * weight[c];
    sumG += g;
    sumGx += g * ((xr[c] - m) * s);
  }
  const T meanG = warpSum(sumG) / static_cast<T>(C), meanGx = warpSum(sumGx) / static_cast<T>(C);
  T* dxr = dx + row * C;
  for (int64_t c = lane; c < C; c += 32) dxr[c] = s * (dyr[c] * weight[c] - meanG - ((xr[c] - m) * s) * meanGx);
}

// Block (kTile, kTile), grid ceil(C / kTile): thread (cx, ry) sums rows ry, ry + kTile, ... of column
// blockIdx.x * kTile + cx (coalesced along cx); row ry == 0 then adds the kTile partials in ry order.
template <typename T>
__global__ void layerNormBackwardParamsKernel(const T* dy, const T* x, const T* mean, const T* rstd, T* dweight,
                                              T* dbias, int64_t N, int64_t C) {
  __shared__ T partialW[kTile][kTile + 1];
  __shared__ T partialB[kTile][kTile + 1];
  const int cx = threadIdx.x, ry = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * kTile + cx;
  T w = 0, b = 0;
  if (c < C) {
    for (int64_t n = ry; n < N; n += kTile) {
      const T g = dy[n * C + c];
      w += g * ((x[n * C + c] - mean[n]) * rstd[n]);
      b += g;
    }
  }
  partialW[ry][cx] = w;
  partialB[ry][cx] = b;
  __syncthreads();
  if (ry == 0 && c < C) {
    T sw = 0, sb = 0;
    for (int r = 0; r < kTile; ++r) {
      sw += partialW[r][cx];
      sb += partialB[r][cx];
    }
    dweight[c] = sw;
    dbias[c] = sb;
  }
}

}  // namespace

template <typename T>
void layerNormForward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t N, int64_t C,
                      T eps, cudaStream_t stream) {
  if (N == 0) return;
  layerNormForwardKernel<T><<<ceilDiv(N, kRowsPerBlock), kRowsPerBlock * 32, 0, stream>>>(x, weight, bias, y,
                                                                                         mean, rstd, N, C, eps);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void layerNormBackward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                       T* dweight, T* dbias, int64_t N, int64_t C, cudaStream_t stream) {
  if (C == 0) return;
  if (N > 0) {
    layerNormBackwardInputKernel<T><<<ceilDiv(N, kRowsPerBlock), kRowsPerBlock * 32, 0, stream>>>(
        dy, x, weight, mean, rstd, dx, N, C);
    CUDA_CHECK_LAUNCH();
  }
  layerNormBackwardParamsKernel<T><<<ceilDiv(C, kTile), dim3(kTile, kTile), 0, stream>>>(dy, x, mean, rstd,
                                                                                        dweight, dbias, N, C);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                            \
  template void layerNormForward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, T,      \
                                    cudaStream_t);                                                       \
  template void layerNormBackward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, \
                                     int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
