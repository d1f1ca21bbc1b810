// Softmax cross-entropy kernels (one block per row, fixed-shape block reductions), then the launchers.
// Rows of V elements, ld apart, start at any element offset (packed V = 50257 is odd), so each row is walked
// as a scalar head up to the first 16-byte boundary, 16-byte packs, and a scalar tail; a padded ld (a
// multiple of 64) leaves no head.
#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cuda_utils.cuh"
#include "kernels/softmax_xent.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 512;

// A running softmax denominator: sum = sum of exp(x - max) over the elements seen.
template <typename A>
struct MaxSum {
  A max;
  A sum;
};

template <typename A>
__device__ __forceinline__ MaxSum<A> shuffleXor(MaxSum<A> v, int offset) {
  return {__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)};
}

// e^(x - m) where each element pays one: in float, one FFMA to base 2, x log2e - (m log2e rounded), as flash
// attention's kernels form theirs, and the SFU's ex2 (2 ulp; results below 2^-126 flushed to 0): 2 instructions
// where expf takes about 7, which bounded the row kernels beside their memory traffic. The rounding of m log2e
// puts the max's own term at 2^r, |r| <= |m| log2e 2^-24, so a row's sum (hence its loss) carries a relative
// error of about |m| 6e-8 (the tests' bounds grow with the logsumexp), and a row whose max exceeds
// FLT_MAX / log2e (2.4e38) gets a loss of -inf. double keeps exp.
__device__ __forceinline__ float expOfDifference(float x, float m) {
  constexpr float kLog2e = 1.44269504088896341f;
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(fmaf(x, kLog2e, -m * kLog2e)));
  return y;
}
__device__ __forceinline__ double expOfDifference(double x, double m) { return exp(x - m); }

// Products that the compiler may not contract into an fma with a neighbouring add.
__device__ __forceinline__ float unfusedMul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double unfusedMul(double a, double b) { return __dmul_rn(a, b); }

// Merges two running sums, commutative bit for bit, so the two lanes of each butterfly step, and hence every
// thread of blockReduce, end with the same bits: both products are rounded before the add (a contracted
// fma(a.sum, ea, b.sum * eb) would round a different product on each side). Empty states (max -inf)
// contribute nothing.
struct MergeMaxSum {
  template <typename A>
  __device__ MaxSum<A> operator()(MaxSum<A> a, MaxSum<A> b) const {
    const A m = fmax(a.max, b.max);
    if (m == -INFINITY) return {m, A(0)};
    return {m, unfusedMul(a.sum, exp(a.max - m)) + unfusedMul(b.sum, exp(b.max - m))};
  }
};

// Adds P values to a running sum: one rescale per P values, one exp per value.
template <int P, typename A>
__device__ __forceinline__ void addValues(MaxSum<A>& s, const A (&v)[P]) {
  A m = v[0];
#pragma unroll
  for (int j = 1; j < P; ++j) m = fmax(m, v[j]);
  if (m > s.max) {
    s.sum *= exp(s.max - m);
    s.max = m;
  }
  if (s.max == -INFINITY) return;
#pragma unroll
  for (int j = 0; j < P; ++j) s.sum += expOfDifference(v[j], s.max);
}

// Elements before the first 16-byte boundary of row x (at most V).
template <typename T>
__device__ __forceinline__ int64_t headLength(const T* x, int64_t V) {
  const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(x) % 16);
  return misaligned == 0 ? 0 : min(V, (16 - misaligned) / static_cast<int64_t>(sizeof(T)));
}

// Walks row x (V): scalar(j) for each element of the head and the tail, packed(j) for each 16-byte pack
// starting at element j; each thread takes every kBlock-th piece.
template <typename T, typename Scalar, typename Packed>
__device__ __forceinline__ void forRow(const T* x, int64_t V, Scalar scalar, Packed packed) {
  constexpr int P = kPack<T>;
  const int64_t head = headLength(x, V);
  const int64_t packs = (V - head) / P;
  const int64_t tail = head + packs * P;
  for (int64_t j = threadIdx.x; j < head; j += kBlock) scalar(j);
  for (int64_t k = threadIdx.x; k < packs; k += kBlock) packed(head + k * P);
  for (int64_t j = tail + threadIdx.x; j < V; j += kBlock) scalar(j);
}

// A valid target, or -1 (the row then gets NaN).
__device__ int64_t checkedTarget(const int32_t* targets, int64_t r, int64_t V) {
  const int32_t t = targets[r];
  return t >= 0 && t < V ? t : -1;
}

// The gradient at element j of a row with logit v, target t and logsumexp l, times scale: every kernel that
// writes a gradient forms it here.
template <typename A>
__device__ __forceinline__ A gradientOf(A v, int64_t j, int64_t t, A l, A scale) {
  return (expOfDifference(v, l) - A(j == t)) * scale;
}

