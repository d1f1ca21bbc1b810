// Causal flash attention, FlashAttention-2 style, then its launchers.
//
// Tiles of kTile = 64 query rows meet tiles of 64 key rows. One skeleton per pass, written once over a
// `Math` policy that owns the tile products and which thread holds which score element:
//   F32Math:  256 threads, exact fp32 FFMA (the reference path); thread (ty, tx) holds rows ty + 16 i,
//             columns tx + 16 j; P goes through shared memory for the P @ V product.
//   Bf16Math: 128 threads = 4 warps of 16 rows; mma.sync m16n8k16 bf16 -> fp32 on tensor cores; the
//             score accumulators are reused in registers as the A operand of P @ V (no shared memory).
// q, k and v are read through AttentionOperands (base pointers, row strides): query head h reads key/value
// head h / G; backward's key pass sums the G query heads of a group in its fp32 accumulators.
// Passes:
//   forward    one CTA per (query tile, head, batch): online softmax over key tiles 0..i, only the
//              diagonal tile masked; y and the row logsumexp (natural log) written.
//   backward   rowDot D = rowsum(dout * out); then one kernel per key tile of a key/value head (dK, dV,
//              looping over its G query heads and, in each, over the query tiles at or after it) and one per
//              query tile (dQ, looping over key tiles up to it),
//              both recomputing P from the logsumexp. Every output element has one writer: no atomics.
//              bf16 at D = 80, 96, 128, given scratch (flashAttentionBackwardScratchBytes): the key pass also
//              stores each dS tile it forms (bf16, as the query pass would round it), and the query pass
//              is one product per key tile, dq += dS @ k, instead of recomputing S, P and dP.
//              Where a thread would hold too many accumulators (bf16 at d = 256), each CTA owns a slice
//              of the d output columns (kSplit slices, blockIdx.y = head * kSplit + slice) and recomputes
//              the scores over the whole d.
// The looped-over tiles are copied with 16-byte cp.async.cg into two shared-memory buffers (the key pass's
// row statistics with 4-byte cp.async.ca): tile j + 1 is in flight while tile j is computed (commit /
// wait_group 1). Each thread's chunks of a tile share one column, so a copy is a pointer step. Rows past
// the sequence end are never read: their shared rows are zeroed by plain stores, and padding query rows
// get logsumexp +inf, so their probabilities are exactly 0.
// Forward: the running max is kept in scaled units, so p = exp2(s sc - m) is one FFMA and one exp2.
// bf16 outputs are stored as column pairs (4 bytes) where the destination is 4-byte aligned and its row
// stride even, else one element at a time.
// bf16 on sm_90: flashAttentionForward<bf16> and flashAttentionBackward<bf16> run the TMA + wgmma kernels of
// kernels/flash_attention_sm90*.cu where the attention mode asks for them (by default the forward, and the
// backward at head dims >= 128; kernels/flash_attention_sm90.h) and they are available; these kernels otherwise.
// fp32 at a head dim whose six tiles do not fit in a CTA's shared memory (256) takes row kernels
// instead: a warp per query or key row, the rows it meets read from global memory (L2), no tiles.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_sm90.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kTile = 64;  // query rows and key rows per tile

// ---- cp.async ----

