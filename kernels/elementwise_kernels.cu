// Elementwise kernels (one vectorised grid-stride map), then their launchers.
#include "kernels/accum.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/elementwise_kernels.h"
#include "kernels/gelu_math.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// f applied to the first kInputs of (a, b): the map's functors take 0, 1 or 2 accumulator values.
template <int kInputs, typename F, typename A>
__device__ __forceinline__ auto apply(const F& f, A a, A b) {
  if constexpr (kInputs == 0) {
    return f();
  } else if constexpr (kInputs == 1) {
    return f(a);
  } else {
    return f(a, b);
  }
}

// out[i .. i+P) = f(a[i .. i+P), b[i .. i+P)) through the accumulator type (inputs kInputs of a, b).
template <int P, int kInputs, typename T, typename F>
__device__ __forceinline__ void mapStep(const F& f, T* out, const T* a, const T* b, int64_t i) {
  AccumOf<T> va[P] = {}, vb[P] = {}, vo[P];
  if constexpr (kInputs >= 1) loadAccum<P>(a + i, va);
  if constexpr (kInputs >= 2) loadAccum<P>(b + i, vb);
#pragma unroll
  for (int j = 0; j < P; ++j) vo[j] = apply<kInputs>(f, va[j], vb[j]);
  storeAccum<P>(out + i, vo);
}

// One kernel for every elementwise map, P elements (16 bytes when P = kPack<T>) per thread and step; the
// n % P elements past the last whole pack go one per thread. The math per element does not depend on P.
template <int P, int kInputs, typename T, typename F>
__global__ void mapKernel(F f, T* out, const T* a, const T* b, int64_t n) {
  const int64_t thread = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, threads = int64_t(gridDim.x) * blockDim.x;
  const int64_t whole = n / P * P;
  for (int64_t i = thread * P; i < whole; i += threads * P) mapStep<P, kInputs>(f, out, a, b, i);
  if (whole + thread < n) mapStep<1, kInputs>(f, out, a, b, whole + thread);
}

// out = f(a, b) over n elements (a, b null past kInputs): 16-byte accesses when every pointer allows them.
template <int kInputs, typename T, typename F>
void launchMap(F f, T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int P = kPack<T>;
  if (aligned16(out) && aligned16(a) && aligned16(b)) {
    mapKernel<P, kInputs><<<gridFor(n / P, kBlock), kBlock, 0, stream>>>(f, out, a, b, n);
  } else {
    mapKernel<1, kInputs><<<gridFor(n, kBlock), kBlock, 0, stream>>>(f, out, a, b, n);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// Math in AccumOf<T> (float for bf16); for float and double the loads and stores are the identity.
template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t s) {
  launchMap<2>([] __device__(AccumOf<T> x, AccumOf<T> y) { return x + y; }, out, a, b, n, s);
}
template <typename T>
void addInPlace(T* dst, const T* src, int64_t n, cudaStream_t s) {
  add(dst, src, dst, n, s);
}
template <typename T>
void mul(const T* a, const T* b, T* out, int64_t n, cudaStream_t s) {
  launchMap<2>([] __device__(AccumOf<T> x, AccumOf<T> y) { return x * y; }, out, a, b, n, s);
}
template <typename T>
void scale(const T* x, AccumOf<T> v, T* out, int64_t n, cudaStream_t s) {
  launchMap<1>([v] __device__(AccumOf<T> e) { return e * v; }, out, x, static_cast<const T*>(nullptr), n, s);
}
template <typename T>
void fill(T* out, T value, int64_t n, cudaStream_t s) {
  const AccumOf<T> v = kernels::toAccum(value);  // exact: T -> accumulator -> T round-trips
  launchMap<0>([v] __device__() { return v; }, out, static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), n,
               s);
}
template <typename T>
void reluForward(const T* x, T* y, int64_t n, cudaStream_t s) {
  launchMap<1>([] __device__(AccumOf<T> e) { return e > AccumOf<T>(0) ? e : AccumOf<T>(0); }, y, x,
               static_cast<const T*>(nullptr), n, s);
}
template <typename T>
void reluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  launchMap<2>([] __device__(AccumOf<T> e, AccumOf<T> g) { return e > AccumOf<T>(0) ? g : AccumOf<T>(0); }, dx, x, dy,
               n, s);
}
template <typename T>
void geluForward(const T* x, T* y, int64_t n, cudaStream_t s) {
  launchMap<1>([] __device__(AccumOf<T> e) { return geluValue(e); }, y, x, static_cast<const T*>(nullptr), n, s);
}
template <typename T>
void geluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  launchMap<2>([] __device__(AccumOf<T> e, AccumOf<T> g) { return g * geluDerivative(e); }, dx, x, dy, n, s);
}

#define MINIDP_INSTANTIATE(T)                                                   \
  template void add<T>(const T*, const T*, T*, int64_t, cudaStream_t);          \
  template void addInPlace<T>(T*, const T*, int64_t, cudaStream_t);             \
  template void mul<T>(const T*, const T*, T*, int64_t, cudaStream_t);          \
  template void scale<T>(const T*, AccumOf<T>, T*, int64_t, cudaStream_t);      \
  template void fill<T>(T*, T, int64_t, cudaStream_t);                          \
  template void reluForward<T>(const T*, T*, int64_t, cudaStream_t);            \
  template void reluBackward<T>(const T*, const T*, T*, int64_t, cudaStream_t); \
  template void geluForward<T>(const T*, T*, int64_t, cudaStream_t);            \
  template void geluBackward<T>(const T*, const T*, T*, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
template void fill<int32_t>(int32_t*, int32_t, int64_t, cudaStream_t);
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