// Writes row x's gradient into dx, which may be x: each element is read before it is overwritten. Each 16-byte
// pack starting at element j, the k-th after the row's head, comes from packAt(j, k): x's own, or a copy held
// in shared memory.
template <typename T, typename PackAt>
__device__ __forceinline__ void writeRowGradient(const T* x, T* dx, int64_t V, int64_t t, AccumOf<T> l,
                                                 AccumOf<T> scale, PackAt packAt) {
  constexpr int P = kPack<T>;
  const int64_t head = headLength(x, V);
  forRow(
      x, V, [&](int64_t j) { dx[j] = fromAccum<T>(gradientOf(toAccum(x[j]), j, t, l, scale)); },
      [&](int64_t j) {
        const Pack16<T> raw = packAt(j, (j - head) / P);
        Pack16<T> out;
#pragma unroll
        for (int i = 0; i < P; ++i) out.v[i] = fromAccum<T>(gradientOf(toAccum(raw.v[i]), j + i, t, l, scale));
        *reinterpret_cast<Pack16<T>*>(dx + j) = out;
      });
}

template <typename T>
__device__ __forceinline__ void writeRowGradient(const T* x, T* dx, int64_t V, int64_t t, AccumOf<T> l,
                                                 AccumOf<T> scale) {
  writeRowGradient(x, dx, V, t, l, scale,
                   [x](int64_t j, int64_t) { return *reinterpret_cast<const Pack16<T>*>(x + j); });
}

// Most bytes of a row the forward-with-gradient holds in shared memory between its two phases: 13 packs a
// thread, so two blocks share an SM (2 x 104 KiB of its 228 KiB). GPT-2's 50304 bf16 classes (98.3 KiB)
// fit; longer rows are read twice.
constexpr int64_t kHeldRowBytes = int64_t(13) * kBlock * 16;

// The row's logsumexp and loss; with kGradient, then the gradient of the mean loss over N rows for an
// upstream gradient of 1, written over the row (dlogits is logits then). With kHold, each 16-byte pack read
// in the first phase is kept in dynamic shared memory (slot = pack index, read back by the thread that
// wrote it) and the gradient is formed from it: one read and one write of the row instead of two reads.
template <typename T, bool kGradient, bool kHold>
__global__ void __launch_bounds__(kBlock, kHold ? 2 : 1)
    forwardKernel(const T* logits, const int32_t* targets, AccumOf<T>* loss, AccumOf<T>* lse, T* dlogits, int64_t N,
                  int64_t V, int64_t ld) {
  static_assert(kGradient || !kHold, "a held row serves the gradient");
  using A = AccumOf<T>;
  constexpr int P = kPack<T>;
  extern __shared__ __align__(16) unsigned char heldRow[];
  Pack16<T>* held = reinterpret_cast<Pack16<T>*>(heldRow);  // kHold: the row's packs
  const int64_t r = blockIdx.x;
  const T* x = logits + r * ld;  // (V)
  const int64_t t = checkedTarget(targets, r, V);
  // Read before the reduction's barriers, so before any thread overwrites the row.
  const A target = threadIdx.x == 0 && t >= 0 ? toAccum(x[t]) : A(NAN);
  MaxSum<A> s{-INFINITY, A(0)};
  // As forRow, with each thread's packs loaded kLoadsInFlight at a time before they are added in the same
  // order: the running sum's dependence would otherwise leave one load in flight per thread.
  constexpr int kLoadsInFlight = 4;
  const int64_t head = headLength(x, V);
  const int64_t packs = (V - head) / P;
  const int64_t tail = head + packs * P;
  const auto addScalar = [&](int64_t j) {
    const A v[1] = {toAccum(x[j])};
    addValues<1>(s, v);
  };
  const auto addPack = [&](const Pack16<T>& raw, int64_t k) {
    if constexpr (kHold) held[k] = raw;
    A v[P];
#pragma unroll
    for (int i = 0; i < P; ++i) v[i] = toAccum(raw.v[i]);
    addValues<P>(s, v);
  };
  const Pack16<T>* xp = reinterpret_cast<const Pack16<T>*>(x + head);
  for (int64_t j = threadIdx.x; j < head; j += kBlock) addScalar(j);
  int64_t k = threadIdx.x;
  for (; k + (kLoadsInFlight - 1) * kBlock < packs; k += kLoadsInFlight * kBlock) {
    Pack16<T> raw[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) raw[u] = xp[k + u * kBlock];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) addPack(raw[u], k + u * kBlock);
  }
  for (; k < packs; k += kBlock) addPack(xp[k], k);
  for (int64_t j = tail + threadIdx.x; j < V; j += kBlock) addScalar(j);
  s = blockReduce<kBlock>(s, MergeMaxSum());  // every thread gets the same bits
  const A l = s.max + log(s.sum);
  if (threadIdx.x == 0) {
    lse[r] = l;
    loss[r] = l - target;  // NaN for a target out of range
  }
  if constexpr (kGradient) {
    const A lt = t >= 0 ? l : A(NAN), scale = A(1) / static_cast<A>(N);
    if constexpr (kHold) {
      writeRowGradient(x, dlogits + r * ld, V, t, lt, scale, [held](int64_t, int64_t k) { return held[k]; });
    } else {
      writeRowGradient(x, dlogits + r * ld, V, t, lt, scale);
    }
  }
}

