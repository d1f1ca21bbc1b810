// Kernels of the composable ops (grid-stride maps; one block per row for the last-dimension sums, the
// two-stage column reduction of cuda_utils.cuh for the leading-dimension sums), then their launchers.
// Each element is loaded into AccumOf<T>, computed there and rounded once to T (bf16: float math).
#include <cmath>
#include <type_traits>

#include "base/check.h"
#include "kernels/composite_kernels.h"
#include "kernels/composite_math.h"
#include "kernels/cuda_utils.cuh"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// The maps below take P consecutive elements per thread and step (16-byte accesses when P = kPack<T>;
// their launchers check that the pointers allow it), the n % P past the last whole pack one per thread:
// `step<Q>(i)` handles elements i .. i + Q - 1.
template <int P, typename Step>
__device__ __forceinline__ void packedMap(int64_t n, Step step) {
  const int64_t thread = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, threads = int64_t(gridDim.x) * blockDim.x;
  const int64_t whole = n / P * P;
  for (int64_t i = thread * P; i < whole; i += threads * P) step(std::integral_constant<int, P>{}, i);
  if (whole + thread < n) step(std::integral_constant<int, 1>{}, whole + thread);
}

// The op (and the broadcast) are template arguments, so that each kernel holds only its own formula: a
// runtime switch kept every formula's registers (pow, exp) in every map and slowed the memory-bound ones.
template <int P, UnaryOp kOp, typename T>
__global__ void unaryForwardKernel(const T* x, AccumOf<T> p, T* y, int64_t n) {
  packedMap<P>(n, [&](auto q, int64_t i) {
    constexpr int Q = decltype(q)::value;
    AccumOf<T> v[Q];
    loadAccum<Q>(x + i, v);
#pragma unroll
    for (int j = 0; j < Q; ++j) v[j] = unaryValue(kOp, v[j], p);
    storeAccum<Q>(y + i, v);
  });
}

template <int P, UnaryOp kOp, typename T>
__global__ void unaryBackwardKernel(const T* x, AccumOf<T> p, const T* dy, T* dx, int64_t n) {
  packedMap<P>(n, [&](auto q, int64_t i) {
    constexpr int Q = decltype(q)::value;
    AccumOf<T> xv[Q], g[Q];
    loadAccum<Q>(x + i, xv);
    loadAccum<Q>(dy + i, g);
#pragma unroll
    for (int j = 0; j < Q; ++j) g[j] = g[j] * unaryDerivative(kOp, xv[j], p);
    storeAccum<Q>(dx + i, g);
  });
}

// P > 1 needs a pack never to straddle two rows of a broadcast b: cols % P == 0 unless b is Same.
template <int P, BinaryOp kOp, Broadcast kBroadcast, typename T, typename B>
__global__ void binaryKernel(const T* a, const B* b, T* out, int64_t n, int64_t cols) {
  packedMap<P>(n, [&](auto q, int64_t i) {
    constexpr int Q = decltype(q)::value;
    AccumOf<T> av[Q], bv[Q];
    if constexpr (kBroadcast == Broadcast::Rows) {
      const AccumOf<T> v = toAccum(b[i / cols]);
#pragma unroll
      for (int j = 0; j < Q; ++j) bv[j] = v;
    } else {
      loadAccum<Q>(b + broadcastIndex(kBroadcast, i, cols), bv);
    }
    if (a) {
      loadAccum<Q>(a + i, av);
    } else {
#pragma unroll
      for (int j = 0; j < Q; ++j) av[j] = AccumOf<T>(0);
    }
#pragma unroll
    for (int j = 0; j < Q; ++j) av[j] = binaryValue(kOp, av[j], bv[j]);
    storeAccum<Q>(out + i, av);
  });
}

