// LayerNorm and RMSNorm kernels (kCentered: LayerNorm's mean subtracted and bias added; RMSNorm has neither),
// then their launchers. One warp per row for the row statistics and dx, reading P consecutive channels per
// lane (16-byte loads when the rows allow); the weight (and bias) gradients are the two-stage column reduction
// of kernels/cuda_utils.cuh (row slices, then a fixed-order combine), so every run gives the same bits and the
// reduction fills the GPU at any C.
#include <initializer_list>

#include "kernels/cuda_utils.cuh"
#include "kernels/layernorm.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row

// LayerNorm: y = (x - mean) * rstd * weight + bias; RMSNorm (!kCentered): y = x * rstd * weight, rstd from
// mean(x^2); mean and bias are not read or written then (null).
template <int P, bool kCentered, typename T>
__global__ void normForwardKernel(const T* x, const ParamOf<T>* weight, const ParamOf<T>* bias, T* y,
                                  AccumOf<T>* mean, AccumOf<T>* rstd, int64_t N, int64_t C, AccumOf<T> eps) {
  using A = AccumOf<T>;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + row * C;
  A v[P];
  A m = 0;
  if constexpr (kCentered) {
    A sum = 0;
    for (int64_t c = lane * P; c < C; c += 32 * P) {
      loadAccum<P>(xr + c, v);
#pragma unroll
      for (int j = 0; j < P; ++j) sum += v[j];
    }
    m = warpSum(sum) / static_cast<A>(C);
  }
  A sq = 0;  // two passes, as the CPU twin: no cancellation in the variance (the row is in L1 by now)
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    loadAccum<P>(xr + c, v);
#pragma unroll
    for (int j = 0; j < P; ++j) sq += (v[j] - m) * (v[j] - m);
  }
  const A s = A(1) / sqrt(warpSum(sq) / static_cast<A>(C) + eps);
  T* yr = y + row * C;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    A w[P], b[P] = {};
    loadAccum<P>(xr + c, v);
    loadAccum<P>(weight + c, w);
    if constexpr (kCentered) loadAccum<P>(bias + c, b);
#pragma unroll
    for (int j = 0; j < P; ++j) v[j] = (v[j] - m) * s * w[j] + b[j];
    storeAccum<P>(yr + c, v);
  }
  if (lane == 0) {
    if constexpr (kCentered) mean[row] = m;
    rstd[row] = s;
  }
}

// a + b in one rounding that the compiler may not fuse with the product that made b: a separate add kernel
// adds the stored product, so an FMA here would give other bits (fp32 and fp64; bf16 terms are rounded first).
__device__ __forceinline__ float unfusedAdd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double unfusedAdd(double a, double b) { return __dadd_rn(a, b); }

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight, one warp per row; RMSNorm
// (!kCentered): xhat = x * rstd and no mean(g) term. With `accumulate`, dx += that, rounded to T first: the
// bits of a separate add of the two.
template <int P, bool kCentered, typename T>
__global__ void normBackwardInputKernel(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* mean,
                                        const AccumOf<T>* rstd, T* dx, int64_t N, int64_t C, bool accumulate) {
  using A = AccumOf<T>;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + row * C;
  const T* dyr = dy + row * C;
  const A m = kCentered ? mean[row] : A(0), s = rstd[row];
  A xv[P], gv[P], w[P];
  A sumG = 0, sumGx = 0;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    loadAccum<P>(xr + c, xv);
    loadAccum<P>(dyr + c, gv);
    loadAccum<P>(weight + c, w);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const A g = gv[j] * w[j];
      if constexpr (kCentered) sumG += g;
      sumGx += g * ((xv[j] - m) * s);
    }
  }
  const A meanG = kCentered ? warpSum(sumG) / static_cast<A>(C) : A(0);
  const A meanGx = warpSum(sumGx) / static_cast<A>(C);
  T* dxr = dx + row * C;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    loadAccum<P>(xr + c, xv);
    loadAccum<P>(dyr + c, gv);
    loadAccum<P>(weight + c, w);
