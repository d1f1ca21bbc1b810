// Strided copies and sums: one thread per output entry, its input offset decoded from the layout. Writes are
// coalesced; reads are wherever the layout puts them (a permute that moves the last dimension reads strided).
#include "kernels/cuda_utils.cuh"
#include "kernels/layout_kernels.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <typename T>
__global__ void gatherStridedKernel(const T* x, T* y, StridedLayout layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[stridedOffset(layout, i)];
}

template <typename T>
__global__ void sumStridedKernel(const T* x, T* y, StridedLayout outer, int64_t n, StridedLayout inner, int64_t m) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const T* base = x + stridedOffset(outer, j);
    AccumOf<T> sum = 0;
    for (int64_t k = 0; k < m; ++k) sum += toAccum(base[stridedOffset(inner, k)]);
    y[j] = fromAccum<T>(sum);
  }
}

}  // namespace

template <typename T>
void gatherStrided(const T* x, T* y, StridedLayout layout, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gatherStridedKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(x, y, layout, n);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void sumStrided(const T* x, T* y, StridedLayout outer, int64_t n, StridedLayout inner, int64_t m, cudaStream_t stream) {
  if (n == 0) return;
  sumStridedKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(x, y, outer, n, inner, m);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                         \
  template void gatherStrided<T>(const T*, T*, StridedLayout, int64_t, cudaStream_t); \
  template void sumStrided<T>(const T*, T*, StridedLayout, int64_t, StridedLayout, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