// f(std::integral_constant<UnaryOp, op>{}): the op as a template argument.
template <typename F>
void withUnaryOp(UnaryOp op, F&& f) {
  using U = UnaryOp;
  switch (op) {
    case U::Neg: return f(std::integral_constant<U, U::Neg>{});
    case U::Exp: return f(std::integral_constant<U, U::Exp>{});
    case U::Sqrt: return f(std::integral_constant<U, U::Sqrt>{});
    case U::Rsqrt: return f(std::integral_constant<U, U::Rsqrt>{});
    case U::Pow: return f(std::integral_constant<U, U::Pow>{});
    case U::AddScalar: return f(std::integral_constant<U, U::AddScalar>{});
    case U::Sigmoid: return f(std::integral_constant<U, U::Sigmoid>{});
    case U::Silu: return f(std::integral_constant<U, U::Silu>{});
    case U::Square: return f(std::integral_constant<U, U::Square>{});
  }
  MINIDP_CHECK(false, "composable map: unknown unary op " << static_cast<int>(op));
}
// f(op constant, broadcast constant).
template <typename F>
void withBinaryOp(BinaryOp op, Broadcast broadcast, F&& f) {
  using O = BinaryOp;
  const auto withBroadcast = [&](auto kOp) {
    switch (broadcast) {
      case Broadcast::Same: return f(kOp, std::integral_constant<Broadcast, Broadcast::Same>{});
      case Broadcast::Columns: return f(kOp, std::integral_constant<Broadcast, Broadcast::Columns>{});
      case Broadcast::Rows: return f(kOp, std::integral_constant<Broadcast, Broadcast::Rows>{});
    }
    MINIDP_CHECK(false, "composable map: unknown broadcast " << static_cast<int>(broadcast));
  };
  switch (op) {
    case O::Add: return withBroadcast(std::integral_constant<O, O::Add>{});
    case O::Sub: return withBroadcast(std::integral_constant<O, O::Sub>{});
    case O::Mul: return withBroadcast(std::integral_constant<O, O::Mul>{});
    case O::Div: return withBroadcast(std::integral_constant<O, O::Div>{});
    case O::Right: return withBroadcast(std::integral_constant<O, O::Right>{});
  }
  MINIDP_CHECK(false, "composable map: unknown binary op " << static_cast<int>(op));
}

template <typename T>
__global__ void divBackwardKernel(const T* a, const T* b, const T* g, T* da, T* db, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const AccumOf<T> bv = toAccum(b[i]), q = toAccum(g[i]) / bv;
    da[i] = fromAccum<T>(q);
    db[i] = fromAccum<T>(-(q * (toAccum(a[i]) / bv)));
  }
}

// SwiGLU forward (kGrads false: y = silu(a) b) or backward (da, db from g; y too when not null) of elements
// i .. i + Q - 1.
template <int Q, bool kGrads, typename T>
__device__ __forceinline__ void swigluStep(const T* a, const T* b, const T* g, T* y, T* da, T* db, int64_t i) {
  AccumOf<T> av[Q], bv[Q], o1[Q], o2[Q];
  loadAccum<Q>(a + i, av);
  loadAccum<Q>(b + i, bv);
  if constexpr (kGrads) {
    AccumOf<T> gv[Q];
    loadAccum<Q>(g + i, gv);
#pragma unroll
    for (int j = 0; j < Q; ++j) swigluGradients(av[j], bv[j], gv[j], o1[j], o2[j]);
    storeAccum<Q>(da + i, o1);
    storeAccum<Q>(db + i, o2);
    if (y) {  // the forward's value again
#pragma unroll
      for (int j = 0; j < Q; ++j) o1[j] = swigluValue(av[j], bv[j]);
      storeAccum<Q>(y + i, o1);
    }
  } else {
#pragma unroll
    for (int j = 0; j < Q; ++j) o1[j] = swigluValue(av[j], bv[j]);
    storeAccum<Q>(y + i, o1);
  }
}

