// Hopper flash attention backward (kernels/flash_attention_sm90.h), on the forward's building blocks
// (kernels/sm90_primitives.cuh: TMA copies completing on mbarriers, wgmma with shared-memory descriptors).
// Every product below has the form of one the forward runs, with the roles of the operands swapped
// (tests/ops/test_flash_attention_sm90.cpp, Shapes/HopperAttentionBackward.*, pass on an H100).
//
// Deterministic two-pass split, no atomics: rowDot D = rowsum(dout * out) (flashAttentionRowDot), then
//   key pass    one CTA per (128 keys, key/value head, batch): for each of the group's G query heads and each
//               query tile of 64 rows that can see the keys: S^T = k q^T, dP^T = v dout^T (both operands in
//               shared memory, K-major), P^T = exp(S^T scale - lse) (lse per column), dS^T = P^T (dP^T - D),
//               dv += P^T dout, dk += dS^T q (P^T and dS^T rounded to bf16 in registers as the A operand; dout
//               and q MN-major: the transpose bit). dk, dv stay in registers over all G heads, stored once.
//   query pass  one CTA per (128 queries, query head, batch): for each key tile of 64 rows it can see:
//               S = q k^T, dP = dout v^T, P = exp(S scale - lse) (lse per row), dS = P (dP - D),
//               dq += dS k (k MN-major). dq stored once.
// Both passes are one skeleton: two "owned" tiles of 128 rows copied once (k, v or q, dout; 64 rows per
// consumer warpgroup; d = 256: 64 rows shared, each warpgroup accumulating half of the columns) and two
// "streamed" tiles of 64 rows (q, dout or k, v) in a ring of kStages stages
// (fullA/fullB on landing, emptyA/emptyB when the 8 consumer warps are done with them), a producer thread
// issuing the copies (warpgroup 0, setmaxnreg 24) and two consumer warpgroups (setmaxnreg 240). The first two
// products of every step, X = owned streamed^T, are the forward's S = q k^T (same descriptors: K-major, 128-byte
// swizzle, SBO 1024, the k16 step 32 bytes); the accumulations are the forward's o += p v (A from the score
// accumulators re-paired as bf16, B MN-major with LBO = the streamed box size, 64 x 128 bytes, the k16 step 16
// rows = 2048 bytes). Accumulator element 4 j + i of a thread is row 16 warp + lane / 4 + 8 (i >> 1), column
// 8 j + 2 (lane % 4) + (i & 1) (PTX ISA, wgmma m64nNk16 D fragment).
// Masks: rows past T are zero-filled by the copy engine; the probabilities of (query, key) pairs with the query
// past T or the key past T, or for causal the key after the query, are set to 0 before they are rounded, so
// they add nothing (and their lse / D, never read, cannot make a NaN). Output rows past T are not stored.
// Head dims 64, 128 and 256; 80 and 96 run as 128 (columns past d zero-filled, not stored).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "base/check.h"
#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/flash_attention.h"  // flashAttentionRowDot
#include "kernels/flash_attention_sm90.h"
#include "kernels/sm90_primitives.cuh"

