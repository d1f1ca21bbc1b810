// bf16 wire casts (grid-stride loops), then their launchers. bf16 is layout-compatible with
// __nv_bfloat16 (base/bf16.h).
#include <cuda_bf16.h>

#include "kernels/bf16_cast.h"
#include "kernels/cuda_utils.cuh"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

__global__ void castToBf16Kernel(const float* x, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(x[i]);
  }
}

__global__ void castFromBf16Kernel(const __nv_bfloat16* x, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(x[i]);
  }
}

}  // namespace

void castToBf16(const float* x, bf16* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  castToBf16Kernel<<<gridFor(n, kBlock), kBlock, 0, stream>>>(x, reinterpret_cast<__nv_bfloat16*>(out), n);
  CUDA_CHECK_LAUNCH();
}

void castFromBf16(const bf16* x, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  castFromBf16Kernel<<<gridFor(n, kBlock), kBlock, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(x), out, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minidp::kernels::cuda
