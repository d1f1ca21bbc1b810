// Row gather and scatter (grid-stride over the n x C elements of the packed side), then their launchers.
#include "kernels/cuda_utils.cuh"
#include "kernels/rows.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// Scatter: two threads writing one row (a duplicated id) write the same values.
template <typename T, bool kGather>
__global__ void copyRowsKernel(const T* src, const int32_t* ids, int64_t n, int64_t C, T* dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i / C, c = i % C, row = ids[k];
    if (kGather) {
      dst[i] = src[row * C + c];
    } else {
      dst[row * C + c] = src[i];
    }
  }
}

}  // namespace

template <typename T>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, T* packed, cudaStream_t stream) {
  if (n * C == 0) return;
  copyRowsKernel<T, true><<<gridFor(n * C, kBlock), kBlock, 0, stream>>>(grad, ids, n, C, packed);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void scatterRows(const T* packed, const int32_t* ids, int64_t n, int64_t C, T* grad, cudaStream_t stream) {
  if (n * C == 0) return;
  copyRowsKernel<T, false><<<gridFor(n * C, kBlock), kBlock, 0, stream>>>(packed, ids, n, C, grad);
  CUDA_CHECK_LAUNCH();
}

template void gatherRows<float>(const float*, const int32_t*, int64_t, int64_t, float*, cudaStream_t);
template void gatherRows<double>(const double*, const int32_t*, int64_t, int64_t, double*, cudaStream_t);
template void scatterRows<float>(const float*, const int32_t*, int64_t, int64_t, float*, cudaStream_t);
template void scatterRows<double>(const double*, const int32_t*, int64_t, int64_t, double*, cudaStream_t);

}  // namespace minidp::kernels::cuda