// 16 bytes global -> shared, bypassing L1.
__device__ void cpAsync16(void* dst, const void* src) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(src));
}
// 4 bytes global -> shared (.ca, through L1: .cg copies 16 bytes only).
__device__ void cpAsync4(void* dst, const void* src) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(addr), "l"(src));
}
__device__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Starts copying rows [0, kTile) of a matrix whose rows are `stride` elements apart (the first D used)
// into shared rows of `ld` elements. Rows at or past `validRows` lie past the sequence end: no copy is
// issued for them (no instruction names their global address) and their shared chunks are zeroed by
// plain stores, visible with the copies after the caller's wait and barrier.
template <typename E, int D, int kThreads>
__device__ void loadTileAsync(E* dst, int ld, const E* src, int64_t stride, int validRows) {
  constexpr int kPerChunk = 16 / sizeof(E), kChunks = D / kPerChunk;
  static_assert(D % kPerChunk == 0, "tile rows are copied in 16-byte chunks");
  if constexpr (kThreads % kChunks == 0 && kTile * kChunks % kThreads == 0) {
    // Every chunk of a thread lies in the same column, its rows kStep apart: a pointer step per chunk,
    // no index arithmetic (the loop runs every tile of every pass).
    constexpr int kStep = kThreads / kChunks;
    const int r0 = threadIdx.x / kChunks, col = threadIdx.x % kChunks * kPerChunk;
    const E* from = src + r0 * stride + col;
    E* to = dst + r0 * ld + col;
#pragma unroll
    for (int i = 0; i < kTile / kStep; ++i) {
      if (r0 + i * kStep < validRows) {
        cpAsync16(to + i * kStep * ld, from);
      } else {
        *reinterpret_cast<uint4*>(to + i * kStep * ld) = make_uint4(0u, 0u, 0u, 0u);
      }
      from += kStep * stride;
    }
  } else {
    for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
      const int r = c / kChunks, col = c % kChunks * kPerChunk;
      if (r < validRows) {
        cpAsync16(dst + r * ld + col, src + r * stride + col);
      } else {
        *reinterpret_cast<uint4*>(dst + r * ld + col) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
}

__device__ float toFloat(float x) { return x; }
__device__ float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename E>
__device__ E fromFloat(float x);
template <>
__device__ float fromFloat<float>(float x) {
  return x;
}
template <>
__device__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// All-lane max / sum over the kLanes consecutive lanes that share a row: a butterfly, so every lane
// ends with the same bits.
template <int kLanes>
__device__ float rowMax(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
template <int kLanes>
__device__ float rowSum(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// ---- F32Math: exact fp32, block-wide register tiles ----

struct F32Math {
  using Elem = float;
  static constexpr int kThreads = 256;
  static constexpr bool kPairedColumns = false;  // a thread's output columns lie 16 apart
  static constexpr int kMinBlocks = 1;  // without it ptxas caps registers low and spills the forward
  static constexpr int kPad = 4;        // shared rows of D + 4 floats: 16-byte aligned, A rows conflict-free
  static constexpr int kLdP = 80;       // P rows: the two half-warps' rows land 16 banks apart
  static constexpr int kScratchFloats = kTile * kLdP;
  static constexpr int kRows = 4;  // rows per thread
  static constexpr int kRowLanes = 16;
  static constexpr int kScores = 16;        // score elements per thread (4 rows x 4 columns)
  static constexpr int kOutPer16 = 4;       // output elements per thread per 16 columns of D
  static constexpr float kExpScale = 1.0f;  // statistics in natural-log units

  int ty, tx;
  __device__ F32Math() : ty(threadIdx.x / 16), tx(threadIdx.x % 16) {}

  static __device__ float exp(float x) { return expf(x); }
  static __device__ float log(float x) { return logf(x); }
  __device__ int slotRow(int slot) const { return ty + 16 * slot; }
  __device__ bool writesRowStats() const { return tx == 0; }
  // Score element e: row slot e / 4, column tx + 16 (e % 4).
  static __device__ int scoreSlot(int e) { return e / 4; }
  __device__ int scoreCol(int e) const { return tx + 16 * (e % 4); }
  // Output element e of a (kTile, D) tile: row slot e / (D / 16), column tx + 16 (e % (D / 16)).
  template <int D>
  static __device__ int outSlot(int e) {
    return e / (D / 16);
  }
  template <int D>
  __device__ int outCol(int e) const {
    return tx + 16 * (e % (D / 16));
  }

  // s = a @ b^T: a and b are (kTile, D) tiles in shared memory with rows `ld` apart.
  template <int D>
  __device__ void scores(float (&s)[kScores], const float* a, const float* b, int ld, float*) const {
#pragma unroll
    for (int e = 0; e < kScores; ++e) s[e] = 0.0f;
      // Four k at a time as float4 (rows are 16-byte aligned); the products still add in k order.
#pragma unroll 2
    for (int k = 0; k < D; k += 4) {
      float4 av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = *reinterpret_cast<const float4*>(a + (ty + 16 * i) * ld + k);
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = *reinterpret_cast<const float4*>(b + (tx + 16 * j) * ld + k);
#pragma unroll
      for (int e = 0; e < kScores; ++e) {
        const float4 x = av[e / 4], y = bv[e % 4];
        s[e] = fmaf(x.w, y.w, fmaf(x.z, y.z, fmaf(x.y, y.y, fmaf(x.x, y.x, s[e]))));
      }
    }
  }

  // acc += p @ b: p the (kTile, kTile) score tile held as by scores(), b a (kTile, D) tile. p passes
  // through `scratch`; starts and ends with a barrier, so scratch may be reused right after.
  template <int D>
  __device__ void accumulate(float (&acc)[kOutPer16 * D / 16], const float (&p)[kScores], const float* b, int ld,
                             float* scratch) const {
    constexpr int kCols = D / 16;
#pragma unroll
    for (int e = 0; e < kScores; ++e) scratch[slotRow(scoreSlot(e)) * kLdP + scoreCol(e)] = p[e];
    __syncthreads();
#pragma unroll 2
    for (int k = 0; k < kTile; k += 4) {
      float4 av[4];  // p rows, four k at a time
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = *reinterpret_cast<const float4*>(scratch + (ty + 16 * i) * kLdP + k);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float bv[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) bv[j] = b[(k + kk) * ld + tx + 16 * j];
#pragma unroll
        for (int e = 0; e < kOutPer16 * D / 16; ++e) {
          const float4 x = av[e / kCols];
          const float pk = kk == 0 ? x.x : kk == 1 ? x.y : kk == 2 ? x.z : x.w;
          acc[e] = fmaf(pk, bv[e % kCols], acc[e]);
        }
      }
    }
    __syncthreads();
  }
};

// ---- Bf16Math: tensor cores, warp-wide fragments ----

// Two floats as a bf16x2 register: `lo` in the low half (the lower column of a fragment).
__device__ uint32_t packBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// c[0..3] (16 x 8, fp32) += a (16 x 16, bf16, row) @ b (16 x 8, bf16, col).
__device__ void mma16816(float* c, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 bf16 matrices: lane l gives the address of row l % 8 of matrix l / 8; thread (g, t) receives
// row g, columns 2 t and 2 t + 1 of each.
__device__ void ldmatrixX4(uint32_t (&r)[4], const __nv_bfloat16* rowAddr) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(rowAddr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same, transposed.
__device__ void ldmatrixX4Trans(uint32_t (&r)[4], const __nv_bfloat16* rowAddr) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(rowAddr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

struct Bf16Math {
  using Elem = __nv_bfloat16;
  static constexpr int kThreads = 128;
  static constexpr bool kPairedColumns = true;  // output elements 2 i, 2 i + 1: adjacent columns of a row
  static constexpr int kMinBlocks = 0;  // ptxas's own choice: fewer registers, more CTAs per SM
  static constexpr int kPad = 8;        // rows of D + 8 bf16 (16-byte aligned): fragment loads conflict-free
  static constexpr int kScratchFloats = 0;
  static constexpr int kRows = 2;  // rows g and g + 8 of the warp's 16
  static constexpr int kRowLanes = 4;
  static constexpr int kScores = 32;   // 8 n-tiles of 16 x 8, 4 elements each
  static constexpr int kOutPer16 = 8;  // output elements per thread per 16 columns of D (two n-tiles)
  static constexpr float kExpScale = 1.4426950408889634f;  // statistics in log2 units: exp2f is one MUFU op

  int warp, g, t;  // mma fragment coordinates: group g = lane / 4, thread-in-group t = lane % 4
  __device__ Bf16Math() : warp(threadIdx.x / 32), g(threadIdx.x % 32 / 4), t(threadIdx.x % 4) {}

  static __device__ float exp(float x) { return exp2f(x); }
  static __device__ float log(float x) { return log2f(x); }
  __device__ int slotRow(int slot) const { return 16 * warp + g + 8 * slot; }
  __device__ bool writesRowStats() const { return t == 0; }
  // Accumulator element e: n-tile e / 4; e % 4 = 0, 1: row g, columns 2 t, 2 t + 1; 2, 3: row g + 8.
  static __device__ int scoreSlot(int e) { return e % 4 / 2; }
  __device__ int scoreCol(int e) const { return e / 4 * 8 + 2 * t + e % 2; }
  template <int D>
  static __device__ int outSlot(int e) {
    return scoreSlot(e);
  }
  template <int D>
  __device__ int outCol(int e) const {
    return scoreCol(e);
  }

  // s = a @ b^T for the warp's 16 rows of a: a and b are (kTile, D) tiles with rows `ld` apart, so b's rows
  // serve directly as the "col" B operand. ldmatrix gives a's m16k16 fragment, and two n-tiles' of b at once.
  template <int D>
  __device__ void scores(float (&s)[kScores], const Elem* a, const Elem* b, int ld, float*) const {
#pragma unroll
    for (int e = 0; e < kScores; ++e) s[e] = 0.0f;
    const int lane = threadIdx.x % 32;
    const Elem* aRow = a + (16 * warp + lane % 16) * ld + lane / 16 * 8;        // rows 0-15, k half lane / 16
    const Elem* bRow = b + (lane / 16 * 8 + lane % 8) * ld + lane / 8 % 2 * 8;  // n-tile 2 np + lane / 16, k half
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      ldmatrixX4(af, aRow + kk * 16);
#pragma unroll
      for (int np = 0; np < kTile / 16; ++np) {
        uint32_t bf[4];
        ldmatrixX4(bf, bRow + np * 16 * ld + kk * 16);
        mma16816(s + 8 * np, af, bf[0], bf[1]);
        mma16816(s + 8 * np + 4, af, bf[2], bf[3]);
      }
    }
  }

  // acc += p @ b: p the warp's (16, kTile) scores, rounded to bf16 in registers (an m16n8 accumulator
  // pair is exactly an m16k16 A fragment); b a (kTile, D) tile read transposed by ldmatrix.
  template <int D>
  __device__ void accumulate(float (&acc)[kOutPer16 * D / 16], const float (&p)[kScores], const Elem* b, int ld,
                             float*) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    const Elem* bRow = b + ((m & 1) * 8 + lane % 8) * ld + (m >> 1) * 8;
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      const float* lo = p + 8 * kk;  // n-tiles 2 kk and 2 kk + 1 of the scores
      const uint32_t af[4] = {packBf16(lo[0], lo[1]), packBf16(lo[2], lo[3]), packBf16(lo[4], lo[5]),
                              packBf16(lo[6], lo[7])};
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t bf[4];
        ldmatrixX4Trans(bf, bRow + kk * 16 * ld + np * 16);
        mma16816(acc + 8 * np, af, bf[0], bf[1]);
        mma16816(acc + 8 * np + 4, af, bf[2], bf[3]);
      }
    }
  }

  // The warp's 16 rows of a (kTile, kTile) fp32 score tile, rounded to bf16 as accumulate() rounds its A
  // operand, into dst (rows `ld` elements apart): a thread's two columns of a row as one 4-byte store.
  __device__ void storeScores(Elem* dst, int64_t ld, const float (&s)[kScores]) const {
#pragma unroll
    for (int e = 0; e < kScores; e += 2) {
      *reinterpret_cast<uint32_t*>(dst + slotRow(scoreSlot(e)) * ld + scoreCol(e)) = packBf16(s[e], s[e + 1]);
    }
  }

  // acc += a @ b for the warp's 16 rows of a, where a (kTile, kTile) is held transposed in shared memory
  // (at[k][r], rows `lda` apart: the key pass's dS^T tiles) and read back by ldmatrix.trans; b a (kTile, D)
  // tile read transposed as in accumulate().
  template <int D>
  __device__ void accumulateTransposed(float (&acc)[kOutPer16 * D / 16], const Elem* at, int lda, const Elem* b,
                                       int ld) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    // Matrix m: keys (m >> 1) 8 .. + 7 of the k-step, this warp's rows (m & 1) 8 .. + 7: a0 .. a3 in order.
    const Elem* aRow = at + ((m >> 1) * 8 + lane % 8) * lda + 16 * warp + (m & 1) * 8;
    const Elem* bRow = b + ((m & 1) * 8 + lane % 8) * ld + (m >> 1) * 8;
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t af[4];
      ldmatrixX4Trans(af, aRow + kk * 16 * lda);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t bf[4];
        ldmatrixX4Trans(bf, bRow + kk * 16 * ld + np * 16);
        mma16816(acc + 8 * np, af, bf[0], bf[1]);
        mma16816(acc + 8 * np + 4, af, bf[2], bf[3]);
      }
    }
  }
};