#pragma unroll
    for (int j = 0; j < P; ++j) gv[j] = s * (gv[j] * w[j] - meanG - ((xv[j] - m) * s) * meanGx);
    if (accumulate) {
      A held[P];
      loadAccum<P>(dxr + c, held);
#pragma unroll
      for (int j = 0; j < P; ++j) gv[j] = unfusedAdd(held[j], toAccum(fromAccum<T>(gv[j])));
    }
    storeAccum<P>(dxr + c, gv);
  }
}

// Row n, column c's terms of the parameter gradients: dy * xhat (weight) and dy (bias).
template <typename T>
struct LayerNormParamTerms {
  const T* dy;
  const T* x;
  const AccumOf<T>* mean;
  const AccumOf<T>* rstd;
  int64_t C;
  static constexpr int kPack = cuda::kPack<T>;
  template <int P>
  __device__ void pack(int64_t n, int64_t c, AccumOf<T> (&acc)[P][2]) const {
    AccumOf<T> g[P], xv[P];
    loadAccum<P>(dy + n * C + c, g);
    loadAccum<P>(x + n * C + c, xv);
    const AccumOf<T> m = mean[n], r = rstd[n];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      acc[j][0] += g[j] * ((xv[j] - m) * r);
      acc[j][1] += g[j];
    }
  }
  bool packable() const { return C % kPack == 0 && aligned16(dy) && aligned16(x); }
};

// Row n, column c's term of RMSNorm's weight gradient: dy * x * rstd.
template <typename T>
struct RmsNormParamTerms {
  const T* dy;
  const T* x;
  const AccumOf<T>* rstd;
  int64_t C;
  static constexpr int kPack = cuda::kPack<T>;
  template <int P>
  __device__ void pack(int64_t n, int64_t c, AccumOf<T> (&acc)[P][1]) const {
    AccumOf<T> g[P], xv[P];
    loadAccum<P>(dy + n * C + c, g);
    loadAccum<P>(x + n * C + c, xv);
    const AccumOf<T> r = rstd[n];
#pragma unroll
    for (int j = 0; j < P; ++j) acc[j][0] += g[j] * (xv[j] * r);
  }
  bool packable() const { return C % kPack == 0 && aligned16(dy) && aligned16(x); }
};

// Whether rows of C elements of every pointer allow P-wide 16-byte loads.
template <int P>
bool vectorRows(int64_t C, std::initializer_list<const void*> pointers) {
  if (C % P != 0) return false;
  for (const void* p : pointers) {
    if (!aligned16(p)) return false;
  }
  return true;
}

}  // namespace

