// Device helpers shared by the kernels: bf16 <-> accumulator conversion, 16-byte vector loads, warp and
// block reductions with a fixed order, grid sizing with its cap, dynamic shared memory sizes, and the two-stage
// column reduction (bias and LayerNorm parameter gradients). Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "base/bf16.h"
#include "base/cuda_check.h"
#include "kernels/column_reduce.h"

namespace minidp::kernels::cuda {

// ---- conversions ----

/// x in its accumulation type (exact).
__device__ __forceinline__ float toAccum(bf16 x) { return __bfloat162float(__ushort_as_bfloat16(x.bits)); }
__device__ __forceinline__ float toAccum(float x) { return x; }
__device__ __forceinline__ double toAccum(double x) { return x; }

/// v rounded to T (to nearest even for bf16).
template <typename T, typename A>
__device__ __forceinline__ T fromAccum(A v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)))};
  } else {
    return static_cast<T>(v);
  }
}

// ---- vector loads and stores ----

/// Elements of T in one 16-byte load.
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

/// 16 bytes of T.
template <typename T>
struct alignas(16) Pack16 {
  T v[kPack<T>];
};

/// Whether p may be read with 16-byte loads.
__host__ __device__ inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// out[i] = p[i] for i < P as accumulators; 16-byte loads when P fills whole packs of T (p then
/// 16-byte aligned), scalar loads otherwise.
template <int P, typename T, typename A>
__device__ __forceinline__ void loadAccum(const T* p, A (&out)[P]) {
  if constexpr (P % kPack<T> == 0) {
#pragma unroll
    for (int j = 0; j < P; j += kPack<T>) {
      const Pack16<T> k = *reinterpret_cast<const Pack16<T>*>(p + j);
#pragma unroll
      for (int i = 0; i < kPack<T>; ++i) out[j + i] = toAccum(k.v[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i) out[i] = toAccum(p[i]);
  }
}

/// p[i] = in[i] rounded to T for i < P, the counterpart of loadAccum.
template <int P, typename T, typename A>
__device__ __forceinline__ void storeAccum(T* p, const A (&in)[P]) {
  if constexpr (P % kPack<T> == 0) {
#pragma unroll
    for (int j = 0; j < P; j += kPack<T>) {
      Pack16<T> k;
#pragma unroll
      for (int i = 0; i < kPack<T>; ++i) k.v[i] = fromAccum<T>(in[j + i]);
      *reinterpret_cast<Pack16<T>*>(p + j) = k;
    }
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i) p[i] = fromAccum<T>(in[i]);
  }
}

// ---- reductions ----

/// The value of lane (lane ^ offset); overloaded for reduction states that are structs.
template <typename T>
__device__ __forceinline__ T shuffleXor(T v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}

/// Butterfly reduction over a warp: every lane combines the same pairs, so with a commutative `op` all
/// lanes end with identical bits.
template <typename T, typename Op>
__device__ __forceinline__ T warpReduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, shuffleXor(v, offset));
  return v;
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

template <typename T>
__device__ __forceinline__ T warpSum(T v) {
  return warpReduce(v, SumOp());
}

template <typename T>
__device__ __forceinline__ T warpMax(T v) {
  return warpReduce(v, MaxOp());
}

/// Reduces one value per thread of a kBlock-thread block (a multiple of 32, at most 1024); every thread
/// receives the result. The order depends only on kBlock, so the bits are the same on every run.
template <int kBlock, typename T, typename Op>
__device__ T blockReduce(T v, Op op) {
  constexpr int kWarps = kBlock / 32;
  static_assert(kBlock % 32 == 0 && (kWarps & (kWarps - 1)) == 0, "a power-of-two number of warps");
  __shared__ T partial[kWarps];
  v = warpReduce(v, op);
  const int lane = threadIdx.x % 32;
  if (lane == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[lane % kWarps];
#pragma unroll
  for (int offset = kWarps / 2; offset > 0; offset /= 2) v = op(v, shuffleXor(v, offset));
  __syncthreads();  // `partial` is reused by the next call
  return v;
}

// ---- grid sizing ----

/// Most blocks a grid-stride loop launches: more would only queue behind the resident ones.
constexpr unsigned kGridCap = 4096;

/// Blocks for a grid-stride loop over n items at `block` items per block, at least one, at most kGridCap.
inline unsigned gridFor(int64_t n, int64_t block) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + block - 1) / block, 1, kGridCap));
}

// ---- dynamic shared memory (kernels/cuda_utils.cu) ----

/// Lets `kernel` launch with up to `bytes` of dynamic shared memory on the current device. The attribute is set
/// at the first call per kernel and device (again only for more bytes), not before every launch; the record
/// assumes no cudaDeviceReset, which would clear the attributes.
void allowDynamicSharedBytes(const void* kernel, int64_t bytes);
template <typename... Args>
void allowDynamicSharedBytes(void (*kernel)(Args...), int64_t bytes) {
  allowDynamicSharedBytes(reinterpret_cast<const void*>(kernel), bytes);
}

/// The dynamic shared memory a block of `kernel` may opt into on the current device: the device's limit per
/// block (227 KiB on Hopper, 163 on the A100, 99 on most other GPUs) less the kernel's static shared memory.
/// Queried once per kernel and device.
int64_t dynamicSharedBytesLimit(const void* kernel);
template <typename... Args>
int64_t dynamicSharedBytesLimit(void (*kernel)(Args...)) {
  return dynamicSharedBytesLimit(reinterpret_cast<const void*>(kernel));
}

