// Softmax cross-entropy kernels (one block per row, fixed-shape block reductions), then the launchers.
#include <climits>
#include <cmath>

#include "kernels/cuda_check.h"
#include "kernels/softmax_xent.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;

struct MaxOp {
  template <typename T> __device__ T operator()(T a, T b) const { return fmax(a, b); }
};
struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

// Reduces one value per thread to a value every thread receives. The butterfly pattern depends only on
// kBlock, so the summation order, and hence the bits, are the same on every run.
template <typename T, typename Op>
__device__ T blockReduce(T v, Op op) {
  __shared__ T partial[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32;
  if (lane == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[lane % kWarps];
  for (int offset = kWarps / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();  // `partial` is reused by the next call
  return v;
}

// A valid target, or -1 (the row then gets NaN).
__device__ int64_t checkedTarget(const int32_t* targets, int64_t r, int64_t V) {
  const int32_t t = targets[r];
  return t >= 0 && t < V ? t : -1;
}

template <typename T>
__global__ void forwardKernel(const T* logits, const int32_t* targets, T* loss, T* lse, int64_t V) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * V;  // (V)
  T m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += kBlock) m = fmax(m, x[j]);
  m = blockReduce(m, MaxOp());
  T s = 0;
  for (int64_t j = threadIdx.x; j < V; j += kBlock) s += exp(x[j] - m);
  s = blockReduce(s, SumOp());
  if (threadIdx.x == 0) {
    const T l = m + log(s);
    const int64_t t = checkedTarget(targets, r, V);
    lse[r] = l;
    loss[r] = t >= 0 ? l - x[t] : T(NAN);
  }
}

template <typename T>
__global__ void backwardKernel(const T* logits, const int32_t* targets, const T* lse, const T* g, T* dlogits,
                               int64_t N, int64_t V) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * V;  // (V)
  T* dx = dlogits + r * V;      // (V)
  const T scale = g[0] / static_cast<T>(N);
  const int64_t t = checkedTarget(targets, r, V);
  const T l = t >= 0 ? lse[r] : T(NAN);
  for (int64_t j = threadIdx.x; j < V; j += kBlock) dx[j] = (exp(x[j] - l) - T(j == t)) * scale;
}

void checkSizes(int64_t N, int64_t V) {
  MINIDP_CHECK(V > 0, "cross-entropy over " << V << " classes");
  MINIDP_CHECK(N <= INT_MAX, "cross-entropy: " << N << " rows exceed the grid");
}

}  // namespace

template <typename T>
void softmaxXentForward(const T* logits, const int32_t* targets, T* loss, T* lse, int64_t N, int64_t V,
                        cudaStream_t stream) {
  checkSizes(N, V);
  if (N == 0) return;
  forwardKernel<T><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(logits, targets, loss, lse, V);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmaxXentBackward(const T* logits, const int32_t* targets, const T* lse, const T* g, T* dlogits,
                         int64_t N, int64_t V, cudaStream_t stream) {
  checkSizes(N, V);
  if (N == 0) return;
  backwardKernel<T><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(logits, targets, lse, g, dlogits, N, V);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                              \
  template void softmaxXentForward<T>(const T*, const int32_t*, T*, T*, int64_t, int64_t, cudaStream_t);   \
  template void softmaxXentBackward<T>(const T*, const int32_t*, const T*, const T*, T*, int64_t, int64_t, \
                                       cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