// Reads each element, then overwrites it (dlogits may alias logits).
template <typename T>
__global__ void __launch_bounds__(kBlock)
    backwardKernel(const T* logits, const int32_t* targets, const AccumOf<T>* lse, const AccumOf<T>* g, T* dlogits,
                   int64_t N, int64_t V, int64_t ld) {
  using A = AccumOf<T>;
  const int64_t r = blockIdx.x;
  const int64_t t = checkedTarget(targets, r, V);
  // dlogits: the same offset from a 16-byte boundary as logits (checked by the launcher)
  writeRowGradient(logits + r * ld, dlogits + r * ld, V, t, t >= 0 ? lse[r] : A(NAN), g[0] / static_cast<A>(N));
}

// dlogits *= g[0], unless g[0] is 1: then no block writes.
template <typename T>
__global__ void __launch_bounds__(kBlock) scaleGradientKernel(T* dlogits, const AccumOf<T>* g, int64_t V, int64_t ld) {
  using A = AccumOf<T>;
  constexpr int P = kPack<T>;
  const A scale = g[0];
  if (scale == A(1)) return;
  T* dx = dlogits + int64_t(blockIdx.x) * ld;
  forRow(
      dx, V, [&](int64_t j) { dx[j] = fromAccum<T>(toAccum(dx[j]) * scale); },
      [&](int64_t j) {
        A v[P];
        loadAccum<P>(dx + j, v);
#pragma unroll
        for (int i = 0; i < P; ++i) v[i] *= scale;
        storeAccum<P>(dx + j, v);
      });
}

void checkSizes(int64_t N, int64_t V, int64_t ld) {
  MINIDP_CHECK(V > 0 && ld >= V, "cross-entropy over " << V << " classes in rows of " << ld);
  MINIDP_CHECK(N <= INT_MAX, "cross-entropy: " << N << " rows exceed the grid");
}

}  // namespace

template <typename T>
void softmaxXentForward(const T* logits, const int32_t* targets, AccumOf<T>* loss, AccumOf<T>* lse, int64_t N,
                        int64_t V, int64_t ld, cudaStream_t stream) {
  checkSizes(N, V, ld);
  if (N == 0) return;
  forwardKernel<T, false, false>
      <<<static_cast<unsigned>(N), kBlock, 0, stream>>>(logits, targets, loss, lse, nullptr, N, V, ld);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmaxXentForwardGradient(T* logits, const int32_t* targets, AccumOf<T>* loss, AccumOf<T>* lse, int64_t N,
                                int64_t V, int64_t ld, cudaStream_t stream) {
  checkSizes(N, V, ld);
  if (N == 0) return;
  const int64_t heldBytes = V / kPack<T> * 16;  // no row has more packs, whatever its head
  const auto kernel = forwardKernel<T, true, true>;
  // Where the device's opt-in limit (less the kernel's static shared memory) leaves no room, the row is read twice.
  const int64_t heldLimit = std::min(kHeldRowBytes, dynamicSharedBytesLimit(kernel));
  if (heldBytes <= heldLimit) {
    allowDynamicSharedBytes(kernel, heldLimit);
    kernel<<<static_cast<unsigned>(N), kBlock, size_t(heldBytes), stream>>>(logits, targets, loss, lse, logits, N, V,
                                                                            ld);
  } else {
    forwardKernel<T, true, false>
        <<<static_cast<unsigned>(N), kBlock, 0, stream>>>(logits, targets, loss, lse, logits, N, V, ld);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmaxXentScaleGradient(T* dlogits, const AccumOf<T>* g, int64_t N, int64_t V, int64_t ld, cudaStream_t stream) {
  checkSizes(N, V, ld);
  if (N == 0) return;
  scaleGradientKernel<T><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(dlogits, g, V, ld);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void softmaxXentBackward(const T* logits, const int32_t* targets, const AccumOf<T>* lse, const AccumOf<T>* g,
                         T* dlogits, int64_t N, int64_t V, int64_t ld, cudaStream_t stream) {
  checkSizes(N, V, ld);
  MINIDP_CHECK(reinterpret_cast<uintptr_t>(logits) % 16 == reinterpret_cast<uintptr_t>(dlogits) % 16,
               "cross-entropy: logits and their gradient must share their offset from a 16-byte boundary");
  if (N == 0) return;
  backwardKernel<T><<<static_cast<unsigned>(N), kBlock, 0, stream>>>(logits, targets, lse, g, dlogits, N, V, ld);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                                          \
  template void softmaxXentForward<T>(const T*, const int32_t*, AccumOf<T>*, AccumOf<T>*, int64_t, int64_t, int64_t,   \
                                      cudaStream_t);                                                                   \
  template void softmaxXentBackward<T>(const T*, const int32_t*, const AccumOf<T>*, const AccumOf<T>*, T*, int64_t,    \
                                       int64_t, int64_t, cudaStream_t);                                                \
  template void softmaxXentForwardGradient<T>(T*, const int32_t*, AccumOf<T>*, AccumOf<T>*, int64_t, int64_t, int64_t, \
                                              cudaStream_t);                                                           \
  template void softmaxXentScaleGradient<T>(T*, const AccumOf<T>*, int64_t, int64_t, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
