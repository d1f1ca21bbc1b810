// LayerNorm and RMSNorm kernels (kCentered: LayerNorm's mean subtracted and bias added; RMSNorm has neither),
// then their launchers. One warp per row for the row statistics and dx, reading P consecutive channels per
// lane (16-byte loads when the rows allow). The backward is one pass where C <= kNormBackwardFusedColumns<T>
// (a choice of C and T only): dx and per-block partial column sums of the parameter gradients from one read of
// each row, then stage two of the column reduction. Wider rows take a dx kernel and the two-stage column
// reduction of kernels/cuda_utils.cuh (row slices, then a fixed-order combine). Every run gives the same bits
// either way, and dx the same bits on both paths.
#include <initializer_list>
#include <type_traits>

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

// Adds P channels' terms of a row's dx sums: g = dy * weight to sumG (LayerNorm only) and g * xhat to sumGx,
// xhat = (x - mean) * rstd. Both backward paths add through it, channels in the same order, so their dx agree.
template <int P, bool kCentered, typename A>
__device__ __forceinline__ void addRowTerms(const A (&xv)[P], const A (&gv)[P], const A (&w)[P], A m, A s, A& sumG,
                                            A& sumGx) {
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const A g = gv[j] * w[j];
    if constexpr (kCentered) sumG += g;
    sumGx += g * ((xv[j] - m) * s);
  }
}

// Stores P channels of dx = s * (g - meanG - xhat * meanGx) at p; with `accumulate`, adds them onto what p holds,
// rounded to T first: the bits of a separate add of the two.
template <int P, typename T, typename A>
__device__ __forceinline__ void storeDx(T* p, const A (&xv)[P], const A (&gv)[P], const A (&w)[P], A m, A s, A meanG,
                                        A meanGx, bool accumulate) {
  A d[P];
#pragma unroll
  for (int j = 0; j < P; ++j) d[j] = s * (gv[j] * w[j] - meanG - ((xv[j] - m) * s) * meanGx);
  if (accumulate) {
    A held[P];
    loadAccum<P>(p, held);
#pragma unroll
    for (int j = 0; j < P; ++j) d[j] = unfusedAdd(held[j], toAccum(fromAccum<T>(d[j])));
  }
  storeAccum<P>(p, d);
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight, one warp per row; RMSNorm
// (!kCentered): xhat = x * rstd and no mean(g) term. With `accumulate`, dx += that (storeDx).
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
    addRowTerms<P, kCentered>(xv, gv, w, m, s, sumG, sumGx);
  }
  const A meanG = kCentered ? warpSum(sumG) / static_cast<A>(C) : A(0);
  const A meanGx = warpSum(sumGx) / static_cast<A>(C);
  T* dxr = dx + row * C;
  for (int64_t c = lane * P; c < C; c += 32 * P) {
    loadAccum<P>(xr + c, xv);
    loadAccum<P>(dyr + c, gv);
    loadAccum<P>(weight + c, w);
    storeDx<P>(dxr + c, xv, gv, w, m, s, meanG, meanGx, accumulate);
  }
}

constexpr int kFusedWarps = 8;  // warps of a one-pass block, each over every kFusedWarps-th of its rows

// The one-pass backward: block b takes rows [32 b, 32 b + 32), one warp per row, each warp every kFusedWarps-th.
// Lane `lane` holds channels c = lane * P + r * 32 * P + j (r < kRounds, j < P), as normBackwardInputKernel's
// lane does: it reads them of dy and x once, stores dx through the same helpers in the same order (the same
// bits), and adds the row's parameter-gradient terms (dy * xhat, and LayerNorm's dy) to its partial sums in
// registers. The block then adds its warps' partials in warp order and writes them to partial
// (kValues, gridDim.x, C), one row per block and value.
template <int P, int kRounds, bool kCentered, typename T>
__global__ void __launch_bounds__(kFusedWarps * 32)
    normBackwardFusedKernel(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* mean,
                            const AccumOf<T>* rstd, T* dx, AccumOf<T>* partial, int64_t N, int64_t C, bool accumulate) {
  using A = AccumOf<T>;
  constexpr int kValues = kCentered ? 2 : 1;
  constexpr int kWidth = kRounds * 32 * P;  // channels a block covers, C at most
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  A w[kRounds][P], sums[kValues][kRounds][P];
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t c = lane * P + r * 32 * P;
    if (c < C) loadAccum<P>(weight + c, w[r]);
#pragma unroll
    for (int j = 0; j < P; ++j)
#pragma unroll
      for (int k = 0; k < kValues; ++k) sums[k][r][j] = A(0);
  }
  const int64_t end = min(N, int64_t(blockIdx.x + 1) * kNormBackwardFusedRows);
  for (int64_t row = int64_t(blockIdx.x) * kNormBackwardFusedRows + warp; row < end; row += kFusedWarps) {
    const T* xr = x + row * C;
    const T* dyr = dy + row * C;
    const A m = kCentered ? mean[row] : A(0), s = rstd[row];
    A xv[kRounds][P], gv[kRounds][P];
    A sumG = 0, sumGx = 0;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int64_t c = lane * P + r * 32 * P;
      if (c >= C) continue;
      loadAccum<P>(xr + c, xv[r]);
      loadAccum<P>(dyr + c, gv[r]);
      addRowTerms<P, kCentered>(xv[r], gv[r], w[r], m, s, sumG, sumGx);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        sums[0][r][j] += gv[r][j] * ((xv[r][j] - m) * s);
        if constexpr (kCentered) sums[1][r][j] += gv[r][j];
      }
    }
    const A meanG = kCentered ? warpSum(sumG) / static_cast<A>(C) : A(0);
    const A meanGx = warpSum(sumGx) / static_cast<A>(C);
    T* dxr = dx + row * C;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int64_t c = lane * P + r * 32 * P;
      if (c < C) storeDx<P>(dxr + c, xv[r], gv[r], w[r], m, s, meanG, meanGx, accumulate);
    }
  }
  // One value at a time through shared memory, lane's (r, j) partial at slot (r * P + j) * 32 + lane: a warp's
  // stores and the readers' loads each touch 32 consecutive slots, so no bank conflicts.
  __shared__ A lanes[kFusedWarps][kWidth];