namespace minidp::kernels::cuda {

namespace {

using namespace sm90;  // NOLINT: the shared building blocks

constexpr int kThreads = 384;      // producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;  // arrivals that free a stage
constexpr int kStream = 64;        // rows of a streamed tile
constexpr float kLog2e = 1.4426950408889634f;

// Head dims up to 128: 128 owned rows, 64 per consumer warpgroup, each accumulating all kDPad columns; a ring
// of 3 stages (one step of a CTA, about 1 us at d = 128, is near a copy's latency). 256 (kSplit): 64 owned
// rows that both warpgroups share, each accumulating one half of the columns (the scores computed by both: dk
// and dv of 64 x 256 in fp32 would not fit one thread's registers); 2 stages (shared memory).
template <int D>
struct BackwardConfig {
  static constexpr int kDPad = D <= 64 ? 64 : D <= 128 ? 128 : 256;
  static constexpr bool kSplit = D > 128;
  static constexpr int kOwn = kSplit ? 64 : 128;
  static constexpr int kAccColumns = kSplit ? kDPad / 2 : kDPad;
  static constexpr int kStages = kSplit ? 2 : 3;
  static constexpr int kBoxes = kDPad / kBox;
  static constexpr int kOwnBytes = kOwn * kDPad * 2;
  static constexpr int kStreamBytes = kStream * kDPad * 2;
  static constexpr int kBarrierBytes = 8 * (1 + 4 * kStages);
  // 1024 bytes of slack: the dynamic allocation is aligned up to 1024 (the swizzle pattern's period).
  static constexpr int kSharedBytes = 1024 + 2 * kOwnBytes + 2 * kStages * kStreamBytes + kBarrierBytes;
  static_assert(kSharedBytes <= 227 * 1024, "tiles exceed the shared memory of a CTA");
};

// Where a CTA reads: owned tiles at (head, token), streamed tile j at (streamHead(j), streamToken(j)).
struct Plan {
  int ownHead, ownToken, batch;
  int steps;        // streamed tiles
  int streamHead0;  // key pass: the group's first query head; query pass: the key/value head
  int perHead;      // key pass: query tiles per head (steps = G perHead); query pass: steps
  int firstTile;    // key pass: the first query tile that sees the keys; query pass: 0
  __host__ __device__ int streamHead(int j) const { return streamHead0 + j / perHead; }
  __host__ __device__ int streamTile(int j) const { return firstTile + j % perHead; }
};

#if MINIDP_SM90A_DEVICE

// Barriers after the tiles (RingBarriers): own is the owned tiles'; stage s's A and B are the streamed tiles.
template <int D>
using Barriers = RingBarriers<BackwardConfig<D>::kStages>;

// Shared-memory tiles: owned X, Y (kOwn rows), streamed A, B (kStream rows, kStages each), then the barriers.
template <int D>
struct Tiles {
  using C = BackwardConfig<D>;
  static constexpr int kStages = C::kStages;
  uint32_t x, y, a, b;
  __device__ explicit Tiles(uint32_t base)
      : x(base), y(base + C::kOwnBytes), a(base + 2 * C::kOwnBytes), b(a + kStages * C::kStreamBytes) {}
  __device__ uint32_t barriers() const { return b + kStages * C::kStreamBytes; }
  __device__ uint32_t streamA(int j) const { return a + (j % kStages) * C::kStreamBytes; }
  __device__ uint32_t streamB(int j) const { return b + (j % kStages) * C::kStreamBytes; }
};

// The producer (thread 0 of warpgroup 0): the owned tiles once, then streamed tile j into stage j % kStages
// once the consumers have released tile j - kStages from it (the forward's protocol, for A and B apart).
template <int D>
__device__ void produce(const CUtensorMap* mapX, const CUtensorMap* mapY, const CUtensorMap* mapA,
                        const CUtensorMap* mapB, const Tiles<D>& t, Barriers<D> bars, const Plan& plan) {
  using C = BackwardConfig<D>;
  constexpr int kStages = C::kStages, kOwn = C::kOwn;
  barrierExpectBytes(bars.own(), 2 * C::kOwnBytes);
#pragma unroll
  for (int x = 0; x < C::kBoxes; ++x) {
    tmaLoad(t.x + x * kOwn * kBoxRowBytes, mapX, x * kBox, plan.ownHead, plan.ownToken, plan.batch, bars.own());
    tmaLoad(t.y + x * kOwn * kBoxRowBytes, mapY, x * kBox, plan.ownHead, plan.ownToken, plan.batch, bars.own());
  }
  for (int j = 0; j < plan.steps; ++j) {
    const int stage = j % kStages, head = plan.streamHead(j), token = plan.streamTile(j) * kStream;
    const uint32_t emptyParity = ((j / kStages) & 1) ^ 1;  // the phase that tile j - kStages completed
    if (j >= kStages) barrierWait(bars.emptyA(stage), emptyParity);
    barrierExpectBytes(bars.fullA(stage), C::kStreamBytes);
#pragma unroll
    for (int x = 0; x < C::kBoxes; ++x)
      tmaLoad(t.streamA(j) + x * kStream * kBoxRowBytes, mapA, x * kBox, head, token, plan.batch, bars.fullA(stage));
    if (j >= kStages) barrierWait(bars.emptyB(stage), emptyParity);
    barrierExpectBytes(bars.fullB(stage), C::kStreamBytes);
#pragma unroll
    for (int x = 0; x < C::kBoxes; ++x)
      tmaLoad(t.streamB(j) + x * kStream * kBoxRowBytes, mapB, x * kBox, head, token, plan.batch, bars.fullB(stage));
  }
}

// A consumer warpgroup's view: its 64 owned rows (wg 0 or 1), this thread's rows and lane.
template <int D>
struct Warpgroup {
  using C = BackwardConfig<D>;
  static constexpr int kS = kStream / 2;       // accumulators of a 64 x 64 product
  static constexpr int kO = C::kAccColumns / 2;  // accumulators of a 64 x kAccColumns product
  static constexpr int kSteps = kStream / 16;    // k16 steps over a streamed tile
  // row0: the warpgroup's first owned row (CTA-relative); column0: its first accumulated column.
  int wg, lane, row0, row, column0;

