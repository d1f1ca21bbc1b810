// Elementwise kernels (grid-stride loops), then their launchers.
#include "kernels/accum.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise.h"
#include "kernels/gelu_math.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// One kernel template for every elementwise map: out[i] = f(i).
template <typename F>
__global__ void mapKernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    f(i);
  }
}

template <typename F>
void launchMap(int64_t n, cudaStream_t stream, F f) {
  if (n == 0) return;
  const unsigned grid = std::min<unsigned>(ceilDiv(n, kBlock), 65535u * 4);
  mapKernel<<<grid, kBlock, 0, stream>>>(n, f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// Math in AccumOf<T> (float for bf16); for float and double the loads and stores are the identity.
template <typename T> void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { out[i] = fromAccum<T>(toAccum(a[i]) + toAccum(b[i])); });
}
template <typename T> void addInPlace(T* dst, const T* src, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { dst[i] = fromAccum<T>(toAccum(dst[i]) + toAccum(src[i])); });
}
template <typename T> void mul(const T* a, const T* b, T* out, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { out[i] = fromAccum<T>(toAccum(a[i]) * toAccum(b[i])); });
}
template <typename T> void scale(const T* x, AccumOf<T> v, T* out, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { out[i] = fromAccum<T>(toAccum(x[i]) * v); });
}
template <typename T> void fill(T* out, T value, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { out[i] = value; });
}
template <typename T> void reluForward(const T* x, T* y, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { y[i] = toAccum(x[i]) > AccumOf<T>(0) ? x[i] : T{}; });
}
template <typename T> void reluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { dx[i] = toAccum(x[i]) > AccumOf<T>(0) ? dy[i] : T{}; });
}
template <typename T> void geluForward(const T* x, T* y, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) { y[i] = fromAccum<T>(geluValue(toAccum(x[i]))); });
}
template <typename T> void geluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  launchMap(n, s, [=] __device__(int64_t i) {
    dx[i] = fromAccum<T>(toAccum(dy[i]) * geluDerivative(toAccum(x[i])));
  });
}

#define MINIDP_INSTANTIATE(T)                                                    \
  template void add<T>(const T*, const T*, T*, int64_t, cudaStream_t);           \
  template void addInPlace<T>(T*, const T*, int64_t, cudaStream_t);              \
  template void mul<T>(const T*, const T*, T*, int64_t, cudaStream_t);           \
  template void scale<T>(const T*, AccumOf<T>, T*, int64_t, cudaStream_t);       \
  template void fill<T>(T*, T, int64_t, cudaStream_t);                           \
  template void reluForward<T>(const T*, T*, int64_t, cudaStream_t);             \
  template void reluBackward<T>(const T*, const T*, T*, int64_t, cudaStream_t);  \
  template void geluForward<T>(const T*, T*, int64_t, cudaStream_t);             \
  template void geluBackward<T>(const T*, const T*, T*, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
template void fill<int32_t>(int32_t*, int32_t, int64_t, cudaStream_t);
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