template <int P, bool kGrads, typename T>
__global__ void swigluKernel(const T* a, const T* b, const T* g, T* y, T* da, T* db, int64_t n) {
  packedMap<P>(n, [&](auto q, int64_t i) { swigluStep<decltype(q)::value, kGrads>(a, b, g, y, da, db, i); });
}

template <bool kGrads, typename T>
void launchSwiglu(const T* a, const T* b, const T* g, T* y, T* da, T* db, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  constexpr int P = kPack<T>;
  const bool vectors =
      aligned16(a) && aligned16(b) && aligned16(y) && (!kGrads || (aligned16(g) && aligned16(da) && aligned16(db)));
  if (vectors) {
    swigluKernel<P, kGrads><<<gridFor(n / P + 1, kBlock), kBlock, 0, s>>>(a, b, g, y, da, db, n);
  } else {
    swigluKernel<1, kGrads><<<gridFor(n, kBlock), kBlock, 0, s>>>(a, b, g, y, da, db, n);
  }
  CUDA_CHECK_LAUNCH();
}

// One block per row: strided partial sums, then blockReduce's fixed order (deterministic).
template <typename T, typename O>
__global__ void sumLastDimKernel(const T* x, const T* y, AccumOf<T> scale, O* out, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * cols;  // x[row .. row + cols), y likewise
    AccumOf<T> s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += kBlock)
      s += y ? toAccum(x[row + c]) * toAccum(y[row + c]) : toAccum(x[row + c]);
    s = blockReduce<kBlock>(s, SumOp());
    if (threadIdx.x == 0) out[r] = fromAccum<O>(s * scale);
  }
}

// The term of row n, column c of a leading-dimension sum: x, or x * y.
template <typename T>
struct ProductTerm {
  static constexpr int kPack = cuda::kPack<T>;
  const T* x;
  const T* y;  // null: plain sums
  int64_t C;
  template <int P>
  __device__ void pack(int64_t n, int64_t c, AccumOf<T> (&acc)[P][1]) const {
    AccumOf<T> xv[P], yv[P];
    loadAccum<P>(x + n * C + c, xv);
    if (y) loadAccum<P>(y + n * C + c, yv);
#pragma unroll
    for (int j = 0; j < P; ++j) acc[j][0] += y ? xv[j] * yv[j] : xv[j];
  }
  bool packable() const { return C % kPack == 0 && aligned16(x) && (!y || aligned16(y)); }
};

template <typename T>
__global__ void gatherRowsKernel(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t v = index[i / C];
    out[i] = v >= 0 && v < V ? table[v * C + i % C] : fromAccum<T>(NAN);
  }
}

}  // namespace

