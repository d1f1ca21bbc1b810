// Dtype conversion kernel (grid-stride loop), then its launcher.
#include "kernels/accum.h"
#include "kernels/convert.h"
#include "kernels/cuda_utils.cuh"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <typename From, typename To>
__global__ void convertKernel(const From* x, To* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = convertValue<To>(x[i]);
}

}  // namespace

template <typename From, typename To>
void convert(const From* x, To* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  convertKernel<From, To><<<gridFor(n, kBlock), kBlock, 0, stream>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(From, To) template void convert<From, To>(const From*, To*, int64_t, cudaStream_t);
MINIDP_FOR_EACH_CONVERSION(MINIDP_INSTANTIATE)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
