// The strided block copy (one thread per 16-byte pack where the blocks and strides allow, per element
// otherwise) and the repeated blocks (one thread per written element, grid-stride), then the launchers.
#include "kernels/cuda_utils.cuh"
#include "kernels/slice_kernels.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// V: the unit copied, T or Pack16<T>; lengths and strides in units of V.
template <typename V>
__global__ void copyBlocksKernel(const V* src, int64_t srcStride, V* dst, int64_t dstStride, int64_t n,
                                 int64_t blockLen) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / blockLen, j = i % blockLen;
    dst[o * dstStride + j] = src[o * srcStride + j];
  }
}

// One thread per element of dst: block o of src, whichever of its copies this is.
template <typename T>
__global__ void repeatBlocksKernel(const T* src, T* dst, int64_t n, int64_t repeats, int64_t blockLen) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = src[i / blockLen / repeats * blockLen + i % blockLen];
  }
}

// One thread per element of dst: its copies added in order r = 0, 1, ..., rounded once.
template <typename T>
__global__ void sumRepeatedBlocksKernel(const T* src, T* dst, int64_t n, int64_t repeats, int64_t blockLen) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const T* first = src + i / blockLen * repeats * blockLen + i % blockLen;
    AccumOf<T> sum = 0;
    for (int64_t r = 0; r < repeats; ++r) sum += toAccum(first[r * blockLen]);
    dst[i] = fromAccum<T>(sum);
  }
}

}  // namespace

template <typename T>
void copyBlocks(const T* src, int64_t srcStride, T* dst, int64_t dstStride, int64_t blocks, int64_t blockLen,
                cudaStream_t stream) {
  const int64_t n = blocks * blockLen;
  if (n == 0) return;
  constexpr int P = kPack<T>;
  if (blockLen % P == 0 && srcStride % P == 0 && dstStride % P == 0 && aligned16(src) && aligned16(dst)) {
    using V = Pack16<T>;
    copyBlocksKernel<V><<<gridFor(n / P, kBlock), kBlock, 0, stream>>>(
        reinterpret_cast<const V*>(src), srcStride / P, reinterpret_cast<V*>(dst), dstStride / P, n / P, blockLen / P);
  } else {
    copyBlocksKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(src, srcStride, dst, dstStride, n, blockLen);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void repeatBlocks(const T* src, T* dst, int64_t blocks, int64_t repeats, int64_t blockLen, cudaStream_t stream) {
  const int64_t n = blocks * repeats * blockLen;
  if (n == 0) return;
  repeatBlocksKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(src, dst, n, repeats, blockLen);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void sumRepeatedBlocks(const T* src, T* dst, int64_t blocks, int64_t repeats, int64_t blockLen, cudaStream_t stream) {
  const int64_t n = blocks * blockLen;
  if (n == 0) return;
  sumRepeatedBlocksKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(src, dst, n, repeats, blockLen);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_SLICE_INSTANTIATE(T)                                                            \
  template void copyBlocks<T>(const T*, int64_t, T*, int64_t, int64_t, int64_t, cudaStream_t); \
  template void repeatBlocks<T>(const T*, T*, int64_t, int64_t, int64_t, cudaStream_t);        \
  template void sumRepeatedBlocks<T>(const T*, T*, int64_t, int64_t, int64_t, cudaStream_t);
MINIDP_SLICE_INSTANTIATE(float)
MINIDP_SLICE_INSTANTIATE(double)
MINIDP_SLICE_INSTANTIATE(bf16)
#undef MINIDP_SLICE_INSTANTIATE

}  // namespace minidp::kernels::cuda