  __device__ explicit Warpgroup(int wg)
      : wg(wg),
        lane(threadIdx.x % 32),
        row0(C::kSplit ? 0 : 64 * wg),
        row(row0 + 16 * (threadIdx.x % 128 / 32) + lane / 4),
        column0(C::kSplit ? C::kAccColumns * wg : 0) {}

  // Issues s = own streamed^T: the warpgroup's rows of the owned tile `own` (A, K-major) against the streamed
  // tile at `streamed` (B, K-major), over the padded head dim (not committed).
  __device__ __forceinline__ void issueScores(float (&s)[kS], uint32_t own, uint32_t streamed) const {
    const uint32_t rows = own + row0 * kBoxRowBytes;
#pragma unroll
    for (int x = 0; x < C::kBoxes; ++x) {
#pragma unroll
      for (int kk = 0; kk < kBox / 16; ++kk) {
        const uint64_t a = matrixDescriptor(rows + x * C::kOwn * kBoxRowBytes + kk * 32, 16);
        const uint64_t b = matrixDescriptor(streamed + x * kStream * kBoxRowBytes + kk * 32, 16);
        wgmmaSS(s, a, b, (x | kk) != 0);
      }
    }
  }

  // Issues acc += p streamed: p (64 x kStream, bf16 A fragments) times the warpgroup's kAccColumns columns of
  // the streamed tile (kStream x kDPad, MN-major: from box column0 / 64 on) (not committed).
  __device__ __forceinline__ void issueAccumulate(float (&acc)[kO], const uint32_t (&p)[kSteps][4],
                                                  uint32_t streamed) const {
    const uint32_t columns = streamed + column0 / kBox * kStream * kBoxRowBytes;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
      wgmmaRS(acc, p[ks], matrixDescriptor(columns + ks * 16 * kBoxRowBytes, kStream * kBoxRowBytes));
  }

  static __device__ __forceinline__ void pack(uint32_t (&p)[kSteps][4], const float (&s)[kS]) {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
#pragma unroll
      for (int i = 0; i < 4; ++i) p[ks][i] = packBf16(s[8 * ks + 2 * i], s[8 * ks + 2 * i + 1]);
  }

  // Stores acc * scale into rows (this thread's two) of dst: row r at dst + r stride, columns < D (from column0).
  __device__ void store(const float (&acc)[kO], __nv_bfloat16* dst, int64_t stride, int first, int seqLen,
                        float scale, bool pairStores) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int rr = first + row + 8 * r;
      if (rr >= seqLen) continue;
      __nv_bfloat16* out = dst + int64_t(rr) * stride;
#pragma unroll
      for (int jc = 0; jc < kO / 4; ++jc) {
        if (!C::kSplit && 8 * jc >= D) continue;  // padding columns of D = 80, 96 (compile-time)
        const int col = column0 + 8 * jc + 2 * (lane % 4);
        const __nv_bfloat162 pair =
            __floats2bfloat162_rn(acc[4 * jc + 2 * r] * scale, acc[4 * jc + 2 * r + 1] * scale);
        if (pairStores) {
          *reinterpret_cast<__nv_bfloat162*>(out + col) = pair;
        } else {
          out[col] = pair.x;
          out[col + 1] = pair.y;
        }
      }
    }
  }
};

