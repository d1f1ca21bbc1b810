// Tiled transpose through shared memory, so that both the reads and the writes are coalesced.
#include <algorithm>

#include "base/bf16.h"
#include "base/cuda_check.h"
#include "kernels/transpose.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kTile = 32;
constexpr int kRows = 8;  // a block is kTile x kRows threads; each thread moves kTile / kRows elements

template <typename T>
__global__ void transposeKernel(const T* x, T* y, int64_t batch, int64_t M, int64_t N) {
  __shared__ T tile[kTile][kTile + 1];                            // +1: reading a column does not hit one bank 32 times
  const int64_t col = blockIdx.x * int64_t(kTile) + threadIdx.x;  // of x
  const int64_t outCol = blockIdx.y * int64_t(kTile) + threadIdx.x;  // of y
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const T* xb = x + b * M * N;  // (M, N)
    T* yb = y + b * M * N;        // (N, M)
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int64_t row = blockIdx.y * int64_t(kTile) + i;
      if (row < M && col < N) tile[i][threadIdx.x] = xb[row * N + col];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int64_t outRow = blockIdx.x * int64_t(kTile) + i;
      if (outRow < N && outCol < M) yb[outRow * M + outCol] = tile[threadIdx.x][i];
    }
    __syncthreads();  // the tile is refilled for the next batch item
  }
}

}  // namespace

template <typename T>
void transpose(const T* x, T* y, int64_t batch, int64_t M, int64_t N, cudaStream_t stream) {
  if (batch == 0 || M == 0 || N == 0) return;
  MINIDP_CHECK(ceilDiv(M, kTile) <= 65535u, "transpose: " << M << " rows exceed the grid");
  const dim3 grid(ceilDiv(N, kTile), ceilDiv(M, kTile), static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  transposeKernel<T><<<grid, dim3(kTile, kRows), 0, stream>>>(x, y, batch, M, N);
  CUDA_CHECK_LAUNCH();
}

template void transpose<float>(const float*, float*, int64_t, int64_t, int64_t, cudaStream_t);
template void transpose<double>(const double*, double*, int64_t, int64_t, int64_t, cudaStream_t);
template void transpose<bf16>(const bf16*, bf16*, int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace minidp::kernels::cuda