// Shared memory of one CTA: `tiles` (kTile, D + kPad) tiles of Elem, then `floats` floats.
template <class Math, int D>
constexpr size_t sharedBytes(int tiles, int floats) {
  return size_t(tiles) * kTile * (D + Math::kPad) * sizeof(typename Math::Elem) + size_t(floats) * sizeof(float);
}

// Stores value(e) for each accumulator element e of a (rows, Dc) tile into rows [row0, seqLen) of dst (rows
// `stride` apart): a bf16 thread's two adjacent columns as one 4-byte store where dst and stride allow.
template <class Math, int Dc, class Value>
__device__ void storeTile(const Math& math, Value value, typename Math::Elem* dst, int64_t stride, int row0,
                          int seqLen) {
  constexpr int kElems = Math::kOutPer16 * Dc / 16;
  if constexpr (Math::kPairedColumns) {
    if (reinterpret_cast<uintptr_t>(dst) % 4 == 0 && stride % 2 == 0) {
#pragma unroll
      for (int e = 0; e < kElems; e += 2) {  // elements e, e + 1: columns c, c + 1 of one row, c even
        const int row = row0 + math.slotRow(Math::template outSlot<Dc>(e));
        if (row < seqLen) {
          *reinterpret_cast<__nv_bfloat162*>(dst + row * stride + math.template outCol<Dc>(e)) =
              __floats2bfloat162_rn(value(e), value(e + 1));
        }
      }
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    const int row = row0 + math.slotRow(Math::template outSlot<Dc>(e));
    if (row < seqLen) dst[row * stride + math.template outCol<Dc>(e)] = fromFloat<typename Math::Elem>(value(e));
  }
}

// ---- forward ----

// Row 0 of head `head` of batch b in x, whose rows (tokens) lie `stride` elements apart: a (T, d) matrix.
template <typename P>
__device__ P* headRows(P* x, int64_t stride, int b, int seqLen, int64_t head, int D) {
  return x + int64_t(b) * seqLen * stride + head * D;
}

// Key and value tiles of one (batch, head), streamed through two shared buffers each: tile j lives in
// buffer j & 1, and tile j + 1 is in flight while tile j is computed.
template <typename E, int D, int kThreads, int kLd>
struct KeyValueStream {
  static constexpr int kTileElems = kTile * kLd;
  E* sK;       // two (kTile, kLd) buffers
  E* sV;       // two (kTile, kLd) buffers
  const E* k;  // (T, d) rows kStride apart
  const E* v;  // (T, d) rows vStride apart
  int64_t kStride, vStride;
  int seqLen;

  // Starts copying tile j into its buffers (the caller commits).
  __device__ void load(int j) const {
    const int row0 = j * kTile, buf = j & 1;
    loadTileAsync<E, D, kThreads>(sK + buf * kTileElems, kLd, k + row0 * kStride, kStride, seqLen - row0);
    loadTileAsync<E, D, kThreads>(sV + buf * kTileElems, kLd, v + row0 * vStride, vStride, seqLen - row0);
  }
  // Starts tile j + 1 when j < last, then waits until tile j (and everything committed before) has landed.
  __device__ void advance(int j, int last) const {
    if (j < last) {
      load(j + 1);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
  }
  __device__ const E* key(int j) const { return sK + (j & 1) * kTileElems; }
  __device__ const E* value(int j) const { return sV + (j & 1) * kTileElems; }
};

template <class Math, int D>
__global__ void __launch_bounds__(Math::kThreads, Math::kMinBlocks)
    flashForwardKernel(AttentionOperands<typename Math::Elem> in, typename Math::Elem* out, float* lse, int seqLen,
                       int H, float scale) {
  using E = typename Math::Elem;
  constexpr int kLd = D + Math::kPad, kTileElems = kTile * kLd;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sK = sQ + kTileElems;      // two buffers
  E* sV = sK + 2 * kTileElems;  // two buffers
  float* scratch = reinterpret_cast<float*>(sV + 2 * kTileElems);
  const int qTile = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int h = blockIdx.y, b = blockIdx.z, C = H * D, q0 = qTile * kTile;
  const int64_t kvHead = h / in.group;
  const E* q = headRows(in.q, in.qStride, b, seqLen, h, D);       // (T, d) rows qStride apart
  const E* k = headRows(in.k, in.kStride, b, seqLen, kvHead, D);  // key/value head h / G
  const E* v = headRows(in.v, in.vStride, b, seqLen, kvHead, D);
  const KeyValueStream<E, D, Math::kThreads, kLd> kv{sK, sV, k, v, in.kStride, in.vStride, seqLen};
  loadTileAsync<E, D, Math::kThreads>(sQ, kLd, q + q0 * in.qStride, in.qStride, seqLen - q0);
  kv.load(0);
  cpAsyncCommit();

  const Math math;
  const float sc = scale * Math::kExpScale;
  float s[Math::kScores], o[Math::kOutPer16 * D / 16], m[Math::kRows], l[Math::kRows];
#pragma unroll
  for (int e = 0; e < Math::kOutPer16 * D / 16; ++e) o[e] = 0.0f;
#pragma unroll
  for (int r = 0; r < Math::kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;  // this thread's share of the row sum; the row's lanes are summed at the end
  }
  for (int kt = 0; kt <= qTile; ++kt) {
    kv.advance(kt, qTile);
    math.template scores<D>(s, sQ, kv.key(kt), kLd, scratch);
    float tileMax[Math::kRows];
#pragma unroll
    for (int r = 0; r < Math::kRows; ++r) tileMax[r] = -INFINITY;
#pragma unroll
    for (int e = 0; e < Math::kScores; ++e) {
      const int slot = Math::scoreSlot(e);
      const bool masked = kt == qTile && math.scoreCol(e) > math.slotRow(slot);  // key > query: diagonal only
      if (masked) s[e] = -INFINITY;
      tileMax[slot] = fmaxf(tileMax[slot], s[e]);
    }
    float correction[Math::kRows];
#pragma unroll
    for (int r = 0; r < Math::kRows; ++r) {
      // The running max m is in scaled units: the raw scores' max times sc (sc > 0 and rounding is monotonic,
      // so it is the max of the scaled scores). Key 0 is in the first tile and visible to every row, so m is
      // finite from then on.
      const float mNew = fmaxf(m[r], rowMax<Math::kRowLanes>(tileMax[r]) * sc);
      correction[r] = Math::exp(m[r] - mNew);
      m[r] = mNew;
      l[r] *= correction[r];
    }
#pragma unroll
    for (int e = 0; e < Math::kScores; ++e) {
      const int slot = Math::scoreSlot(e);
      s[e] = Math::exp(fmaf(s[e], sc, -m[slot]));  // one FFMA; a masked score gives exp(-inf) = 0
      l[slot] += s[e];
    }
#pragma unroll
    for (int e = 0; e < Math::kOutPer16 * D / 16; ++e) o[e] *= correction[Math::template outSlot<D>(e)];
    math.template accumulate<D>(o, s, kv.value(kt), kLd, scratch);
    __syncthreads();  // this tile's buffers are refilled by the next iteration's copies
  }

#pragma unroll
  for (int r = 0; r < Math::kRows; ++r) l[r] = rowSum<Math::kRowLanes>(l[r]);
  storeTile<Math, D>(
      math, [&](int e) { return o[e] / l[Math::template outSlot<D>(e)]; }, out + int64_t(b) * seqLen * C + h * D, C, q0,
      seqLen);
  if (math.writesRowStats()) {
#pragma unroll
    for (int r = 0; r < Math::kRows; ++r) {
      const int row = q0 + math.slotRow(r);
      if (row < seqLen) lse[(int64_t(b) * H + h) * seqLen + row] = (m[r] + Math::log(l[r])) / Math::kExpScale;
    }
  }
}

// ---- backward ----

// Lanes that share one row of rowDotKernel: the 16-byte chunks of a row, rounded up to a power of two
// (at most the warp); a lane takes chunks lane, lane + kLanes, ...
__host__ __device__ constexpr int rowDotLanes(int chunks) {
  int lanes = 1;
  while (lanes < chunks && lanes < 32) lanes *= 2;
  return lanes;
}

// rowDot[b, h, t] = sum_c dout[b, t, h d + c] * out[b, t, h d + c], in fp32. A row of D elements is read
// as 16-byte vectors by kLanes consecutive lanes (a warp covers several rows), then summed by a butterfly
// over those lanes: a fixed order.
template <typename E, int D>
__global__ void rowDotKernel(const E* dout, const E* out, float* rowDot, int64_t rows, int seqLen, int H) {
  constexpr int kVec = 16 / sizeof(E), kChunks = D / kVec, kLanes = rowDotLanes(kChunks), kRowsPerWarp = 32 / kLanes;
  static_assert(D % kVec == 0, "rowDot: D must be a multiple of the vector width");
  struct alignas(16) Vec {
    E v[kVec];
  };
  const int lane = threadIdx.x % 32;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t row = warp * kRowsPerWarp + lane / kLanes;  // (b, t, h) order
  float sum = 0.0f;
  if (row < rows) {
    for (int c = lane % kLanes; c < kChunks; c += kLanes) {
      const Vec a = reinterpret_cast<const Vec*>(dout + row * D)[c];
      const Vec o = reinterpret_cast<const Vec*>(out + row * D)[c];
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += toFloat(a.v[j]) * toFloat(o.v[j]);
    }
  }
  sum = rowSum<kLanes>(sum);  // every lane takes part: the shuffles need the whole warp
  if (row >= rows || lane % kLanes != 0) return;
  const int64_t h = row % H, t = row / H % seqLen, b = row / (int64_t(H) * seqLen);
  rowDot[(b * H + h) * seqLen + t] = sum;
}

// dQ of one query tile: dS = P * (dout @ v^T - D), dq = scale * dS @ k over key tiles 0..i; the CTA
// writes columns [slice Dc, slice Dc + Dc) of dq, Dc = D / kSplit.
template <class Math, int D, int kSplit>
__global__ void __launch_bounds__(Math::kThreads, Math::kMinBlocks)
    flashBackwardQueryKernel(const typename Math::Elem* dout, AttentionOperands<typename Math::Elem> in,
                             const float* lse, const float* rowDot, AttentionGradients<typename Math::Elem> grads,
                             int seqLen, int H, float scale) {
  using E = typename Math::Elem;
  constexpr int kLd = D + Math::kPad, kTileElems = kTile * kLd, Dc = D / kSplit;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sDout = sQ + kTileElems;
  E* sK = sDout + kTileElems;   // two buffers
  E* sV = sK + 2 * kTileElems;  // two buffers
  float* scratch = reinterpret_cast<float*>(sV + 2 * kTileElems);
  const int qTile = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y / kSplit, col0 = blockIdx.y % kSplit * Dc, b = blockIdx.z, C = H * D, q0 = qTile * kTile;
  const int64_t kvHead = h / in.group;
  const E* q = headRows(in.q, in.qStride, b, seqLen, h, D);
  const E* dy = dout + int64_t(b) * seqLen * C + h * D;           // (T, d) rows C apart
  const E* k = headRows(in.k, in.kStride, b, seqLen, kvHead, D);  // key/value head h / G
  const E* v = headRows(in.v, in.vStride, b, seqLen, kvHead, D);
  const KeyValueStream<E, D, Math::kThreads, kLd> kv{sK, sV, k, v, in.kStride, in.vStride, seqLen};
  loadTileAsync<E, D, Math::kThreads>(sQ, kLd, q + q0 * in.qStride, in.qStride, seqLen - q0);
  loadTileAsync<E, D, Math::kThreads>(sDout, kLd, dy + int64_t(q0) * C, C, seqLen - q0);
  kv.load(0);
  cpAsyncCommit();

  const Math math;
  const float sc = scale * Math::kExpScale;
  float rowLse[Math::kRows], rowD[Math::kRows];
#pragma unroll
  for (int r = 0; r < Math::kRows; ++r) {
    const int row = q0 + math.slotRow(r);
    const int64_t i = (int64_t(b) * H + h) * seqLen + row;
    rowLse[r] = row < seqLen ? __fmul_rn(lse[i], Math::kExpScale) : INFINITY;
    rowD[r] = row < seqLen ? rowDot[i] : 0.0f;
  }
  float s[Math::kScores], dp[Math::kScores], dq[Math::kOutPer16 * Dc / 16];
#pragma unroll
  for (int e = 0; e < Math::kOutPer16 * Dc / 16; ++e) dq[e] = 0.0f;
  for (int kt = 0; kt <= qTile; ++kt) {
    kv.advance(kt, qTile);
    math.template scores<D>(s, sQ, kv.key(kt), kLd, scratch);
    math.template scores<D>(dp, sDout, kv.value(kt), kLd, scratch);
#pragma unroll
    for (int e = 0; e < Math::kScores; ++e) {
      const int slot = Math::scoreSlot(e);
      const bool masked = kt == qTile && math.scoreCol(e) > math.slotRow(slot);
      // One FFMA, written out: the key pass forms the same P bit for bit (no contraction left to ptxas).
      const float p = masked ? 0.0f : Math::exp(fmaf(s[e], sc, -rowLse[slot]));
      s[e] = p * (dp[e] - rowD[slot]);
    }
    math.template accumulate<Dc>(dq, s, kv.key(kt) + col0, kLd, scratch);
    __syncthreads();
  }
  storeTile<Math, Dc>(
      math, [&](int e) { return dq[e] * scale; }, headRows(grads.dq, grads.dqStride, b, seqLen, h, D) + col0,
      grads.dqStride, q0, seqLen);
}

// The (kTile, kTile) dS^T tile of query tile qt and key tile kt <= qt of (batch b, query head h) in the
// key pass's score scratch: per (b, h), the tiles of query tile 0, 1, ... in turn (those of one query tile
// adjacent, key tile 0 first), each row-major with keys as rows.
template <typename P>
__device__ P* scoreTile(P* scores, int b, int h, int H, int qTiles, int qt, int kt) {
  const int64_t perHead = int64_t(qTiles) * (qTiles + 1) / 2;
  return scores + ((int64_t(b) * H + h) * perHead + int64_t(qt) * (qt + 1) / 2 + kt) * kTile * kTile;
}

// dQ of one query tile from the dS tiles the key pass stored: dq = scale * sum over key tiles 0..i of
// dS @ k, both streamed through two shared buffers (cp.async), as the query pass's loop without its scores.
template <int D>
__global__ void __launch_bounds__(Bf16Math::kThreads)
    flashBackwardQueryFromScoresKernel(const __nv_bfloat16* scores, AttentionOperands<__nv_bfloat16> in,
                                       AttentionGradients<__nv_bfloat16> grads, int seqLen, int H, float scale) {
  using Math = Bf16Math;
  using E = __nv_bfloat16;
  constexpr int kLd = D + Math::kPad, kTileElems = kTile * kLd;
  constexpr int kScoreLd = kTile + Math::kPad, kScoreElems = kTile * kScoreLd;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sK = reinterpret_cast<E*>(smem);  // two buffers
  E* sS = sK + 2 * kTileElems;         // two buffers of dS^T
  const int qTile = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, q0 = qTile * kTile, qTiles = gridDim.x;
  const E* k = headRows(in.k, in.kStride, b, seqLen, h / in.group, D);
  const E* tiles = scoreTile(scores, b, h, H, qTiles, qTile, 0);  // key tiles 0..qTile, adjacent
  // Key tile j's rows of k and its dS^T tile (every row written by the key pass) into buffer j & 1.
  const auto load = [&](int j) {
    const int row0 = j * kTile, buf = j & 1;
    loadTileAsync<E, D, Math::kThreads>(sK + buf * kTileElems, kLd, k + row0 * in.kStride, in.kStride, seqLen - row0);
    loadTileAsync<E, kTile, Math::kThreads>(sS + buf * kScoreElems, kScoreLd, tiles + j * kTile * kTile, kTile, kTile);
  };
  load(0);
  cpAsyncCommit();
  const Math math;
  float dq[Math::kOutPer16 * D / 16];
#pragma unroll
  for (int e = 0; e < Math::kOutPer16 * D / 16; ++e) dq[e] = 0.0f;
  for (int kt = 0; kt <= qTile; ++kt) {
    if (kt < qTile) {
      load(kt + 1);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    math.template accumulateTransposed<D>(dq, sS + (kt & 1) * kScoreElems, kScoreLd, sK + (kt & 1) * kTileElems, kLd);
    __syncthreads();  // this tile's buffers are refilled by the next iteration's copies
  }
  storeTile<Math, D>(
      math, [&](int e) { return dq[e] * scale; }, headRows(grads.dq, grads.dqStride, b, seqLen, h, D), grads.dqStride,
      q0, seqLen);
}

// dK, dV of one key tile of key/value head j, over its query heads j G .. j G + G - 1 and in each over the
// query tiles at or after the key tile: with S^T = k q^T (keys as rows), dv += P^T @ dout,
// dS^T = P^T * (v @ dout^T - D), dk = scale * dS^T @ q; the CTA writes columns [slice Dc, slice Dc + Dc)
// of dk and dv, Dc = D / kSplit. blockIdx.y = j * kSplit + slice.
// kStoreScores (Bf16Math at head dims 80, 96, 128: storesScores): each dS^T tile is also written to `scores` for the
// query pass (scoreTile's layout).
template <class Math, int D, int kSplit, bool kStoreScores>
__global__ void __launch_bounds__(Math::kThreads, Math::kMinBlocks)
    flashBackwardKeyKernel(const typename Math::Elem* dout, AttentionOperands<typename Math::Elem> in, const float* lse,
                           const float* rowDot, AttentionGradients<typename Math::Elem> grads,
                           typename Math::Elem* scores, int seqLen, int H, float scale) {
  using E = typename Math::Elem;
  constexpr int kLd = D + Math::kPad, kTileElems = kTile * kLd, Dc = D / kSplit;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sK = reinterpret_cast<E*>(smem);
  E* sV = sK + kTileElems;
  E* sQ = sV + kTileElems;                                         // two buffers
  E* sDout = sQ + 2 * kTileElems;                                  // two buffers
  float* sLse = reinterpret_cast<float*>(sDout + 2 * kTileElems);  // two buffers of kTile
  float* sD = sLse + 2 * kTile;                                    // two buffers of kTile
  float* scratch = sD + 2 * kTile;
  const int kTileIndex = blockIdx.x;  // the most query tiles first
  const int kvHead = blockIdx.y / kSplit, col0 = blockIdx.y % kSplit * Dc, b = blockIdx.z, C = H * D,
            k0 = kTileIndex * kTile;
  const int qTiles = (seqLen + kTile - 1) / kTile, steps = qTiles - kTileIndex;  // query tiles per head
  const int group = int(in.group);
  const E* k = headRows(in.k, in.kStride, b, seqLen, kvHead, D);
  const E* v = headRows(in.v, in.vStride, b, seqLen, kvHead, D);
  // Step i of the loop: query head kvHead G + i / steps, query tile kTileIndex + i % steps, into buffer buf:
  // q, dout and the row statistics by cp.async (committed by the caller: no thread waits on a global load
  // here), the rows past the sequence end by plain stores (visible after the caller's barrier).
  auto loadQueryTile = [&](int i, int buf) {
    const int h = kvHead * group + i / steps, row0 = (kTileIndex + i % steps) * kTile;
    const E* q = headRows(in.q, in.qStride, b, seqLen, h, D);
    const E* dy = dout + int64_t(b) * seqLen * C + h * D;
    const float* rowLse = lse + (int64_t(b) * H + h) * seqLen;
    const float* rowD = rowDot + (int64_t(b) * H + h) * seqLen;
    loadTileAsync<E, D, Math::kThreads>(sQ + buf * kTileElems, kLd, q + row0 * in.qStride, in.qStride, seqLen - row0);
    loadTileAsync<E, D, Math::kThreads>(sDout + buf * kTileElems, kLd, dy + int64_t(row0) * C, C, seqLen - row0);
    for (int c = threadIdx.x; c < 2 * kTile; c += Math::kThreads) {
      const int r = c % kTile;
      const bool isLse = c < kTile;
      float* dst = (isLse ? sLse : sD) + buf * kTile + r;
      if (row0 + r < seqLen) {
        cpAsync4(dst, (isLse ? rowLse : rowD) + row0 + r);
      } else {
        *dst = isLse ? INFINITY : 0.0f;
      }
    }
  };
  loadTileAsync<E, D, Math::kThreads>(sK, kLd, k + k0 * in.kStride, in.kStride, seqLen - k0);
  loadTileAsync<E, D, Math::kThreads>(sV, kLd, v + k0 * in.vStride, in.vStride, seqLen - k0);
  loadQueryTile(0, 0);
  cpAsyncCommit();

  const Math math;
  const float sc = scale * Math::kExpScale;
  float s[Math::kScores], dp[Math::kScores], dk[Math::kOutPer16 * Dc / 16], dv[Math::kOutPer16 * Dc / 16];
#pragma unroll
  for (int e = 0; e < Math::kOutPer16 * Dc / 16; ++e) dk[e] = dv[e] = 0.0f;
  for (int i = 0; i < group * steps; ++i) {
    const int buf = i & 1;
    const bool diagonal = i % steps == 0;  // the query tile of the key tile's own rows
    if (i + 1 < group * steps) {
      loadQueryTile(i + 1, buf ^ 1);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    const E* qTileS = sQ + buf * kTileElems;
    const E* doutTileS = sDout + buf * kTileElems;
    const float* tileLse = sLse + buf * kTile;
    const float* tileD = sD + buf * kTile;
    math.template scores<D>(s, sK, qTileS, kLd, scratch);  // rows: keys, columns: queries
#pragma unroll
    for (int e = 0; e < Math::kScores; ++e) {
      const int col = math.scoreCol(e);
      const bool masked = diagonal && col < math.slotRow(Math::scoreSlot(e));  // query < key
      // The logsumexp in kExpScale units, rounded as the query pass rounds it, and the same FFMA.
      s[e] = masked ? 0.0f : Math::exp(fmaf(s[e], sc, -__fmul_rn(tileLse[col], Math::kExpScale)));
    }
    math.template accumulate<Dc>(dv, s, doutTileS + col0, kLd, scratch);
    math.template scores<D>(dp, sV, doutTileS, kLd, scratch);
#pragma unroll
    for (int e = 0; e < Math::kScores; ++e) s[e] *= dp[e] - tileD[math.scoreCol(e)];
    if constexpr (kStoreScores) {
      static_assert(kSplit == 1, "one CTA per key tile writes its dS tiles");
      math.storeScores(scoreTile(scores, b, kvHead * group + i / steps, H, qTiles, kTileIndex + i % steps, kTileIndex),
                       kTile, s);
    }
    math.template accumulate<Dc>(dk, s, qTileS + col0, kLd, scratch);
    __syncthreads();
  }
  storeTile<Math, Dc>(
      math, [&](int e) { return dk[e] * scale; }, headRows(grads.dk, grads.dkStride, b, seqLen, kvHead, D) + col0,
      grads.dkStride, k0, seqLen);
  storeTile<Math, Dc>(
      math, [&](int e) { return dv[e]; }, headRows(grads.dv, grads.dvStride, b, seqLen, kvHead, D) + col0,
      grads.dvStride, k0, seqLen);
}

// ---- fp32 row kernels: head dims whose tiles do not fit in shared memory ----

// Exact fp32 as F32Math, without tiles: a warp per row, lane l holding columns l + 32 j of it; the rows
// it meets are read from global memory in 128-byte warp-wide pieces. Dot products are summed over the
// lanes by a butterfly, so every lane holds the same bits and the order is fixed.
constexpr int kRowWarps = 4;  // rows per CTA

template <int D>
__device__ float warpDot(const float (&a)[D / 32], const float* b) {
  float part = 0.0f;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) part = fmaf(a[j], b[32 * j], part);
  return rowSum<32>(part);
}

template <int D>
__device__ void loadRow(float (&dst)[D / 32], const float* src) {
#pragma unroll
  for (int j = 0; j < D / 32; ++j) dst[j] = src[32 * j];
}

// The row one warp of a row kernel owns (rowBlock * kRowWarps + its warp), its batch (blockIdx.z), the
// query head h and key/value head the caller gives (a key warp is built with h = its key/value head and
// takes each query head of the group through forHead), and addresses in that batch: each at this lane's
// first column.
template <int D>
struct RowWarp {
  int lane, row, h, b, H, seqLen;
  int64_t kvHead, C;
  __device__ RowWarp(int H, int seqLen, int h, int64_t kvHead, int rowBlock)
      : lane(threadIdx.x % 32),
        row(rowBlock * kRowWarps + threadIdx.x / 32),
        h(h),
        b(blockIdx.z),
        H(H),
        seqLen(seqLen),
        kvHead(kvHead),
        C(int64_t(H) * D) {}
  // The same row and key/value head, as seen from query head `head`.
  __device__ RowWarp forHead(int head) const {
    RowWarp w = *this;
    w.h = head;
    return w;
  }
  // Row t of head `head` of x, whose rows lie `stride` elements apart.
  template <typename P>
  __device__ P* headRow(P* x, int64_t stride, int t, int64_t head) const {
    return x + (int64_t(b) * seqLen + t) * stride + head * D + lane;
  }
  // Row t of q (query head h), k and v (key/value head h / G).
  __device__ const float* qRow(const AttentionOperands<float>& in, int t) const {
    return headRow(in.q, in.qStride, t, h);
  }
  __device__ const float* kRow(const AttentionOperands<float>& in, int t) const {
    return headRow(in.k, in.kStride, t, kvHead);
  }
  __device__ const float* vRow(const AttentionOperands<float>& in, int t) const {
    return headRow(in.v, in.vStride, t, kvHead);
  }
  // Row t of a (B, T, C) tensor.
  template <typename P>
  __device__ P* outRow(P* x, int t) const {
    return x + (int64_t(b) * seqLen + t) * C + h * D + lane;
  }
  // Index of row t in a (B, H, T) statistic.
  __device__ int64_t stat(int t) const { return (int64_t(b) * H + h) * seqLen + t; }
};

// Forward of query row i: online softmax over keys 0..i.
template <int D>
__global__ void __launch_bounds__(32 * kRowWarps)
    rowForwardKernel(AttentionOperands<float> in, float* out, float* lse, int seqLen, int H, float scale) {
  constexpr int kPer = D / 32;
  const RowWarp<D> w(H, seqLen, blockIdx.y, blockIdx.y / in.group, blockIdx.x);
  const int i = w.row;
  if (i >= seqLen) return;  // the whole warp: its shuffles stay among its own lanes
  float q[kPer], o[kPer];
  loadRow<D>(q, w.qRow(in, i));
#pragma unroll
  for (int j = 0; j < kPer; ++j) o[j] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int t = 0; t <= i; ++t) {
    const float* k = w.kRow(in, t);
    const float* v = w.vRow(in, t);
    const float s = warpDot<D>(q, k) * scale;
    const float mNew = fmaxf(m, s), correction = expf(m - mNew), p = expf(s - mNew);
    l = l * correction + p;
#pragma unroll
    for (int j = 0; j < kPer; ++j) o[j] = fmaf(p, v[32 * j], o[j] * correction);
    m = mNew;
  }
  float* y = w.outRow(out, i);
#pragma unroll
  for (int j = 0; j < kPer; ++j) y[32 * j] = o[j] / l;
  if (w.lane == 0) lse[w.stat(i)] = m + logf(l);
}

// dq of query row i: scale * sum over keys t <= i of P (dout . v_t - D) k_t.
template <int D>
__device__ void rowBackwardQuery(const RowWarp<D>& w, const float* dout, const AttentionOperands<float>& in,
                                 const float* lse, const float* rowDot, const AttentionGradients<float>& grads,
                                 float scale) {
  constexpr int kPer = D / 32;
  const int i = w.row;
  float q[kPer], dy[kPer], dq[kPer];
  loadRow<D>(q, w.qRow(in, i));
  loadRow<D>(dy, w.outRow(dout, i));
#pragma unroll
  for (int j = 0; j < kPer; ++j) dq[j] = 0.0f;
  const float rowLse = lse[w.stat(i)], rowD = rowDot[w.stat(i)];
  for (int t = 0; t <= i; ++t) {
    const float* k = w.kRow(in, t);
    const float p = expf(warpDot<D>(q, k) * scale - rowLse);
    const float ds = p * (warpDot<D>(dy, w.vRow(in, t)) - rowD);
#pragma unroll
    for (int j = 0; j < kPer; ++j) dq[j] = fmaf(ds, k[32 * j], dq[j]);
  }
  float* dst = w.headRow(grads.dq, grads.dqStride, i, w.h);
#pragma unroll
  for (int j = 0; j < kPer; ++j) dst[32 * j] = dq[j] * scale;
}

// dk and dv of key row t of key/value head w.kvHead: over its query heads h (w.kvHead G .. + G - 1) and
// queries i >= t, dv += P dout_i, dk += scale P (dout_i . v - D_i) q_i.
template <int D>
__device__ void rowBackwardKey(const RowWarp<D>& w, const float* dout, const AttentionOperands<float>& in,
                               const float* lse, const float* rowDot, const AttentionGradients<float>& grads,
                               float scale) {
  constexpr int kPer = D / 32;
  const int t = w.row;
  float k[kPer], v[kPer], dk[kPer], dv[kPer];
  loadRow<D>(k, w.kRow(in, t));
  loadRow<D>(v, w.vRow(in, t));
#pragma unroll
  for (int j = 0; j < kPer; ++j) dk[j] = dv[j] = 0.0f;
  for (int64_t g = 0; g < in.group; ++g) {
    const RowWarp<D> wq = w.forHead(int(w.kvHead * in.group + g));
    for (int i = t; i < w.seqLen; ++i) {
      const float* q = wq.qRow(in, i);
      const float* dy = wq.outRow(dout, i);
      const float p = expf(warpDot<D>(k, q) * scale - lse[wq.stat(i)]);
      const float ds = p * (warpDot<D>(v, dy) - rowDot[wq.stat(i)]);
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        dv[j] = fmaf(p, dy[32 * j], dv[j]);
        dk[j] = fmaf(ds, q[32 * j], dk[j]);
      }
    }
  }
  float* dk0 = w.headRow(grads.dk, grads.dkStride, t, w.kvHead);
  float* dv0 = w.headRow(grads.dv, grads.dvStride, t, w.kvHead);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    dk0[32 * j] = dk[j] * scale;
    dv0[32 * j] = dv[j];
  }
}