// The two products of step j, each warpgroup on its rows: s = X A^T and dp = Y B^T, committed apart; returns
// once s is in, dp still in flight (the caller turns s into probabilities meanwhile, then waitProducts).
template <int D>
__device__ __forceinline__ void issueStep(const Warpgroup<D>& w, const Tiles<D>& t, Barriers<D> bars, int j,
                                          float (&s)[Warpgroup<D>::kS], float (&dp)[Warpgroup<D>::kS]) {
  constexpr int kStages = BackwardConfig<D>::kStages;
  const uint32_t parity = (j / kStages) & 1;
  barrierWait(bars.fullA(j % kStages), parity);
  barrierWait(bars.fullB(j % kStages), parity);
  fenceRegisters(s);
  fenceRegisters(dp);
  wgmmaFence();
  w.issueScores(s, t.x, t.streamA(j));
  wgmmaCommit();
  w.issueScores(dp, t.y, t.streamB(j));
  wgmmaCommit();
  wgmmaWait<1>();  // the first group (s) is complete
  fenceRegisters(s);
}

// Waits for dp of issueStep (every product of this warpgroup complete).
template <int N>
__device__ __forceinline__ void waitProducts(float (&dp)[N]) {
  wgmmaWait<0>();
  fenceRegisters(dp);
}

// Key pass consumer: owned X = k, Y = v (its 64 keys), streamed A = q, B = dout of (query head, query tile).
// s = k q^T (keys x queries), dp = v dout^T; p = exp2(s scaleLog2 - lse2[query]) masked; ds = p (dp - D[query]);
// dv += p dout (B), dk += ds q (A); both tiles released after those products.
template <int D, bool kCausal>
__device__ void consumeKeys(const Tiles<D>& t, Barriers<D> bars, const Plan& plan, int wg, int key0, const float* lse,
                            const float* rowDot, __nv_bfloat16* dk, __nv_bfloat16* dv, int64_t dkStride,
                            int64_t dvStride, int seqLen, int H, float scaleLog2, float scale, bool pairStores) {
  using W = Warpgroup<D>;
  constexpr int kStages = BackwardConfig<D>::kStages;
  W w(wg);
  float dkAcc[W::kO], dvAcc[W::kO];
#pragma unroll
  for (int e = 0; e < W::kO; ++e) dkAcc[e] = dvAcc[e] = 0.0f;
  const bool leader = w.lane == 0;
  const int wgKey0 = key0 + w.row0, myKey = key0 + w.row;
  barrierWait(bars.own(), 0);
  for (int j = 0; j < plan.steps; ++j) {
    float s[W::kS], dp[W::kS];
    uint32_t p[W::kSteps][4], ds[W::kSteps][4];
    issueStep(w, t, bars, j, s, dp);
    // This thread's 16 query columns: q0 + column + 8 (c / 2) + (c & 1), c < 16.
    const int q0 = plan.streamTile(j) * kStream, column = 2 * (w.lane % 4);
    const int64_t stats = (int64_t(plan.batch) * H + plan.streamHead(j)) * seqLen + q0 + column;
    const float* lseAt = lse + stats;
    const float* rowDotAt = rowDot + stats;
    const bool masked = (kCausal && q0 < wgKey0 + 63) || q0 + kStream > seqLen;
    const int end = seqLen - q0 - column, visible = myKey - q0 - column;  // offsets of the first hidden column
    // Both products waited for at once: computing p under dp in flight made ptxas spill (causal, d = 128).
    waitProducts(dp);
#pragma unroll
    for (int c = 0; c < W::kS / 2; ++c) {
      const int offset = 8 * (c / 2) + (c & 1);
      const bool inside = offset < end;
      const float lse2 = inside ? lseAt[offset] * kLog2e : 0.0f;
      const float rowD = inside ? rowDotAt[offset] : 0.0f;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int e = 4 * (c / 2) + 2 * r + (c & 1);
        float pe = exp2Approx(fmaf(s[e], scaleLog2, -lse2));
        if (masked && (!inside || (kCausal && offset < visible + 8 * r))) pe = 0.0f;
        s[e] = pe;
        dp[e] = pe * (dp[e] - rowD);
      }
    }
    W::pack(p, s);
    W::pack(ds, dp);
    fenceRegisters(dvAcc);
    fenceRegisters(dkAcc);
    fenceRegisters(p);
    fenceRegisters(ds);
    wgmmaFence();
    w.issueAccumulate(dvAcc, p, t.streamB(j));
    w.issueAccumulate(dkAcc, ds, t.streamA(j));
    wgmmaCommit();
    wgmmaWait<0>();
    fenceRegisters(dvAcc);
    fenceRegisters(dkAcc);
    fenceRegisters(p);
    fenceRegisters(ds);
    if (leader) {
      barrierArrive(bars.emptyA(j % kStages));
      barrierArrive(bars.emptyB(j % kStages));
    }
  }
  w.store(dvAcc, dv, dvStride, key0, seqLen, 1.0f, pairStores);
  w.store(dkAcc, dk, dkStride, key0, seqLen, scale, pairStores);
}

