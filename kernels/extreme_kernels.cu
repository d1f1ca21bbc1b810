// Max and min along a dimension: one thread per output entry scans its D entries (adjacent threads read
// adjacent columns when inner > 1); the backward writes every dx entry, the gradient or zero.
#include "kernels/cuda_utils.cuh"
#include "kernels/extreme_kernels.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <typename T>
__global__ void extremeKernel(const T* x, T* values, int32_t* indices, int64_t outer, int64_t D, int64_t inner,
                              bool largest) {
  const int64_t n = outer * inner;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = j / inner, i = j % inner;
    const T* column = x + o * D * inner + i;  // stride inner
    int32_t at = 0;
    auto best = toAccum(column[0]);
    for (int64_t d = 1; d < D; ++d) {
      const auto v = toAccum(column[d * inner]);
      if (replacesExtreme(v, best, largest)) {
        best = v;
        at = static_cast<int32_t>(d);
      }
    }
    indices[j] = at;
    if (values) values[j] = column[at * inner];
  }
}

template <typename T>
__global__ void scatterKernel(const T* g, const int32_t* indices, T* dx, int64_t outer, int64_t D, int64_t inner) {
  const int64_t n = outer * D * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k % inner, d = (k / inner) % D, o = k / (inner * D);
    const int64_t j = o * inner + i;
    dx[k] = indices[j] == d ? g[j] : fromAccum<T>(0.0f);
  }
}

}  // namespace

template <typename T>
void extremeAlongDim(const T* x, T* values, int32_t* indices, int64_t outer, int64_t D, int64_t inner, bool largest,
                     cudaStream_t stream) {
  if (outer * inner == 0) return;
  extremeKernel<T><<<gridFor(outer * inner, kBlock), kBlock, 0, stream>>>(x, values, indices, outer, D, inner, largest);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void scatterAlongDim(const T* g, const int32_t* indices, T* dx, int64_t outer, int64_t D, int64_t inner,
                     cudaStream_t stream) {
  if (outer * D * inner == 0) return;
  scatterKernel<T><<<gridFor(outer * D * inner, kBlock), kBlock, 0, stream>>>(g, indices, dx, outer, D, inner);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                              \
  template void extremeAlongDim<T>(const T*, T*, int32_t*, int64_t, int64_t, int64_t, bool, cudaStream_t); \
  template void scatterAlongDim<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