// Backward, one launch: blocks [0, rowBlocks) own query rows (dq of query head blockIdx.y), blocks
// [rowBlocks, 2 rowBlocks) key rows (dk, dv of key/value head blockIdx.y; those with blockIdx.y >= H / G
// have none); every element of the gradients has one writer.
template <int D>
__global__ void __launch_bounds__(32 * kRowWarps)
    rowBackwardKernel(const float* dout, AttentionOperands<float> in, const float* lse, const float* rowDot,
                      AttentionGradients<float> grads, int seqLen, int H, float scale) {
  const int rowBlocks = gridDim.x / 2, keys = blockIdx.x >= rowBlocks;
  if (keys && blockIdx.y >= H / in.group) return;
  const RowWarp<D> w(H, seqLen, blockIdx.y, keys ? blockIdx.y : blockIdx.y / in.group, blockIdx.x - keys * rowBlocks);
  if (w.row >= seqLen) return;
  if (keys) {
    rowBackwardKey<D>(w, dout, in, lse, rowDot, grads, scale);
  } else {
    rowBackwardQuery<D>(w, dout, in, lse, rowDot, grads, scale);
  }
}

// ---- launchers ----

constexpr size_t kMaxSharedPerBlock = 227 * 1024;  // Hopper's opt-in limit per CTA

