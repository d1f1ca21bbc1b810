// GPU emulated link: a bounded number of CTAs touch the buffer, then hold their SMs until the modelled
// time has passed (%globaltimer, ns).
#include <algorithm>

#include <cuda_fp16.h>

#include <type_traits>

#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/emulated_link.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 512;

__device__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void emulatedLinkKernel(uint32_t* words, int64_t n, uint64_t durationNs) {
  const uint64_t start = globalTimerNs();
  volatile uint32_t* v = words;  // volatile: the load and the store both happen
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    v[i] = v[i];
  }
  if (threadIdx.x == 0) {
    while (globalTimerNs() - start < durationNs) __nanosleep(1000);
  }
}

template <typename T>
__global__ void sumOfCopiesKernel(T* x, int copies, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, bf16>) {
      x[i] = fromAccum<bf16>(toAccum(x[i]) * static_cast<float>(copies));
    } else if constexpr (std::is_same_v<T, fp16>) {
      const float v = __half2float(__ushort_as_half(x[i].bits)) * static_cast<float>(copies);
      x[i] = fp16{__half_as_ushort(__float2half_rn(v))};
    } else {
      x[i] = timesCopies(x[i], copies);
    }
  }
}

}  // namespace

template <typename T>
void sumOfCopies(T* x, int copies, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  sumOfCopiesKernel<T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(x, copies, n);
  CUDA_CHECK_LAUNCH();
}

template void sumOfCopies<float>(float*, int, int64_t, cudaStream_t);
template void sumOfCopies<double>(double*, int, int64_t, cudaStream_t);
template void sumOfCopies<int32_t>(int32_t*, int, int64_t, cudaStream_t);
template void sumOfCopies<int8_t>(int8_t*, int, int64_t, cudaStream_t);
template void sumOfCopies<uint8_t>(uint8_t*, int, int64_t, cudaStream_t);
template void sumOfCopies<bf16>(bf16*, int, int64_t, cudaStream_t);
template void sumOfCopies<fp16>(fp16*, int, int64_t, cudaStream_t);

void emulatedLink(void* buffer, int64_t bytes, double seconds, int ctas, cudaStream_t stream) {
  MINIDP_CHECK(bytes >= 0 && bytes % 4 == 0, "emulated link of " << bytes << " bytes");
  MINIDP_CHECK(ctas > 0, "emulated link with " << ctas << " CTAs");
  const int64_t words = bytes / 4;
  const unsigned grid = std::max(1u, std::min(static_cast<unsigned>(ctas), ceilDiv(words, kBlock)));
  emulatedLinkKernel<<<grid, kBlock, 0, stream>>>(static_cast<uint32_t*>(buffer), words,
                                                  static_cast<uint64_t>(seconds * 1e9));
  CUDA_CHECK_LAUNCH();
}

}  // namespace minidp::kernels::cuda
