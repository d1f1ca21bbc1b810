// Dtype conversion kernel (grid-stride loop), then its launcher.
#include <cstdint>

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

// kConvertPack elements a thread per iteration, loaded and stored as whole aligned vectors (the fp32 -> bf16
// weight casts of every mixed-precision forward: 32 bytes in, 16 bytes out).
constexpr int kConvertPack = 8;
template <typename T>
struct alignas(sizeof(T) * kConvertPack) Pack {
  T v[kConvertPack];
};

template <typename From, typename To>
__global__ void convertPackedKernel(const Pack<From>* x, Pack<To>* y, int64_t packs) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs; i += int64_t(gridDim.x) * blockDim.x) {
    const Pack<From> in = x[i];
    Pack<To> out;
#pragma unroll
    for (int j = 0; j < kConvertPack; ++j) out.v[j] = convertValue<To>(in.v[j]);
    y[i] = out;
  }
}

template <typename T>
bool packAligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Pack<T>) == 0;
}

}  // namespace

template <typename From, typename To>
void convert(const From* x, To* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n % kConvertPack == 0 && packAligned(x) && packAligned(y)) {
    const int64_t packs = n / kConvertPack;
    convertPackedKernel<From, To><<<gridFor(packs, kBlock), kBlock, 0, stream>>>(
        reinterpret_cast<const Pack<From>*>(x), reinterpret_cast<Pack<To>*>(y), packs);
  } else {
    convertKernel<From, To><<<gridFor(n, kBlock), kBlock, 0, stream>>>(x, y, n);
  }
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(From, To) template void convert<From, To>(const From*, To*, int64_t, cudaStream_t);
MINIDP_FOR_EACH_CONVERSION(MINIDP_INSTANTIATE)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