// Shared memory of the tiled kernels' CTAs: forward (Q, two K, two V), backward key kernel (K, V, two Q, two
// dout, two buffers of row statistics) and query kernel (Q, dout, two K, two V).
template <class Math, int D>
constexpr size_t kForwardBytes = sharedBytes<Math, D>(5, Math::kScratchFloats);
template <class Math, int D>
constexpr size_t kKeyBytes = sharedBytes<Math, D>(6, 4 * kTile + Math::kScratchFloats);
template <class Math, int D>
constexpr size_t kQueryBytes = sharedBytes<Math, D>(6, Math::kScratchFloats);
// Row kernels (fp32 only) where the tiled backward's six tiles do not fit in a CTA.
template <class Math, int D>
constexpr bool kRowKernels = kKeyBytes<Math, D> > kMaxSharedPerBlock;
// Column slices of the tiled backward: 2 where a thread would otherwise hold too many accumulators.
template <class Math, int D>
constexpr int kSplitOf = (D > 128 && std::is_same_v<Math, Bf16Math>) ? 2 : 1;

// Where the key pass stores its dS tiles for the query pass (given scratch): bf16 with one CTA per key
// tile (D <= 128) and D > 64; the query pass then holds two K and two dS^T buffers. At D <= 64 the query
// pass that recomputes S, P and dP was the faster one on the H200 (docs/benchmarks.md): its products are
// short, while the stored tiles' write and read do not shrink with D.
constexpr bool storesScores(int64_t d) { return d > 64 && d <= 128; }
template <class Math, int D>
constexpr bool kScoresStored = std::is_same_v<Math, Bf16Math>&& storesScores(D);
template <int D>
constexpr size_t kQueryFromScoresBytes = 2 * kTile*(D + Bf16Math::kPad) * sizeof(__nv_bfloat16) +
                                         2 * kTile*(kTile + Bf16Math::kPad) * sizeof(__nv_bfloat16);
