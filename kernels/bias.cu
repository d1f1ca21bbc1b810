// Bias kernels, then their launchers.
#include <algorithm>

#include "kernels/bias.h"
#include "kernels/cuda_check.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;
// sumColumns: a block owns kColumns adjacent columns (one warp reads them coalesced from a row) and
// kRowLanes threads stride over the rows; the kRowLanes partial sums are then added in lane order.
constexpr int kColumns = 32;
constexpr int kRowLanes = 32;

template <typename T>
__global__ void addBiasKernel(T* y, const T* bias, int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % C];
}

template <typename T>
__global__ void sumColumnsKernel(const T* x, T* out, int64_t N, int64_t C) {
  __shared__ T partial[kRowLanes][kColumns + 1];  // +1: no bank conflicts in the column-wise pass below
  const int64_t c = blockIdx.x * int64_t(kColumns) + threadIdx.x;
  T s = 0;
  if (c < C) {
    for (int64_t r = threadIdx.y; r < N; r += kRowLanes) s += x[r * C + c];
  }
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    T total = 0;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    out[c] = total;
  }
}

}  // namespace

template <typename T>
void addBias(T* y, const T* bias, int64_t N, int64_t C, cudaStream_t stream) {
  const int64_t n = N * C;
  if (n == 0) return;
  addBiasKernel<T><<<std::min(ceilDiv(n, kBlock), 65535u * 4), kBlock, 0, stream>>>(y, bias, n, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void sumColumns(const T* x, T* out, int64_t N, int64_t C, cudaStream_t stream) {
  if (C == 0) return;
  sumColumnsKernel<T><<<ceilDiv(C, kColumns), dim3(kColumns, kRowLanes), 0, stream>>>(x, out, N, C);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                             \
  template void addBias<T>(T*, const T*, int64_t, int64_t, cudaStream_t); \
  template void sumColumns<T>(const T*, T*, int64_t, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