template <typename T>
void layerNormForward(const T* x, const ParamOf<T>* weight, const ParamOf<T>* bias, T* y, AccumOf<T>* mean,
                      AccumOf<T>* rstd, int64_t N, int64_t C, AccumOf<T> eps, cudaStream_t stream) {
  if (N == 0) return;
  constexpr int P = kPack<T>;
  const unsigned grid = ceilDiv(N, kRowsPerBlock);
  if (vectorRows<P>(C, {x, weight, bias, y})) {
    normForwardKernel<P, true, T><<<grid, kRowsPerBlock * 32, 0, stream>>>(x, weight, bias, y, mean, rstd, N, C, eps);
  } else {
    normForwardKernel<1, true, T><<<grid, kRowsPerBlock * 32, 0, stream>>>(x, weight, bias, y, mean, rstd, N, C, eps);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void layerNormBackward(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* mean,
                       const AccumOf<T>* rstd, T* dx, ParamOf<T>* dweight, ParamOf<T>* dbias, AccumOf<T>* scratch,
                       int64_t N, int64_t C, bool accumulateDx, bool accumulateWeight, bool accumulateBias,
                       cudaStream_t stream) {
  if (C == 0) return;
  if (N > 0) {
    constexpr int P = kPack<T>;
    const unsigned grid = ceilDiv(N, kRowsPerBlock);
    if (vectorRows<P>(C, {dy, x, weight, dx})) {
      normBackwardInputKernel<P, true, T>
          <<<grid, kRowsPerBlock * 32, 0, stream>>>(dy, x, weight, mean, rstd, dx, N, C, accumulateDx);
    } else {
      normBackwardInputKernel<1, true, T>
          <<<grid, kRowsPerBlock * 32, 0, stream>>>(dy, x, weight, mean, rstd, dx, N, C, accumulateDx);
    }
    CUDA_CHECK_LAUNCH();
  }
  reduceColumns<2>(LayerNormParamTerms<T>{dy, x, mean, rstd, C},
                   ColumnOutputs<2, ParamOf<T>>{{dweight, dbias}, {accumulateWeight, accumulateBias}}, scratch, N, C,
                   stream);
}

template <typename T>
void rmsNormForward(const T* x, const ParamOf<T>* weight, T* y, AccumOf<T>* rstd, int64_t N, int64_t C,
                    AccumOf<T> eps, cudaStream_t stream) {
  if (N == 0) return;
  constexpr int P = kPack<T>;
  const unsigned grid = ceilDiv(N, kRowsPerBlock);
  if (vectorRows<P>(C, {x, weight, y})) {
    normForwardKernel<P, false, T><<<grid, kRowsPerBlock * 32, 0, stream>>>(x, weight, nullptr, y, nullptr, rstd, N, C,
                                                                            eps);
  } else {
    normForwardKernel<1, false, T><<<grid, kRowsPerBlock * 32, 0, stream>>>(x, weight, nullptr, y, nullptr, rstd, N, C,
                                                                            eps);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsNormBackward(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* rstd, T* dx,
                     ParamOf<T>* dweight, AccumOf<T>* scratch, int64_t N, int64_t C, bool accumulateDx,
                     bool accumulateWeight, cudaStream_t stream) {
  if (C == 0) return;
  if (N > 0) {
    constexpr int P = kPack<T>;
    const unsigned grid = ceilDiv(N, kRowsPerBlock);
    if (vectorRows<P>(C, {dy, x, weight, dx})) {
      normBackwardInputKernel<P, false, T>
          <<<grid, kRowsPerBlock * 32, 0, stream>>>(dy, x, weight, nullptr, rstd, dx, N, C, accumulateDx);
    } else {
      normBackwardInputKernel<1, false, T>
          <<<grid, kRowsPerBlock * 32, 0, stream>>>(dy, x, weight, nullptr, rstd, dx, N, C, accumulateDx);
    }
    CUDA_CHECK_LAUNCH();
  }
  reduceColumns<1>(RmsNormParamTerms<T>{dy, x, rstd, C},
                   ColumnOutputs<1, ParamOf<T>>{{dweight}, {accumulateWeight}}, scratch, N, C, stream);
}

#define MINIDP_INSTANTIATE(T)                                                                                         \
  template void layerNormForward<T>(const T*, const ParamOf<T>*, const ParamOf<T>*, T*, AccumOf<T>*, AccumOf<T>*,     \
                                    int64_t, int64_t, AccumOf<T>, cudaStream_t);                                      \
  template void layerNormBackward<T>(const T*, const T*, const ParamOf<T>*, const AccumOf<T>*, const AccumOf<T>*, T*, \
                                     ParamOf<T>*, ParamOf<T>*, AccumOf<T>*, int64_t, int64_t, bool, bool, bool,       \
                                     cudaStream_t);                                                                   \
  template void rmsNormForward<T>(const T*, const ParamOf<T>*, T*, AccumOf<T>*, int64_t, int64_t, AccumOf<T>,         \
                                  cudaStream_t);                                                                      \
  template void rmsNormBackward<T>(const T*, const T*, const ParamOf<T>*, const AccumOf<T>*, T*, ParamOf<T>*,         \
                                   AccumOf<T>*, int64_t, int64_t, bool, bool, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