// The largest dS scratch used: beyond it (long sequences) the query pass recomputes the scores.
constexpr int64_t kMaxScoreScratchBytes = int64_t(1) << 30;

template <typename T>
void checkShape(const AttentionOperands<T>& in, int64_t B, int64_t seqLen, int64_t H, int64_t d) {
  MINIDP_CHECK(flashAttentionSupportsHeadDim(d), "flash attention: head dim " << d << " has no CUDA kernel");
  MINIDP_CHECK(B <= 65535 && H <= 32767 && seqLen <= (int64_t(1) << 30), "flash attention: grid too large");
  MINIDP_CHECK(in.group >= 1 && H % in.group == 0,
               "flash attention: group " << in.group << " must divide the " << H << " query heads");
  // Tiles are copied in 16-byte vectors (cp.async): every row of every head must start 16-byte aligned.
  const char* names[3] = {"q", "k", "v"};
  const T* bases[3] = {in.q, in.k, in.v};
  const int64_t strides[3] = {in.qStride, in.kStride, in.vStride};
  for (int i = 0; i < 3; ++i) {
    MINIDP_CHECK(reinterpret_cast<uintptr_t>(bases[i]) % 16 == 0 && strides[i] * int64_t(sizeof(T)) % 16 == 0,
                 "flash attention: " << names[i] << " must be 16-byte aligned with a row stride of a multiple of 16 "
                                     << "bytes, got stride " << strides[i] << " elements");
  }
}