// Query pass consumer: owned X = q, Y = dout (its 64 queries), streamed A = k, B = v of key tile j.
// s = q k^T, dp = dout v^T; p = exp2(s scaleLog2 - lse2[row]) masked; ds = p (dp - D[row]); dq += ds k (A).
template <int D, bool kCausal>
__device__ void consumeQueries(const Tiles<D>& t, Barriers<D> bars, const Plan& plan, int wg, int query0,
                               const float* lse, const float* rowDot, __nv_bfloat16* dq, int64_t dqStride, int seqLen,
                               int H, int h, float scaleLog2, float scale, bool pairStores) {
  using W = Warpgroup<D>;
  constexpr int kStages = BackwardConfig<D>::kStages;
  W w(wg);
  float dqAcc[W::kO];
#pragma unroll
  for (int e = 0; e < W::kO; ++e) dqAcc[e] = 0.0f;
  const bool leader = w.lane == 0;
  const int wgQuery0 = query0 + w.row0;
  float lse2[2], rowD[2];
  const int64_t stats = (int64_t(plan.batch) * H + h) * seqLen;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = query0 + w.row + 8 * r;
    lse2[r] = query < seqLen ? lse[stats + query] * kLog2e : 0.0f;
    rowD[r] = query < seqLen ? rowDot[stats + query] : 0.0f;
  }
  barrierWait(bars.own(), 0);
  for (int j = 0; j < plan.steps; ++j) {
    float s[W::kS], dp[W::kS];
    uint32_t ds[W::kSteps][4];
    issueStep(w, t, bars, j, s, dp);
    const int k0 = j * kStream;
    const bool masked = (kCausal && k0 + kStream - 1 > wgQuery0) || k0 + kStream > seqLen;
#pragma unroll
    for (int e = 0; e < W::kS; ++e) {  // p, while dp is in flight
      const int r = (e >> 1) & 1, key = k0 + 8 * (e / 4) + 2 * (w.lane % 4) + (e & 1);
      float pe = exp2Approx(fmaf(s[e], scaleLog2, -lse2[r]));
      if (masked && (key >= seqLen || (kCausal && key > query0 + w.row + 8 * r))) pe = 0.0f;
      s[e] = pe;
    }
    waitProducts(dp);
    if (leader) barrierArrive(bars.emptyB(j % kStages));  // v is read only by dp
#pragma unroll
    for (int e = 0; e < W::kS; ++e) dp[e] = s[e] * (dp[e] - rowD[(e >> 1) & 1]);
    W::pack(ds, dp);
    fenceRegisters(dqAcc);
    fenceRegisters(ds);
    wgmmaFence();
    w.issueAccumulate(dqAcc, ds, t.streamA(j));
    wgmmaCommit();
    wgmmaWait<0>();
    fenceRegisters(dqAcc);
    fenceRegisters(ds);
    if (leader) barrierArrive(bars.emptyA(j % kStages));
  }
  w.store(dqAcc, dq, dqStride, query0, seqLen, scale, pairStores);
}

// Barrier set-up by thread 0, then the roles: warpgroup 0 the producer, 1 and 2 the consumers.
#endif  // MINIDP_SM90A_DEVICE

// Output pointers and strides (elements) of the key pass; pairStores: every row of both starts 4-byte aligned.
struct KeyOutputs {
  __nv_bfloat16 *dk, *dv;
  int64_t dkStride, dvStride;
  bool pairStores;
};

