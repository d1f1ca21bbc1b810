// Fused optimizer kernels (grid-stride), then their launchers.
#include <cmath>

#include "kernels/cuda_check.h"
#include "kernels/optimizer_math.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

unsigned gridFor(int64_t n) { return std::min(ceilDiv(n, kBlock), 8192u); }

template <typename T>
__global__ void sgdKernel(T* param, const T* grad, T* buf, int64_t n, SgdParams<T> h) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T unused = 0;
    sgdUpdate(param[i], grad[i], buf ? buf[i] : unused, h);
  }
}

template <typename T>
__global__ void adamwKernel(T* param, const T* grad, T* m, T* v, int64_t n, AdamWParams<T> h, T bias1, T bias2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamwUpdate(param[i], grad[i], m[i], v[i], h, bias1, bias2);
}

}  // namespace

template <typename T>
void sgdStep(T* param, const T* grad, T* momentumBuf, int64_t n, SgdParams<T> h, cudaStream_t stream) {
  if (n == 0) return;
  sgdKernel<T><<<gridFor(n), kBlock, 0, stream>>>(param, grad, momentumBuf, n, h);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void adamwStep(T* param, const T* grad, T* m, T* v, int64_t n, AdamWParams<T> h, cudaStream_t stream) {
  if (n == 0) return;
  // Bias corrections on the host, in the same precision as the CPU twin computes them.
  const T bias1 = T(1) - std::pow(h.beta1, T(h.step)), bias2 = T(1) - std::pow(h.beta2, T(h.step));
  adamwKernel<T><<<gridFor(n), kBlock, 0, stream>>>(param, grad, m, v, n, h, bias1, bias2);
  CUDA_CHECK_LAUNCH();
}

template void sgdStep<float>(float*, const float*, float*, int64_t, SgdParams<float>, cudaStream_t);
template void sgdStep<double>(double*, const double*, double*, int64_t, SgdParams<double>, cudaStream_t);
template void adamwStep<float>(float*, const float*, float*, float*, int64_t, AdamWParams<float>, cudaStream_t);
template void adamwStep<double>(double*, const double*, double*, double*, int64_t, AdamWParams<double>,
                                cudaStream_t);

}  // namespace minidp::kernels::cuda