// ---- two-stage column reduction (kernels/column_reduce.h) ----

constexpr int kSliceLanes = 8;  // rows of a slice read at once by a stage-one block

/// Where a column reduction writes its kValues results, each (C): overwritten, or added to (`+=`).
template <int kValues, typename P>
struct ColumnOutputs {
  P* out[kValues];
  bool accumulate[kValues];
};

// Stage one. Block (kColumnTile, kSliceLanes) reduces rows [slice * rowsPerSlice, ...) of kColumnTile P
// columns, P consecutive ones per thread: `terms.pack<P>(n, c, acc)` adds row n's terms of columns
// c .. c + P - 1 (16-byte loads at P = Terms::kPack, where `packable()`; any P = 1). Thread (cx, ry) adds
// every kSliceLanes-th row, then the kSliceLanes partials of each column are added in ry order: the same
// order at every P, so the packed and the one-column launches give the same bits.
template <int kValues, int P, typename A, typename Terms>
__global__ void columnPartialsKernel(Terms terms, A* partial, int64_t N, int64_t C, int64_t rowsPerSlice) {
  constexpr int kCols = kColumnTile * P;
  __shared__ A lanes[kValues][kSliceLanes][kCols + 1];
  const int64_t col0 = int64_t(blockIdx.x) * kCols, c = col0 + threadIdx.x * P;
  const int64_t begin = int64_t(blockIdx.y) * rowsPerSlice, end = min(N, begin + rowsPerSlice);
  A acc[P][kValues];
#pragma unroll
  for (int j = 0; j < P; ++j)
#pragma unroll
    for (int k = 0; k < kValues; ++k) acc[j][k] = A(0);
  if (c < C) {  // C is a multiple of P: the whole pack is in range
#pragma unroll 2
    for (int64_t n = begin + threadIdx.y; n < end; n += kSliceLanes) terms.template pack<P>(n, c, acc);
  }
#pragma unroll
  for (int j = 0; j < P; ++j)
#pragma unroll
    for (int k = 0; k < kValues; ++k) lanes[k][threadIdx.y][threadIdx.x * P + j] = acc[j][k];
  __syncthreads();
  for (int i = threadIdx.y * kColumnTile + threadIdx.x; i < kValues * kCols; i += kColumnTile * kSliceLanes) {
    const int k = i / kCols, col = i % kCols;
    if (col0 + col >= C) continue;
    A s = 0;
    for (int r = 0; r < kSliceLanes; ++r) s += lanes[k][r][col];
    partial[(int64_t(k) * gridDim.y + blockIdx.y) * C + col0 + col] = s;  // (kValues, slices, C)
  }
}

// Stage two, block (kColumnTile, kSliceLanes) per column tile and value k = blockIdx.y: thread (cx, ry) adds
// the partials of slices ry, ry + kSliceLanes, ... in order, then row 0 adds the kSliceLanes sums in ry
// order and writes the output, rounded once.
template <int kValues, typename A, typename P>
__global__ void columnFinishKernel(const A* partial, ColumnOutputs<kValues, P> outs, int64_t slices, int64_t C) {
  __shared__ A lanes[kSliceLanes][kColumnTile + 1];
  const int64_t c = int64_t(blockIdx.x) * kColumnTile + threadIdx.x, k = blockIdx.y;
  A s = 0;
  if (c < C) {
#pragma unroll 4
    for (int64_t sl = threadIdx.y; sl < slices; sl += kSliceLanes) s += partial[(k * slices + sl) * C + c];
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  s = 0;
  for (int r = 0; r < kSliceLanes; ++r) s += lanes[r][threadIdx.x];
  P* o = outs.out[k] + c;
  *o = fromAccum<P>(outs.accumulate[k] ? toAccum(*o) + s : s);  // P may be bf16
}

/// Column sums of kValues quantities over an (N, C) array in a fixed order, deterministic and spread over
/// columnSlices(N, C) row slices; `scratch` holds kValues * columnSlices(N, C) * C accumulators. Terms give
/// row n's terms of P consecutive columns (`pack<P>`): Terms::kPack columns with 16-byte loads where
/// `packable()`, one column otherwise; both ways add in the same order.
template <int kValues, typename A, typename P, typename Terms>
void reduceColumns(Terms terms, ColumnOutputs<kValues, P> outs, A* scratch, int64_t N, int64_t C, cudaStream_t stream) {
  if (C == 0) return;
  const int64_t slices = columnSlices(N, C);
  constexpr int kPacked = Terms::kPack;
  const auto partials = [&](auto pack) {
    constexpr int kWidth = decltype(pack)::value;
    columnPartialsKernel<kValues, kWidth, A>
        <<<dim3(ceilDiv(C, kColumnTile * kWidth), static_cast<unsigned>(slices)), dim3(kColumnTile, kSliceLanes), 0,
           stream>>>(terms, scratch, N, C, columnSliceRows(N, C));
  };
  if (kPacked > 1 && terms.packable()) {
    partials(std::integral_constant<int, kPacked>{});
  } else {
    partials(std::integral_constant<int, 1>{});
  }
  CUDA_CHECK_LAUNCH();
  columnFinishKernel<kValues, A, P>
      <<<dim3(ceilDiv(C, kColumnTile), kValues), dim3(kColumnTile, kSliceLanes), 0, stream>>>(scratch, outs, slices, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minidp::kernels::cuda
