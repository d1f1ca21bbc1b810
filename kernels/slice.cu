// The strided block copy (one thread per element, grid-stride), then its launcher.
#include "kernels/cuda_utils.cuh"
#include "kernels/slice.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <typename T>
__global__ void copyBlocksKernel(const T* src, int64_t srcStride, T* dst, int64_t dstStride, int64_t n,
                                 int64_t blockLen) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / blockLen, j = i % blockLen;
    dst[o * dstStride + j] = src[o * srcStride + j];
  }
}

}  // namespace

template <typename T>
void copyBlocks(const T* src, int64_t srcStride, T* dst, int64_t dstStride, int64_t blocks, int64_t blockLen,
                cudaStream_t stream) {
  const int64_t n = blocks * blockLen;
  if (n == 0) return;
  copyBlocksKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(src, srcStride, dst, dstStride, n, blockLen);
  CUDA_CHECK_LAUNCH();
}

template void copyBlocks<float>(const float*, int64_t, float*, int64_t, int64_t, int64_t, cudaStream_t);
template void copyBlocks<double>(const double*, int64_t, double*, int64_t, int64_t, int64_t, cudaStream_t);
template void copyBlocks<bf16>(const bf16*, int64_t, bf16*, int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace minidp::kernels::cuda