// Grid (key tiles, key/value heads, B); for causal, key tile 0 (the most query tiles) first.
template <int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1)
    hopperBackwardKeyKernel(const __grid_constant__ CUtensorMap mapK, const __grid_constant__ CUtensorMap mapV,
                            const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapDout,
                            const float* lse, const float* rowDot, KeyOutputs outs, int seqLen, int H, int group,
                            float scaleLog2, float scale) {
#if MINIDP_SM90A_DEVICE
  extern __shared__ unsigned char smemRaw[];
  const Tiles<D> t((sharedAddress(smemRaw) + 1023) & ~1023u);
  const Barriers<D> bars{t.barriers()};
  const int kvHead = blockIdx.y, b = blockIdx.z, key0 = blockIdx.x * BackwardConfig<D>::kOwn;
  const int queryTiles = (seqLen + kStream - 1) / kStream;
  const int first = kCausal ? key0 / kStream : 0;
  const Plan plan{kvHead, key0, b, group * (queryTiles - first), kvHead * group, queryTiles - first, first};
  if (threadIdx.x == 0) bars.init(kConsumerWarps);
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 0) produce<D>(&mapK, &mapV, &mapQ, &mapDout, t, bars, plan);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int64_t dkHead = int64_t(b) * seqLen * outs.dkStride + int64_t(kvHead) * D;
    const int64_t dvHead = int64_t(b) * seqLen * outs.dvStride + int64_t(kvHead) * D;
    consumeKeys<D, kCausal>(t, bars, plan, wg - 1, key0, lse, rowDot, outs.dk + dkHead, outs.dv + dvHead,
                            outs.dkStride, outs.dvStride, seqLen, H, scaleLog2, scale, outs.pairStores);
  }
#endif
}

// Grid (query tiles, H, B); for causal, blockIdx.x counts from the last query tile (the most key tiles).
template <int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1)
    hopperBackwardQueryKernel(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapDout,
                              const __grid_constant__ CUtensorMap mapK, const __grid_constant__ CUtensorMap mapV,
                              const float* lse, const float* rowDot, __nv_bfloat16* dq, int64_t dqStride, int seqLen,
                              int H, int group, float scaleLog2, float scale, bool pairStores) {
#if MINIDP_SM90A_DEVICE
  extern __shared__ unsigned char smemRaw[];
  const Tiles<D> t((sharedAddress(smemRaw) + 1023) & ~1023u);
  const Barriers<D> bars{t.barriers()};
  const int qTile = kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  constexpr int kOwn = BackwardConfig<D>::kOwn;
  const int h = blockIdx.y, b = blockIdx.z, query0 = qTile * kOwn;
  const int keyTiles = (seqLen + kStream - 1) / kStream;
  const int tiles = kCausal ? min(keyTiles, (query0 + kOwn - 1) / kStream + 1) : keyTiles;
  const Plan plan{h, query0, b, tiles, h / group, tiles, 0};
  if (threadIdx.x == 0) bars.init(kConsumerWarps);
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 0) produce<D>(&mapQ, &mapDout, &mapK, &mapV, t, bars, plan);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int64_t head = int64_t(b) * seqLen * dqStride + int64_t(h) * D;
    consumeQueries<D, kCausal>(t, bars, plan, wg - 1, query0, lse, rowDot, dq + head, dqStride, seqLen, H, h,
                               scaleLog2, scale, pairStores);
  }
#endif
}

// ---- host ----

bool pairAligned(const bf16* p, int64_t stride) { return reinterpret_cast<uintptr_t>(p) % 4 == 0 && stride % 2 == 0; }