#pragma unroll
  for (int k = 0; k < kValues; ++k) {
#pragma unroll
    for (int r = 0; r < kRounds; ++r)
#pragma unroll
      for (int j = 0; j < P; ++j) lanes[warp][(r * P + j) * 32 + lane] = sums[k][r][j];
    __syncthreads();
    for (int i = threadIdx.x; i < kWidth; i += kFusedWarps * 32) {
      const int64_t c = (i % 32) * P + (i / (32 * P)) * 32 * P + i / 32 % P;  // slot i's channel
      if (c >= C) continue;
      A sum = lanes[0][i];
      for (int wp = 1; wp < kFusedWarps; ++wp) sum += lanes[wp][i];
      partial[(int64_t(k) * gridDim.x + blockIdx.x) * C + c] = sum;
    }
    __syncthreads();  // `lanes` is reused by the next value
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

// The one-pass backward (C <= kNormBackwardFusedColumns<T>): normBackwardFusedKernel over ceil(N / 32) blocks
// at the fewest rounds that cover C, with 16-byte loads where normBackwardInputKernel would take them, then stage
// two of the column reduction over the blocks' partial rows in `scratch`.
template <bool kCentered, typename T, int kValues>
void normBackwardFused(const T* dy, const T* x, const ParamOf<T>* weight, const AccumOf<T>* mean,
                       const AccumOf<T>* rstd, T* dx, ColumnOutputs<kValues, ParamOf<T>> outs, AccumOf<T>* scratch,
                       int64_t N, int64_t C, bool accumulateDx, cudaStream_t stream) {
  constexpr int kPacked = kPack<T>;
  static_assert(kNormBackwardFusedColumns<T> == 4 * 32 * kPacked, "at most four rounds of 16-byte loads a lane");
  const unsigned blocks = ceilDiv(N, kNormBackwardFusedRows);
  const auto launch = [&](auto pack, auto packRounds) {
    constexpr int P = decltype(pack)::value, kRounds = decltype(packRounds)::value * kPacked / P;
    normBackwardFusedKernel<P, kRounds, kCentered, T>
        <<<blocks, kFusedWarps * 32, 0, stream>>>(dy, x, weight, mean, rstd, dx, scratch, N, C, accumulateDx);
  };
  const auto launchRounds = [&](auto pack) {
    switch (ceilDiv(C, 32 * kPacked)) {
      case 1: launch(pack, std::integral_constant<int, 1>{}); break;
      case 2: launch(pack, std::integral_constant<int, 2>{}); break;
      case 3: launch(pack, std::integral_constant<int, 3>{}); break;
      default: launch(pack, std::integral_constant<int, 4>{});
    }
  };
  if (blocks > 0) {
    if (vectorRows<kPacked>(C, {dy, x, weight, dx})) {
      launchRounds(std::integral_constant<int, kPacked>{});
    } else {
      launchRounds(std::integral_constant<int, 1>{});
    }
    CUDA_CHECK_LAUNCH();
  }
  finishColumns(scratch, outs, blocks, C, stream);
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
  const ColumnOutputs<2, ParamOf<T>> outs{{dweight, dbias}, {accumulateWeight, accumulateBias}};
  if (C <= kNormBackwardFusedColumns<T>) {
    normBackwardFused<true>(dy, x, weight, mean, rstd, dx, outs, scratch, N, C, accumulateDx, stream);
    return;
  }
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
  reduceColumns<2>(LayerNormParamTerms<T>{dy, x, mean, rstd, C}, outs, scratch, N, C, stream);
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
  const ColumnOutputs<1, ParamOf<T>> outs{{dweight}, {accumulateWeight}};
  if (C <= kNormBackwardFusedColumns<T>) {
    normBackwardFused<false>(dy, x, weight, nullptr, rstd, dx, outs, scratch, N, C, accumulateDx, stream);
    return;
  }
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
  reduceColumns<1>(RmsNormParamTerms<T>{dy, x, rstd, C}, outs, scratch, N, C, stream);
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
