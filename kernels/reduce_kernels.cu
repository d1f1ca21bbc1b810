// One block sums the whole tensor: each thread a strided partial sum, then a shared-memory tree.
// A single block keeps the order fixed (deterministic); reductions here are scalars for losses.
#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/reduce_kernels.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 1024;

template <typename T>
__global__ void sumAllKernel(const T* x, T* out, int64_t n) {
  __shared__ T partial[kBlock];
  T s = 0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) s += x[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = partial[0];
}

template <typename T>
__global__ void broadcastScalarKernel(const T* scalar, T s, T* out, int64_t n) {
  const T v = scalar[0] * s;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = v;
}

}  // namespace

template <typename T>
void sumAll(const T* x, T* out, int64_t n, cudaStream_t stream) {
  sumAllKernel<T><<<1, kBlock, 0, stream>>>(x, out, n);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void broadcastScalar(const T* scalar, T s, T* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  broadcastScalarKernel<T><<<gridFor(n, 256), 256, 0, stream>>>(scalar, s, out, n);
  CUDA_CHECK_LAUNCH();
}

template void sumAll<float>(const float*, float*, int64_t, cudaStream_t);
template void sumAll<double>(const double*, double*, int64_t, cudaStream_t);
template void broadcastScalar<float>(const float*, float, float*, int64_t, cudaStream_t);
template void broadcastScalar<double>(const double*, double, double*, int64_t, cudaStream_t);

}  // namespace minidp::kernels::cuda