template <class Math, int D>
void forward(AttentionOperands<typename Math::Elem> in, typename Math::Elem* out, float* lse, int64_t B, int64_t seqLen,
             int64_t H, cudaStream_t stream) {
  static_assert(!kRowKernels<Math, D> || std::is_same_v<Math, F32Math>, "only fp32 has row kernels");
  const float scale = 1.0f / std::sqrt(float(D));
  if constexpr (kRowKernels<Math, D>) {
    rowForwardKernel<D><<<dim3(ceilDiv(seqLen, kRowWarps), H, B), 32 * kRowWarps, 0, stream>>>(
        in, out, lse, int(seqLen), int(H), scale);
  } else {
    auto kernel = flashForwardKernel<Math, D>;
    allowDynamicSharedBytes(kernel, kForwardBytes<Math, D>);
    const dim3 grid(ceilDiv(seqLen, kTile), H, B);
    kernel<<<grid, Math::kThreads, kForwardBytes<Math, D>, stream>>>(in, out, lse, int(seqLen), int(H), scale);
  }
  CUDA_CHECK_LAUNCH();
}

template <class Math, int D>
void backward(const typename Math::Elem* dout, AttentionOperands<typename Math::Elem> in,
              const typename Math::Elem* out, const float* lse, float* rowDot,
              AttentionGradients<typename Math::Elem> grads, typename Math::Elem* scores, int64_t B, int64_t seqLen,
              int64_t H, cudaStream_t stream) {
  using E = typename Math::Elem;
  constexpr int kRowDotBlock = 256, kRowsPerBlock = kRowDotBlock / rowDotLanes(D * sizeof(E) / 16);
  const int64_t rows = B * seqLen * H;
  // 16-byte aligned tensors (the allocator's blocks) make every row of D elements 16-byte aligned too.
  MINIDP_CHECK(reinterpret_cast<uintptr_t>(dout) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "flash attention: dout and out must be 16-byte aligned");
  rowDotKernel<E, D>
      <<<ceilDiv(rows, kRowsPerBlock), kRowDotBlock, 0, stream>>>(dout, out, rowDot, rows, int(seqLen), int(H));
  CUDA_CHECK_LAUNCH();
  const float scale = 1.0f / std::sqrt(float(D));
  if constexpr (kRowKernels<Math, D>) {
    const dim3 grid(2 * ceilDiv(seqLen, kRowWarps), H, B);
    rowBackwardKernel<D><<<grid, 32 * kRowWarps, 0, stream>>>(dout, in, lse, rowDot, grads, int(seqLen), int(H), scale);
  } else {
    constexpr int kSplit = kSplitOf<Math, D>;
    const dim3 grid(ceilDiv(seqLen, kTile), H * kSplit, B), keyGrid(grid.x, H / in.group * kSplit, B);
    if constexpr (kScoresStored<Math, D>) {
      if (scores) {  // the key pass stores dS; the query pass is one product per key tile
        auto keyKernel = flashBackwardKeyKernel<Math, D, kSplit, true>;
        allowDynamicSharedBytes(keyKernel, kKeyBytes<Math, D>);
        keyKernel<<<keyGrid, Math::kThreads, kKeyBytes<Math, D>, stream>>>(dout, in, lse, rowDot, grads, scores,
                                                                           int(seqLen), int(H), scale);
        CUDA_CHECK_LAUNCH();
        auto queryKernel = flashBackwardQueryFromScoresKernel<D>;
        allowDynamicSharedBytes(queryKernel, kQueryFromScoresBytes<D>);
        queryKernel<<<grid, Math::kThreads, kQueryFromScoresBytes<D>, stream>>>(scores, in, grads, int(seqLen), int(H),
                                                                                scale);
        CUDA_CHECK_LAUNCH();
        return;
      }
    }
    auto keyKernel = flashBackwardKeyKernel<Math, D, kSplit, false>;
    allowDynamicSharedBytes(keyKernel, kKeyBytes<Math, D>);
    keyKernel<<<keyGrid, Math::kThreads, kKeyBytes<Math, D>, stream>>>(dout, in, lse, rowDot, grads, nullptr,
                                                                       int(seqLen), int(H), scale);
    CUDA_CHECK_LAUNCH();
    auto queryKernel = flashBackwardQueryKernel<Math, D, kSplit>;
    allowDynamicSharedBytes(queryKernel, kQueryBytes<Math, D>);
    queryKernel<<<grid, Math::kThreads, kQueryBytes<Math, D>, stream>>>(dout, in, lse, rowDot, grads, int(seqLen),
                                                                        int(H), scale);
  }
  CUDA_CHECK_LAUNCH();
}