template <int D, bool kCausal>
void launchBackward(const bf16* dout, const AttentionOperands<bf16>& in, const float* lse, const float* rowDot,
                    const AttentionGradients<bf16>& grads, int64_t B, int64_t seqLen, int64_t H, cudaStream_t stream) {
  using C = BackwardConfig<D>;
  constexpr int kOwn = C::kOwn;
  const int64_t kvHeads = H / in.group;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float scaleLog2 = float(1.0 / std::sqrt(double(D)) * 1.4426950408889634);
  {
    const CUtensorMap mapK = operandMap(in.k, in.kStride, kvHeads, B, seqLen, D, kOwn);
    const CUtensorMap mapV = operandMap(in.v, in.vStride, kvHeads, B, seqLen, D, kOwn);
    const CUtensorMap mapQ = operandMap(in.q, in.qStride, H, B, seqLen, D, kStream);
    const CUtensorMap mapDout = operandMap(dout, H * D, H, B, seqLen, D, kStream);
    auto kernel = hopperBackwardKeyKernel<D, kCausal>;
    allowDynamicSharedBytes(kernel, C::kSharedBytes);
    const KeyOutputs outs{reinterpret_cast<__nv_bfloat16*>(grads.dk), reinterpret_cast<__nv_bfloat16*>(grads.dv),
                          grads.dkStride, grads.dvStride,
                          pairAligned(grads.dk, grads.dkStride) && pairAligned(grads.dv, grads.dvStride)};
    const dim3 grid(unsigned((seqLen + kOwn - 1) / kOwn), unsigned(kvHeads), unsigned(B));
    kernel<<<grid, kThreads, C::kSharedBytes, stream>>>(mapK, mapV, mapQ, mapDout, lse, rowDot, outs, int(seqLen),
                                                        int(H), int(in.group), scaleLog2, scale);
    CUDA_CHECK_LAUNCH();
  }
  {
    const CUtensorMap mapQ = operandMap(in.q, in.qStride, H, B, seqLen, D, kOwn);
    const CUtensorMap mapDout = operandMap(dout, H * D, H, B, seqLen, D, kOwn);
    const CUtensorMap mapK = operandMap(in.k, in.kStride, kvHeads, B, seqLen, D, kStream);
    const CUtensorMap mapV = operandMap(in.v, in.vStride, kvHeads, B, seqLen, D, kStream);
    auto kernel = hopperBackwardQueryKernel<D, kCausal>;
    allowDynamicSharedBytes(kernel, C::kSharedBytes);
    const dim3 grid(unsigned((seqLen + kOwn - 1) / kOwn), unsigned(H), unsigned(B));
    kernel<<<grid, kThreads, C::kSharedBytes, stream>>>(mapQ, mapDout, mapK, mapV, lse, rowDot,
                                                        reinterpret_cast<__nv_bfloat16*>(grads.dq), grads.dqStride,
                                                        int(seqLen), int(H), int(in.group), scaleLog2, scale,
                                                        pairAligned(grads.dq, grads.dqStride));
    CUDA_CHECK_LAUNCH();
  }
}

template <int D>
void launchBackward(const bf16* dout, const AttentionOperands<bf16>& in, const float* lse, const float* rowDot,
                    const AttentionGradients<bf16>& grads, int64_t B, int64_t seqLen, int64_t H, bool causal,
                    cudaStream_t stream) {
  if (causal) {
    launchBackward<D, true>(dout, in, lse, rowDot, grads, B, seqLen, H, stream);
  } else {
    launchBackward<D, false>(dout, in, lse, rowDot, grads, B, seqLen, H, stream);
  }
}

}  // namespace

bool hopperAttentionBackwardSupportsHeadDim(int64_t d) {
  return d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}

bool hopperAttentionBackwardAvailable(int64_t d) {
  return hopperAttentionBackwardSupportsHeadDim(d) && hopperAttentionAvailable(d);
}

bool hopperAttentionBackwardAvailable(int64_t d, const AttentionOperands<bf16>& in, int64_t B, int64_t H) {
  return hopperAttentionBackwardSupportsHeadDim(d) && hopperAttentionAvailable(d, in, B, H);
}

void hopperAttentionBackward(const bf16* dout, AttentionOperands<bf16> in, const bf16* out, const float* lse,
                             float* rowDot, AttentionGradients<bf16> grads, int64_t B, int64_t seqLen, int64_t H,
                             int64_t d, bool causal, cudaStream_t stream) {
  MINIDP_CHECK(hopperAttentionBackwardAvailable(d, in, B, H),
               "Hopper attention backward: not available for head dim " << d << " on this device and operands");
  MINIDP_CHECK(reinterpret_cast<uintptr_t>(dout) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
               "Hopper attention backward: dout and out must be 16-byte aligned");
  MINIDP_CHECK(seqLen <= (int64_t(1) << 30), "Hopper attention backward: sequence too long");
  if (B * seqLen * H == 0) return;
  flashAttentionRowDot(dout, out, rowDot, B, seqLen, H, d, stream);
  switch (d) {
    case 64: return launchBackward<64>(dout, in, lse, rowDot, grads, B, seqLen, H, causal, stream);
    case 80: return launchBackward<80>(dout, in, lse, rowDot, grads, B, seqLen, H, causal, stream);
    case 96: return launchBackward<96>(dout, in, lse, rowDot, grads, B, seqLen, H, causal, stream);
    case 128: return launchBackward<128>(dout, in, lse, rowDot, grads, B, seqLen, H, causal, stream);
    case 256: return launchBackward<256>(dout, in, lse, rowDot, grads, B, seqLen, H, causal, stream);
    default: MINIDP_CHECK(false, "Hopper attention backward: head dim " << d << " has no kernel");
  }
}

}  // namespace minidp::kernels::cuda