template <typename T>
void unaryForward(UnaryOp op, const T* x, AccumOf<T> p, T* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  constexpr int P = kPack<T>;
  withUnaryOp(op, [&](auto kOp) {
    if (aligned16(x) && aligned16(y)) {
      unaryForwardKernel<P, kOp.value><<<gridFor(n / P + 1, kBlock), kBlock, 0, s>>>(x, p, y, n);
    } else {
      unaryForwardKernel<1, kOp.value><<<gridFor(n, kBlock), kBlock, 0, s>>>(x, p, y, n);
    }
  });
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void unaryBackward(UnaryOp op, const T* x, AccumOf<T> p, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  constexpr int P = kPack<T>;
  withUnaryOp(op, [&](auto kOp) {
    if (aligned16(x) && aligned16(dy) && aligned16(dx)) {
      unaryBackwardKernel<P, kOp.value><<<gridFor(n / P + 1, kBlock), kBlock, 0, s>>>(x, p, dy, dx, n);
    } else {
      unaryBackwardKernel<1, kOp.value><<<gridFor(n, kBlock), kBlock, 0, s>>>(x, p, dy, dx, n);
    }
  });
  CUDA_CHECK_LAUNCH();
}
template <typename T, typename B>
void binaryForward(BinaryOp op, Broadcast broadcast, const T* a, const B* b, T* out, int64_t rows, int64_t cols,
                   cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  constexpr int P = kPack<T>;
  // A Rows operand is read one value per pack: only Same and Columns read b in packs.
  const bool bPacks = broadcast == Broadcast::Rows || aligned16(b);
  const bool packs =
      (broadcast == Broadcast::Same || cols % P == 0) && (!a || aligned16(a)) && bPacks && aligned16(out);
  withBinaryOp(op, broadcast, [&](auto kOp, auto kBroadcast) {
    if (packs) {
      binaryKernel<P, kOp.value, kBroadcast.value><<<gridFor(n / P + 1, kBlock), kBlock, 0, s>>>(a, b, out, n, cols);
    } else {
      binaryKernel<1, kOp.value, kBroadcast.value><<<gridFor(n, kBlock), kBlock, 0, s>>>(a, b, out, n, cols);
    }
  });
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void divBackward(const T* a, const T* b, const T* g, T* da, T* db, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  divBackwardKernel<<<gridFor(n, kBlock), kBlock, 0, s>>>(a, b, g, da, db, n);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void swigluForward(const T* a, const T* b, T* y, int64_t n, cudaStream_t s) {
  launchSwiglu<false>(a, b, static_cast<const T*>(nullptr), y, static_cast<T*>(nullptr), static_cast<T*>(nullptr), n,
                      s);
}
template <typename T>
void swigluBackward(const T* a, const T* b, const T* g, T* da, T* db, T* y, int64_t n, cudaStream_t s) {
  launchSwiglu<true>(a, b, g, y, da, db, n, s);
}
template <typename T, typename O>
void sumLastDim(const T* x, const T* y, AccumOf<T> scale, O* out, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return;
  sumLastDimKernel<<<gridFor(rows, 1), kBlock, 0, s>>>(x, y, scale, out, rows, cols);
  CUDA_CHECK_LAUNCH();
}
template <typename T, typename O>
void sumLeadingDims(const T* x, const T* y, O* out, AccumOf<T>* scratch, int64_t rows, int64_t cols, cudaStream_t s) {
  reduceColumns<1>(ProductTerm<T>{x, y, cols}, ColumnOutputs<1, O>{{out}, {false}}, scratch, rows, cols, s);
}
template <typename T>
void gatherRows(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V, cudaStream_t s) {
  if (n * C == 0) return;
  gatherRowsKernel<<<gridFor(n * C, kBlock), kBlock, 0, s>>>(table, index, out, n, C, V);
  CUDA_CHECK_LAUNCH();
}

// Activations T with the second operand (or sum output) O: T itself, or fp32 beside bf16.
#define MINIDP_INSTANTIATE_PAIR(T, O)                                                                             \
  template void binaryForward<T, O>(BinaryOp, Broadcast, const T*, const O*, T*, int64_t, int64_t, cudaStream_t); \
  template void sumLastDim<T, O>(const T*, const T*, AccumOf<T>, O*, int64_t, int64_t, cudaStream_t);             \
  template void sumLeadingDims<T, O>(const T*, const T*, O*, AccumOf<T>*, int64_t, int64_t, cudaStream_t);
#define MINIDP_INSTANTIATE(T)                                                                         \
  template void unaryForward<T>(UnaryOp, const T*, AccumOf<T>, T*, int64_t, cudaStream_t);            \
  template void unaryBackward<T>(UnaryOp, const T*, AccumOf<T>, const T*, T*, int64_t, cudaStream_t); \
  template void divBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, cudaStream_t);          \
  template void swigluForward<T>(const T*, const T*, T*, int64_t, cudaStream_t);                      \
  template void swigluBackward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, cudaStream_t);   \
  template void gatherRows<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t, cudaStream_t); \
  MINIDP_INSTANTIATE_PAIR(T, T)
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
MINIDP_INSTANTIATE_PAIR(bf16, float)
#undef MINIDP_INSTANTIATE
#undef MINIDP_INSTANTIATE_PAIR

}  // namespace minidp::kernels::cuda