// The element type's Math policy; bf16 pointers come in as minidp::bf16 (layout-compatible).
template <typename T>
struct MathFor;
template <>
struct MathFor<float> {
  using type = F32Math;
  static const float* cast(const float* p) { return p; }
  static float* cast(float* p) { return p; }
};
template <>
struct MathFor<bf16> {
  using type = Bf16Math;
  static const __nv_bfloat16* cast(const bf16* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
  static __nv_bfloat16* cast(bf16* p) { return reinterpret_cast<__nv_bfloat16*>(p); }
};

// The operands and gradients with the Math policy's element type.
template <typename T>
AttentionOperands<typename MathFor<T>::type::Elem> elemOperands(const AttentionOperands<T>& in) {
  using F = MathFor<T>;
  return {F::cast(in.q), F::cast(in.k), F::cast(in.v), in.qStride, in.kStride, in.vStride, in.group};
}
template <typename T>
AttentionGradients<typename MathFor<T>::type::Elem> elemGradients(const AttentionGradients<T>& grads) {
  using F = MathFor<T>;
  return {F::cast(grads.dq), F::cast(grads.dk), F::cast(grads.dv), grads.dqStride, grads.dkStride, grads.dvStride};
}

// Calls f(std::integral_constant<int, D>{}) for head dim d, one of flashAttentionSupportsHeadDim's.
template <typename F>
void withHeadDim(int64_t d, F&& f) {
  switch (d) {
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 80: return f(std::integral_constant<int, 80>{});
    case 96: return f(std::integral_constant<int, 96>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
    default: MINIDP_CHECK(false, "flash attention: head dim " << d << " has no CUDA kernel");
  }
}

}  // namespace

template <typename T>
void flashAttentionForward(AttentionOperands<T> in, T* out, AccumOf<T>* lse, int64_t B, int64_t seqLen, int64_t H,
                           int64_t d, cudaStream_t stream) {
  checkShape(in, B, seqLen, H, d);
  if (B * seqLen * H == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    // The TMA + wgmma kernel of flash_attention_sm90.cu where the attention mode asks for it and it is available.
    HopperSchedule schedule;
    if (hopperAttentionRequested(&schedule) && hopperAttentionAvailable(d, in, B, H)) {
      hopperAttentionForward(in, out, lse, B, seqLen, H, d, /*causal=*/true, stream, schedule);
      return;
    }
  }
  using F = MathFor<T>;
  withHeadDim(d, [&](auto dim) {
    forward<typename F::type, decltype(dim)::value>(elemOperands(in), F::cast(out), lse, B, seqLen, H, stream);
  });
}

template <typename T>
size_t flashAttentionBackwardScratchBytes(int64_t B, int64_t seqLen, int64_t H, int64_t d) {
  if (!std::is_same_v<T, bf16> || !storesScores(d) || !flashAttentionSupportsHeadDim(d)) return 0;
  // The Hopper backward stores no scores (were it to fall back for its operands, the cp.async one runs without).
  if (hopperAttentionBackwardRequested(d) && hopperAttentionBackwardAvailable(d)) return 0;
  const int64_t tiles = ceilDiv(seqLen, kTile), tileBytes = kTile * kTile * int64_t(sizeof(bf16));
  const int64_t perHead = tiles * (tiles + 1) / 2;  // tiles < 2^25 (seqLen <= 2^30): no overflow
  if (perHead > kMaxScoreScratchBytes / tileBytes / std::max<int64_t>(1, B * H)) return 0;
  return static_cast<size_t>(B * H * perHead * tileBytes);
}

void flashAttentionRowDot(const bf16* dout, const bf16* out, float* rowDot, int64_t B, int64_t seqLen, int64_t H,
                          int64_t d, cudaStream_t stream) {
  MINIDP_CHECK(reinterpret_cast<uintptr_t>(dout) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "flash attention: dout and out must be 16-byte aligned");
  const int64_t rows = B * seqLen * H;
  if (rows == 0) return;
  withHeadDim(d, [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    constexpr int kRowDotBlock = 256, kRowsPerBlock = kRowDotBlock / rowDotLanes(D * sizeof(bf16) / 16);
    rowDotKernel<__nv_bfloat16, D><<<ceilDiv(rows, kRowsPerBlock), kRowDotBlock, 0, stream>>>(
        MathFor<bf16>::cast(dout), MathFor<bf16>::cast(out), rowDot, rows, int(seqLen), int(H));
    CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
void flashAttentionBackward(const T* dout, AttentionOperands<T> in, const T* out, const AccumOf<T>* lse,
                            AccumOf<T>* rowDot, AttentionGradients<T> grads, int64_t B, int64_t seqLen, int64_t H,
                            int64_t d, void* scratch, size_t scratchBytes, cudaStream_t stream) {
  checkShape(in, B, seqLen, H, d);
  MINIDP_CHECK(reinterpret_cast<uintptr_t>(dout) % 16 == 0, "flash attention: dout must be 16-byte aligned");
  if (B * seqLen * H == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    // The TMA + wgmma backward of flash_attention_sm90_backward.cu where the attention mode asks for it.
    if (hopperAttentionBackwardRequested(d) && hopperAttentionBackwardAvailable(d, in, B, H)) {
      hopperAttentionBackward(dout, in, out, lse, rowDot, grads, B, seqLen, H, d, /*causal=*/true, stream);
      return;
    }
  }
  using F = MathFor<T>;
  using E = typename F::type::Elem;
  const size_t needed = flashAttentionBackwardScratchBytes<T>(B, seqLen, H, d);
  E* scores = nullptr;
  if (scratch && needed > 0) {
    MINIDP_CHECK(reinterpret_cast<uintptr_t>(scratch) % 16 == 0 && scratchBytes >= needed,
                 "flash attention: score scratch of " << scratchBytes << " bytes, 16-byte aligned, for the " << needed
                                                      << " this shape needs");
    scores = static_cast<E*>(scratch);
  }
  withHeadDim(d, [&](auto dim) {
    backward<typename F::type, decltype(dim)::value>(F::cast(dout), elemOperands(in), F::cast(out), lse, rowDot,
                                                     elemGradients(grads), scores, B, seqLen, H, stream);
  });
}

template <typename T>
void flashAttentionBackward(const T* dout, AttentionOperands<T> in, const T* out, const AccumOf<T>* lse,
                            AccumOf<T>* rowDot, AttentionGradients<T> grads, int64_t B, int64_t seqLen, int64_t H,
                            int64_t d, cudaStream_t stream) {
  flashAttentionBackward(dout, in, out, lse, rowDot, grads, B, seqLen, H, d, nullptr, 0, stream);
}

#define MINIDP_INSTANTIATE(T)                                                                                       \
  template void flashAttentionForward<T>(AttentionOperands<T>, T*, AccumOf<T>*, int64_t, int64_t, int64_t, int64_t, \
                                         cudaStream_t);                                                             \
  template void flashAttentionBackward<T>(const T*, AttentionOperands<T>, const T*, const AccumOf<T>*, AccumOf<T>*, \
                                          AttentionGradients<T>, int64_t, int64_t, int64_t, int64_t, cudaStream_t); \
  template void flashAttentionBackward<T>(const T*, AttentionOperands<T>, const T*, const AccumOf<T>*, AccumOf<T>*, \
                                          AttentionGradients<T>, int64_t, int64_t, int64_t, int64_t, void*, size_t, \
                                          cudaStream_t);                                                            \
  template size_t flashAttentionBackwardScratchBytes<T>(int64_t, int64_t, int64_t, int64_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
