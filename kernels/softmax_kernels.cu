// Softmax over the last dimension: one block per row (grid-stride over rows), three passes over the row
// (max, sum of exponentials, write) reading x from memory each time, block reductions in a fixed order; bf16
// loads into fp32.
#include <cmath>

#include "kernels/cuda_utils.cuh"
#include "kernels/softmax_kernels.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;  // exp and log below are CUDA's overloads: expf and logf for float

template <typename T>
__global__ void softmaxForwardKernel(const T* x, T* y, int64_t rows, int64_t C, bool logOutput) {
  using A = AccumOf<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * C;  // (C)
    T* yr = y + r * C;
    A max = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += kBlock) max = fmax(max, toAccum(xr[c]));
    max = blockReduce<kBlock>(max, MaxOp());
    A sum = 0;
    for (int64_t c = threadIdx.x; c < C; c += kBlock) sum += exp(toAccum(xr[c]) - max);
    sum = blockReduce<kBlock>(sum, SumOp());
    if (logOutput) {
      const A shift = max + log(sum);
      for (int64_t c = threadIdx.x; c < C; c += kBlock) yr[c] = fromAccum<T>(toAccum(xr[c]) - shift);
    } else {
      for (int64_t c = threadIdx.x; c < C; c += kBlock) yr[c] = fromAccum<T>(exp(toAccum(xr[c]) - max) / sum);
    }
  }
}

template <typename T>
__global__ void softmaxBackwardKernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t C, bool logOutput) {
  using A = AccumOf<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * C;  // (C)
    const T* gr = dy + r * C;
    T* dr = dx + r * C;
    A dot = 0;
    for (int64_t c = threadIdx.x; c < C; c += kBlock)
      dot += logOutput ? toAccum(gr[c]) : toAccum(gr[c]) * toAccum(yr[c]);
    dot = blockReduce<kBlock>(dot, SumOp());
    for (int64_t c = threadIdx.x; c < C; c += kBlock) {
      const A g = toAccum(gr[c]), v = toAccum(yr[c]);
      dr[c] = fromAccum<T>(logOutput ? g - exp(v) * dot : v * (g - dot));
    }
  }
}

}  // namespace

template <typename T>
void softmaxForward(const T* x, T* y, int64_t rows, int64_t C, bool log, cudaStream_t stream) {
  if (rows == 0 || C == 0) return;
  softmaxForwardKernel<T><<<gridFor(rows, 1), kBlock, 0, stream>>>(x, y, rows, C, log);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmaxBackward(const T* y, const T* dy, T* dx, int64_t rows, int64_t C, bool log, cudaStream_t stream) {
  if (rows == 0 || C == 0) return;
  softmaxBackwardKernel<T><<<gridFor(rows, 1), kBlock, 0, stream>>>(y, dy, dx, rows, C, log);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                          \
  template void softmaxForward<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t); \
  template void softmaxBackward<T>(const T*, const T*, T*, int64_t, int64_t, bool, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
