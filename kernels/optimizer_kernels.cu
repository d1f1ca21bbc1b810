// Multi-tensor optimizer kernels (one block per parameter chunk, one launch per step), the fixed-order
// sum-of-squares partials of the gradient norm and its combine, then their launchers.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/accum.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/optimizer_kernels.h"
#include "kernels/optimizer_math.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr unsigned kMaxChunkBlocks = 1u << 16;  // more chunks than this: blocks loop over them

unsigned chunkGrid(int64_t numChunks) { return static_cast<unsigned>(std::min<int64_t>(numChunks, kMaxChunkBlocks)); }

template <typename T>
__global__ void sgdMultiKernel(const ParamChunk<T>* chunks, int64_t numChunks, SgdParams<T> hArg,
                               const SgdParams<T>* deviceH, const T* gradScale) {
  const SgdParams<T> h = deviceH ? *deviceH : hArg;
  const T factor = gradFactor(gradScale);
  for (int64_t c = blockIdx.x; c < numChunks; c += gridDim.x) {
    const ParamChunk<T> k = chunks[c];
    for (int64_t i = threadIdx.x; i < k.n; i += blockDim.x) {
      T unused = 0;
      sgdUpdate(k.param[i], k.grad[i] * factor, k.state0 ? k.state0[i] : unused, h);
      if (k.copy) k.copy[i] = convertValue<bf16>(k.param[i]);
    }
  }
}

// copy[0, P) = p rounded to bf16: one 8-byte store for the 4 of a float pack (copy then 8-byte aligned).
template <int P, typename T>
__device__ __forceinline__ void storeCopy(bf16* copy, const T (&p)[P]) {
  if constexpr (P == 4 && std::is_same_v<T, float>) {
    uint2 packed;
    packed.x = uint32_t(convertValue<bf16>(p[0]).bits) | uint32_t(convertValue<bf16>(p[1]).bits) << 16;
    packed.y = uint32_t(convertValue<bf16>(p[2]).bits) | uint32_t(convertValue<bf16>(p[3]).bits) << 16;
    *reinterpret_cast<uint2*>(copy) = packed;
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j) copy[j] = convertValue<bf16>(p[j]);
  }
}

// AdamW on elements [i, i + P) of chunk k: 16-byte loads and stores when P = kPack<T>, and the bf16 copy
// where the chunk has one.
template <int P, typename T>
__device__ __forceinline__ void adamwStep(const ParamChunk<T>& k, int64_t i, T factor, const AdamWParams<T>& h) {
  T p[P], g[P], m[P], v[P];
  loadAccum<P>(k.param + i, p);
  loadAccum<P>(k.grad + i, g);
  loadAccum<P>(k.state0 + i, m);
  loadAccum<P>(k.state1 + i, v);
#pragma unroll
  for (int j = 0; j < P; ++j) adamwUpdate(p[j], g[j] * factor, m[j], v[j], h);
  storeAccum<P>(k.param + i, p);
  storeAccum<P>(k.state0 + i, m);
  storeAccum<P>(k.state1 + i, v);
  if (k.copy) storeCopy<P>(k.copy + i, p);
}

// One block per chunk; whole 16-byte packs when the chunk's four arrays are aligned, then the rest one
// element per thread. The update per element is the same either way.
template <typename T>
__global__ void adamwMultiKernel(const ParamChunk<T>* chunks, int64_t numChunks, AdamWParams<T> hArg,
                                 const AdamWParams<T>* deviceH, const T* gradScale) {
  constexpr int P = kPack<T>;
  const AdamWParams<T> h = deviceH ? *deviceH : hArg;
  const T factor = gradFactor(gradScale);
  for (int64_t c = blockIdx.x; c < numChunks; c += gridDim.x) {
    const ParamChunk<T> k = chunks[c];
    const bool packed = aligned16(k.param) && aligned16(k.grad) && aligned16(k.state0) && aligned16(k.state1) &&
                        reinterpret_cast<uintptr_t>(k.copy) % 8 == 0;
    const int64_t whole = packed ? k.n / P * P : 0;
    for (int64_t i = threadIdx.x * int64_t(P); i < whole; i += int64_t(blockDim.x) * P) adamwStep<P>(k, i, factor, h);
    for (int64_t i = whole + threadIdx.x; i < k.n; i += blockDim.x) adamwStep<1>(k, i, factor, h);
  }
}

template <typename P>
__global__ void storeScalarsKernel(P h, P* out) {
  *out = h;
}

template <typename T>
__global__ void sumSquaresKernel(const T* x, int64_t n, double* partials) {
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(kBlock) + threadIdx.x; i < n; i += int64_t(kNormPartials) * kBlock) {
    const double v = static_cast<double>(x[i]);
    s += v * v;
  }
  const double total = blockReduce<kBlock>(s, SumOp());
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <typename T>
__global__ void clipCoefficientKernel(const double* partials, int64_t count, double maxNorm, double* norm, T* scale) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += kBlock) s += partials[i];
  const double total = blockReduce<kBlock>(s, SumOp());
  if (threadIdx.x == 0) {
    norm[0] = sqrt(total);
    scale[0] = clipFactor<T>(norm[0], maxNorm);
  }
}

}  // namespace

template <typename T>
void sgdMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, SgdParams<T> h, const SgdParams<T>* deviceH,
                  const T* gradScale, cudaStream_t stream) {
  if (numChunks == 0) return;
  sgdMultiKernel<T><<<chunkGrid(numChunks), kBlock, 0, stream>>>(chunks, numChunks, h, deviceH, gradScale);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void adamwMultiStep(const ParamChunk<T>* chunks, int64_t numChunks, AdamWParams<T> h, const AdamWParams<T>* deviceH,
                    const T* gradScale, cudaStream_t stream) {
  if (numChunks == 0) return;
  adamwMultiKernel<T><<<chunkGrid(numChunks), kBlock, 0, stream>>>(chunks, numChunks, h, deviceH, gradScale);
  CUDA_CHECK_LAUNCH();
}

template <typename P>
void storeScalars(P h, P* out, cudaStream_t stream) {
  storeScalarsKernel<P><<<1, 1, 0, stream>>>(h, out);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void sumSquaresPartials(const T* x, int64_t n, double* partials, cudaStream_t stream) {
  sumSquaresKernel<T><<<kNormPartials, kBlock, 0, stream>>>(x, n, partials);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void clipCoefficient(const double* partials, int64_t count, double maxNorm, double* norm, T* scale,
                     cudaStream_t stream) {
  clipCoefficientKernel<T><<<1, kBlock, 0, stream>>>(partials, count, maxNorm, norm, scale);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                                     \
  template void sgdMultiStep<T>(const ParamChunk<T>*, int64_t, SgdParams<T>, const SgdParams<T>*, const T*,       \
                                cudaStream_t);                                                                    \
  template void adamwMultiStep<T>(const ParamChunk<T>*, int64_t, AdamWParams<T>, const AdamWParams<T>*, const T*, \
                                  cudaStream_t);                                                                  \
  template void storeScalars<SgdParams<T>>(SgdParams<T>, SgdParams<T>*, cudaStream_t);                            \
  template void storeScalars<AdamWParams<T>>(AdamWParams<T>, AdamWParams<T>*, cudaStream_t);                      \
  template void sumSquaresPartials<T>(const T*, int64_t, double*, cudaStream_t);                                  \
  template void clipCoefficient<T>(const double*, int64_t, double, double*, T*, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
