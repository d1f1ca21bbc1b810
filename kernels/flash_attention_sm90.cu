// Hopper flash attention forward (kernels/flash_attention_sm90.h), written from the PTX ISA: TMA copies
// (cp.async.bulk.tensor) completing on mbarriers, wgmma.mma_async for both products, setmaxnreg to move
// registers from the producer to the consumers.
//
// One CTA per (128 query rows, head, batch), 384 threads = three warpgroups:
//   warpgroup 0  producer (setmaxnreg down to 24): thread 0 copies the q tile once, then the key and value
//                tiles 0, 1, ... into a ring of kStages stages (stage j % kStages), each copy completing on the
//                stage's fullK / fullV barrier (expect_tx); before refilling a stage's keys (values) it waits
//                on its emptyK (emptyV) barrier, which the 8 consumer warps arrive on once their products have
//                read them.
//   warpgroups 1, 2  consumers (up to 240 registers), 64 query rows each: per key tile, S = q k^T (wgmma,
//                both operands in shared memory, k K-major), mask, online softmax (fp32, exp2 with the running
//                max in scaled log2 units), P rounded to bf16 in registers as the A operand of O += P v (v
//                MN-major in shared memory: the transpose bit); in the order of a HopperSchedule (consume).
// Shared memory tiles are 64 columns (128 bytes) wide: a head dim of D is kDPad / 64 such boxes side by side
// (kDPad = D rounded up to 64 or 128), each box (rows, 64) with the 128-byte swizzle, the layout wgmma reads
// with swizzle mode 1 and a stride byte offset of 1024 (8 rows of 128 bytes).
// Descriptors (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading byte
// offset >> 4, 32-45 stride byte offset >> 4, 49-51 base offset (0: every box starts 1024-byte aligned),
// 62-63 swizzle (1 = 128 bytes).
//   K-major (q as A, k as B): SBO = 1024 (the next 8 rows); LBO unused (1); the k16 step within a 64-column
//   box moves the start address by 32 bytes, the next box by its size.
//   MN-major (v as B, rows = keys = K, columns = head dim = N): SBO = 1024 (the next 8 keys), LBO = the box
//   size, kN x 128 bytes (the next 64 columns of the head dim); the k16 step moves the start by 16 rows
//   (2048 bytes).
// Register fragments (PTX ISA, wgmma .m64nNk16): warp w of a warpgroup holds rows 16 w + lane / 4 and
// + 8; accumulator element 4 j + i is column 8 j + 2 (lane % 4) + (i & 1) of row + 8 (i >> 1); an A fragment of
// 16 columns is the accumulators 8 kk .. 8 kk + 7 of S paired (the mma.sync m16n8k16 layout), so P never leaves
// registers.
// Rows past the sequence end are zero-filled by the copy engine (the maps' token extent is T); key columns
// >= T, and for causal keys after the query row, are masked to -inf before the max, so they add exp2(-inf) =
// 0. Key 0 is visible to every row, so the running max is finite after the first tile.
#include "kernels/flash_attention_sm90.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/sm90_primitives.cuh"

namespace minidp::kernels::cuda {

namespace {

using namespace sm90;  // NOLINT: the shared building blocks

constexpr int kM = 128;                 // query rows per CTA: two consumer warpgroups of 64
constexpr int kThreads = 384;           // producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;       // arrivals that free a stage
constexpr int kStages = 2;              // key/value ring depth

// Tile shapes of head dim D: kDPad columns (D rounded up to a whole box, 80 and 96 to 128), kN keys per tile.
template <int D>
struct Config {
  static constexpr int kDPad = D <= 64 ? 64 : D <= 128 ? 128 : 256;
  static constexpr int kN = D <= 128 ? 128 : 64;
  static constexpr int kBoxes = kDPad / kBox;
  static constexpr int kQBytes = kM * kDPad * 2;
  static constexpr int kKVBytes = kN * kDPad * 2;  // one key (or value) tile
  static constexpr int kBarrierBytes = 8 * (1 + 4 * kStages);
  // 1024 bytes of slack: the dynamic allocation is aligned up to 1024 (the swizzle pattern's period).
  static constexpr int kSharedBytes = 1024 + kQBytes + 2 * kStages * kKVBytes + kBarrierBytes;
  static_assert(kSharedBytes <= 227 * 1024, "tiles exceed the shared memory of a CTA");
};

#if MINIDP_SM90A_DEVICE

// Barriers after the tiles: own is q's; stage s's A tile is its keys, its B tile its values (the keys read by every
// consumer warp free emptyA(s), the values emptyB(s)).
using Barriers = RingBarriers<kStages>;

// The producer: thread 0 of warpgroup 0. Key tile j goes into stage j % kStages once the consumers have
// read key tile j - kStages from it (likewise the values), so the keys of the next tile can land while the
// values of the last are still being read.
template <int D>
__device__ void produce(const CUtensorMap* mapQ, const CUtensorMap* mapK, const CUtensorMap* mapV, uint32_t sQ,
                        uint32_t sK, uint32_t sV, Barriers bars, int m0, int h, int kvHead, int b, int tiles) {
  using C = Config<D>;
  barrierExpectBytes(bars.own(), C::kQBytes);
#pragma unroll
  for (int x = 0; x < C::kBoxes; ++x) tmaLoad(sQ + x * kM * kBoxRowBytes, mapQ, x * kBox, h, m0, b, bars.own());
  for (int j = 0; j < tiles; ++j) {
    const int stage = j % kStages;
    const uint32_t emptyParity = ((j / kStages) & 1) ^ 1;  // the phase that tile j - kStages completed
    const uint32_t k = sK + stage * C::kKVBytes, v = sV + stage * C::kKVBytes;
    if (j >= kStages) barrierWait(bars.emptyA(stage), emptyParity);
    barrierExpectBytes(bars.fullA(stage), C::kKVBytes);
#pragma unroll
    for (int x = 0; x < C::kBoxes; ++x)
      tmaLoad(k + x * C::kN * kBoxRowBytes, mapK, x * kBox, kvHead, j * C::kN, b, bars.fullA(stage));
    if (j >= kStages) barrierWait(bars.emptyB(stage), emptyParity);
    barrierExpectBytes(bars.fullB(stage), C::kKVBytes);
#pragma unroll
    for (int x = 0; x < C::kBoxes; ++x)
      tmaLoad(v + x * C::kN * kBoxRowBytes, mapV, x * kBox, kvHead, j * C::kN, b, bars.fullB(stage));
  }
}

// One consumer warpgroup's state and steps: query rows m0 + 64 wg .. + 63, this thread's rows `row` and
// `row` + 8; o (64 x kDPad), the running max m (scaled log2 units) and this thread's share l of the row sums.
template <int D, bool kCausal>
struct Consumer {
  using C = Config<D>;
  static constexpr int kN = C::kN, kS = kN / 2, kO = C::kDPad / 2, kSteps = kN / 16;
  uint32_t qRows;  // this warpgroup's 64 rows of q's box 0
  int lane, row, wgRow0, seqLen;
  float scaleLog2;
  float o[kO], m[2], l[2];

  __device__ Consumer(uint32_t sQ, int m0, int wg, int seqLen, float scaleLog2)
      : qRows(sQ + 64 * wg * kBoxRowBytes),
        lane(threadIdx.x % 32),
        row(m0 + 64 * wg + 16 * (threadIdx.x % 128 / 32) + lane / 4),
        wgRow0(m0 + 64 * wg),
        seqLen(seqLen),
        scaleLog2(scaleLog2) {
#pragma unroll
    for (int e = 0; e < kO; ++e) o[e] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // Issues s = q k^T of the key tile at k (not committed).
  __device__ __forceinline__ void issueScores(float (&s)[kS], uint32_t k) const {
#pragma unroll
    for (int x = 0; x < C::kBoxes; ++x) {
#pragma unroll
      for (int kk = 0; kk < kBox / 16; ++kk) {
        const uint64_t a = matrixDescriptor(qRows + x * kM * kBoxRowBytes + kk * 32, 16);
        const uint64_t bk = matrixDescriptor(k + x * kN * kBoxRowBytes + kk * 32, 16);
        wgmmaSS(s, a, bk, (x | kk) != 0);
      }
    }
  }

  // Issues o += p v of the value tile at v (not committed).
  __device__ __forceinline__ void issueValues(const uint32_t (&p)[kSteps][4], uint32_t v) {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
      wgmmaRS(o, p[ks], matrixDescriptor(v + ks * 16 * kBoxRowBytes, kN * kBoxRowBytes));
  }

  // The online softmax of key tile j: masks s, updates m and l, turns s into probabilities (fp32) and
  // returns in `correction` the factor for the o of the tiles before.
  __device__ __forceinline__ void softmax(float (&s)[kS], int j, float (&correction)[2]) {
    // Mask where the tile holds a key after one of this warpgroup's rows (causal) or past the end.
    const int key0 = j * kN;
    if ((kCausal && key0 + kN - 1 > wgRow0) || key0 + kN > seqLen) {
#pragma unroll
      for (int e = 0; e < kS; ++e) {
        const int key = key0 + 8 * (e / 4) + 2 * (lane % 4) + (e & 1), r = row + 8 * ((e >> 1) & 1);
        if ((kCausal && key > r) || key >= seqLen) s[e] = -INFINITY;
      }
    }
    float tileMax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int e = 0; e < kS; ++e) tileMax[(e >> 1) & 1] = fmaxf(tileMax[(e >> 1) & 1], s[e]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tileMax[r] = fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 1));
      tileMax[r] = fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 2));
      const float mNew = fmaxf(m[r], tileMax[r] * scaleLog2);
      correction[r] = exp2Approx(m[r] - mNew);  // 0 at the first tile (m = -inf, mNew finite)
      m[r] = mNew;
      l[r] *= correction[r];
    }
#pragma unroll
    for (int e = 0; e < kS; ++e) {
      const int r = (e >> 1) & 1;
      s[e] = exp2Approx(fmaf(s[e], scaleLog2, -m[r]));
      l[r] += s[e];
    }
  }

  __device__ __forceinline__ void rescale(const float (&correction)[2]) {
#pragma unroll
    for (int e = 0; e < kO; ++e) o[e] *= correction[(e >> 1) & 1];
  }

  // p: the probabilities in bf16, as the A fragments of the kSteps k16 steps of o += p v.
  static __device__ __forceinline__ void pack(uint32_t (&p)[kSteps][4], const float (&s)[kS]) {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
#pragma unroll
      for (int i = 0; i < 4; ++i) p[ks][i] = packBf16(s[8 * ks + 2 * i], s[8 * ks + 2 * i + 1]);
  }

  // The row sums over the quad of lanes sharing a row; y = o / l, lse = ln 2 (m + log2 l).
  __device__ void store(__nv_bfloat16* out, float* lse, int h, int b, int H, bool pairStores) {
    const int64_t width = int64_t(H) * D;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const int rr = row + 8 * r;
      if (rr >= seqLen) continue;
      const float inv = 1.0f / l[r];
      __nv_bfloat16* dst = out + (int64_t(b) * seqLen + rr) * width + int64_t(h) * D;
#pragma unroll
      for (int jc = 0; jc < kO / 4; ++jc) {
        if (8 * jc >= D) continue;  // padding columns of D = 80, 96 (compile-time)
        const int col = 8 * jc + 2 * (lane % 4);
        const __nv_bfloat162 pair = __floats2bfloat162_rn(o[4 * jc + 2 * r] * inv, o[4 * jc + 2 * r + 1] * inv);
        if (pairStores) {
          *reinterpret_cast<__nv_bfloat162*>(dst + col) = pair;
        } else {
          dst[col] = pair.x;
          dst[col + 1] = pair.y;
        }
      }
      if (lane % 4 == 0) lse[(int64_t(b) * H + h) * seqLen + rr] = (m[r] + log2f(l[r])) * 0.6931471805599453f;
    }
  }
};
// A consumer warpgroup (wg 0 or 1) over key tiles 0 .. tiles - 1.
// Serial: per tile, s = q k^T, wait, softmax, o += p v, wait, release the stage.
// Overlapped (FlashAttention-3's intra-warpgroup overlap): s of tile j is issued together with o += p v of
// tile j - 1, and the softmax of tile j runs while the tensor cores do the latter; o is rescaled once that
// product is done. The keys of a tile are released as soon as its scores are in, its values after its product.
// PingPong: Overlapped, and the two warpgroups take turns issuing their products (FlashAttention-3's
// warpgroup ping-pong), so that one's softmax runs under the other's products. Named barrier 1 + wg is this
// warpgroup's turn: it waits there (bar.sync, 256 threads) and hands the turn over by arriving at the other's
// (bar.arrive). Warpgroup 1 arrives at warpgroup 0's once at the start, so warpgroup 0 goes first, and skips
// its last hand-over: each barrier then sees tiles + 1 syncs and as many arrivals, none left over.
template <int D, bool kCausal, HopperSchedule kSchedule>
__device__ void consume(uint32_t sQ, uint32_t sK, uint32_t sV, Barriers bars, __nv_bfloat16* out, float* lse, int m0,
                        int wg, int h, int b, int tiles, int seqLen, int H, float scaleLog2, bool pairStores) {
  using W = Consumer<D, kCausal>;
  using C = Config<D>;
  constexpr bool kPingPong = kSchedule == HopperSchedule::PingPong;
  constexpr int kTurnThreads = 256;  // both consumer warpgroups
  W w(sQ, m0, wg, seqLen, scaleLog2);
  const bool leader = w.lane == 0;  // one arrival per warp on the empty barriers
  auto keys = [&](int j) { return sK + (j % kStages) * C::kKVBytes; };
  auto values = [&](int j) { return sV + (j % kStages) * C::kKVBytes; };
  auto parity = [](int j) { return uint32_t((j / kStages) & 1); };
  auto takeTurn = [&] {
    if constexpr (kPingPong) namedBarrierSync(1 + wg, kTurnThreads);
  };
  auto passTurn = [&](bool last) {
    if constexpr (kPingPong) {
      if (!(last && wg == 1)) namedBarrierArrive(1 + (wg ^ 1), kTurnThreads);
    }
  };
  float s[W::kS], correction[2];
  uint32_t p[W::kSteps][4];
  // The products of one tile, each issued, waited for and its stage released.
  auto scores = [&](int j) {
    barrierWait(bars.fullA(j % kStages), parity(j));
    takeTurn();
    fenceRegisters(s);
    wgmmaFence();
    w.issueScores(s, keys(j));
    wgmmaCommit();
    passTurn(false);
    wgmmaWait<0>();
    fenceRegisters(s);
    if (leader) barrierArrive(bars.emptyA(j % kStages));
  };
  auto accumulate = [&](int j, bool last) {
    barrierWait(bars.fullB(j % kStages), parity(j));
    takeTurn();
    fenceRegisters(w.o);
    fenceRegisters(p);
    wgmmaFence();
    w.issueValues(p, values(j));
    wgmmaCommit();
    passTurn(last);
    wgmmaWait<0>();
    fenceRegisters(w.o);
    fenceRegisters(p);
    if (leader) barrierArrive(bars.emptyB(j % kStages));
  };
  barrierWait(bars.own(), 0);
  if constexpr (kSchedule == HopperSchedule::Serial) {
    for (int j = 0; j < tiles; ++j) {
      scores(j);
      w.softmax(s, j, correction);
      W::pack(p, s);
      w.rescale(correction);
      accumulate(j, false);
    }
  } else {
    if (kPingPong && wg == 1) namedBarrierArrive(1, kTurnThreads);  // warpgroup 0 takes the first turn
    scores(0);                                                      // tile 0: scores and softmax alone (o is still 0)
    w.softmax(s, 0, correction);
    W::pack(p, s);
    for (int j = 1; j < tiles; ++j) {
      barrierWait(bars.fullA(j % kStages), parity(j));
      barrierWait(bars.fullB((j - 1) % kStages), parity(j - 1));
      takeTurn();
      fenceRegisters(s);
      fenceRegisters(w.o);
      fenceRegisters(p);
      wgmmaFence();
      w.issueScores(s, keys(j));
      wgmmaCommit();
      w.issueValues(p, values(j - 1));
      wgmmaCommit();
      passTurn(false);
      wgmmaWait<1>();  // the scores of tile j (committed first) are in
      fenceRegisters(s);
      if (leader) barrierArrive(bars.emptyA(j % kStages));
      w.softmax(s, j, correction);
      wgmmaWait<0>();  // o += p v of tile j - 1 is done: o and p are free
      fenceRegisters(w.o);
      fenceRegisters(p);
      if (leader) barrierArrive(bars.emptyB((j - 1) % kStages));
      w.rescale(correction);
      W::pack(p, s);
    }
    accumulate(tiles - 1, true);
  }
  w.store(out, lse, h, b, H, pairStores);
}

#endif  // MINIDP_SM90A_DEVICE

// Grid (query tiles, H, B); blockIdx.x counts causal tiles from the last (the longest rows first). pairStores:
// out is 4-byte aligned, so a thread stores its two adjacent columns at once (else one element at a time).
template <int D, bool kCausal, HopperSchedule kSchedule>
__global__ void __launch_bounds__(kThreads, 1)
    hopperForwardKernel(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                        const __grid_constant__ CUtensorMap mapV, __nv_bfloat16* out, float* lse, int seqLen, int H,
                        int group, float scaleLog2, bool pairStores) {
#if MINIDP_SM90A_DEVICE
  using C = Config<D>;
  extern __shared__ unsigned char smemRaw[];
  const uint32_t base = (sharedAddress(smemRaw) + 1023) & ~1023u;
  const uint32_t sQ = base, sK = sQ + C::kQBytes, sV = sK + kStages * C::kKVBytes;
  const Barriers bars{sV + kStages * C::kKVBytes};
  const int qTile = kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, m0 = qTile * kM;
  const int keyTiles = (seqLen + C::kN - 1) / C::kN;
  const int tiles = kCausal ? min(keyTiles, (m0 + kM - 1) / C::kN + 1) : keyTiles;
  if (threadIdx.x == 0) bars.init(kConsumerWarps);
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 0) produce<D>(&mapQ, &mapK, &mapV, sQ, sK, sV, bars, m0, h, h / group, b, tiles);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    consume<D, kCausal, kSchedule>(sQ, sK, sV, bars, out, lse, m0, wg - 1, h, b, tiles, seqLen, H, scaleLog2,
                                   pairStores);
  }
#endif
}


template <int D, bool kCausal, HopperSchedule kSchedule>
void launch(const AttentionOperands<bf16>& in, bf16* out, float* lse, int64_t B, int64_t seqLen, int64_t H,
            cudaStream_t stream) {
  using C = Config<D>;
  const int64_t kvHeads = H / in.group;
  const CUtensorMap mapQ = operandMap(in.q, in.qStride, H, B, seqLen, D, kM);
  const CUtensorMap mapK = operandMap(in.k, in.kStride, kvHeads, B, seqLen, D, C::kN);
  const CUtensorMap mapV = operandMap(in.v, in.vStride, kvHeads, B, seqLen, D, C::kN);
  auto kernel = hopperForwardKernel<D, kCausal, kSchedule>;
  allowDynamicSharedBytes(kernel, C::kSharedBytes);
  const float scaleLog2 = float(1.0 / std::sqrt(double(D)) * 1.4426950408889634);
  const dim3 grid(unsigned((seqLen + kM - 1) / kM), unsigned(H), unsigned(B));
  kernel<<<grid, kThreads, C::kSharedBytes, stream>>>(mapQ, mapK, mapV, reinterpret_cast<__nv_bfloat16*>(out), lse,
                                                      int(seqLen), int(H), int(in.group), scaleLog2,
                                                      reinterpret_cast<uintptr_t>(out) % 4 == 0);
  CUDA_CHECK_LAUNCH();
}

template <int D, bool kCausal>
void launch(const AttentionOperands<bf16>& in, bf16* out, float* lse, int64_t B, int64_t seqLen, int64_t H,
            HopperSchedule schedule, cudaStream_t stream) {
  switch (schedule) {
    case HopperSchedule::Serial: return launch<D, kCausal, HopperSchedule::Serial>(in, out, lse, B, seqLen, H, stream);
    case HopperSchedule::Overlapped:
      return launch<D, kCausal, HopperSchedule::Overlapped>(in, out, lse, B, seqLen, H, stream);
    case HopperSchedule::PingPong:
      return launch<D, kCausal, HopperSchedule::PingPong>(in, out, lse, B, seqLen, H, stream);
  }
}

template <int D>
void launch(const AttentionOperands<bf16>& in, bf16* out, float* lse, int64_t B, int64_t seqLen, int64_t H, bool causal,
            HopperSchedule schedule, cudaStream_t stream) {
  if (causal) {
    launch<D, true>(in, out, lse, B, seqLen, H, schedule, stream);
  } else {
    launch<D, false>(in, out, lse, B, seqLen, H, schedule, stream);
  }
}

// Whether the current device runs the sm_90a kernels: compute capability 9.0 and a loadable image (probed
// once per device on one instantiation: all are in the same sm_90a cubin).
bool deviceRunsSm90a() {
  static std::mutex mutex;
  static std::vector<int> known;  // per device: -1 unknown, 0 no, 1 yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (int(known.size()) <= device) known.resize(device + 1, -1);
  if (known[device] < 0) {
    int major = 0, minor = 0;
    bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
              cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
              minor == 0;
    if (ok) {
      cudaFuncAttributes attributes;
      ok = cudaFuncGetAttributes(&attributes, hopperForwardKernel<128, true, HopperSchedule::Serial>) == cudaSuccess;
      if (!ok) cudaGetLastError();  // the failed probe's error must not surface at the next launch check
    }
    known[device] = ok ? 1 : 0;
  }
  return known[device] == 1;
}

}  // namespace

bool hopperAttentionSupportsHeadDim(int64_t d) { return d == 64 || d == 80 || d == 96 || d == 128 || d == 256; }

bool hopperAttentionAvailable(int64_t d) { return hopperAttentionSupportsHeadDim(d) && deviceRunsSm90a(); }

bool hopperAttentionAvailable(int64_t d, const AttentionOperands<bf16>& in, int64_t B, int64_t H) {
  if (!hopperAttentionAvailable(d) || in.group < 1 || H % in.group != 0 || B > 65535 || H > 65535) return false;
  const bf16* bases[3] = {in.q, in.k, in.v};
  const int64_t strides[3] = {in.qStride, in.kStride, in.vStride};
  for (int i = 0; i < 3; ++i) {
    if (reinterpret_cast<uintptr_t>(bases[i]) % 16 != 0 || strides[i] % 8 != 0 || strides[i] <= 0) return false;
  }
  return true;
}

namespace {
struct ModeName {
  const char* name;
  AttentionMode mode;
};
constexpr ModeName kModeNames[] = {{"auto", AttentionMode::Auto},          {"cp.async", AttentionMode::CpAsync},
                                   {"sm90", AttentionMode::Serial},         {"sm90-overlap", AttentionMode::Overlapped},
                                   {"sm90-pingpong", AttentionMode::PingPong}, {"sm90-bwd", AttentionMode::HopperBackward}};

constexpr int kUnset = -1;
std::atomic<int> gModeSet{kUnset};  // setAttentionMode's mode, or kUnset: the environment's

// MINIDP_ATTENTION's mode, read once (unset: Auto).
AttentionMode environmentMode() {
  static const AttentionMode mode = [] {
    const char* value = std::getenv("MINIDP_ATTENTION");
    return value == nullptr ? AttentionMode::Auto : parseAttentionMode(value, "MINIDP_ATTENTION");
  }();
  return mode;
}
}  // namespace

AttentionMode parseAttentionMode(const std::string& name, const std::string& source) {
  std::string accepted;
  for (const ModeName& m : kModeNames) {
    if (name == m.name) return m.mode;
    accepted += std::string(accepted.empty() ? "" : ", ") + m.name;
  }
  throwError(source + "=" + name + ": not an attention mode (" + accepted + ")", __FILE__, __LINE__);
}

const char* attentionModeName(AttentionMode mode) {
  for (const ModeName& m : kModeNames) {
    if (m.mode == mode) return m.name;
  }
  throwError("unknown attention mode " + std::to_string(int(mode)), __FILE__, __LINE__);
}

AttentionMode attentionMode() {
  const int set = gModeSet.load(std::memory_order_acquire);
  return set == kUnset ? environmentMode() : AttentionMode(set);
}

AttentionMode setAttentionMode(AttentionMode mode) {
  const int previous = gModeSet.exchange(int(mode), std::memory_order_acq_rel);
  return previous == kUnset ? environmentMode() : AttentionMode(previous);
}

bool hopperAttentionRequested(HopperSchedule* schedule) {
  const AttentionMode mode = attentionMode();
  if (schedule) {
    switch (mode) {
      case AttentionMode::Overlapped: *schedule = HopperSchedule::Overlapped; break;
      case AttentionMode::Auto:
      case AttentionMode::PingPong: *schedule = HopperSchedule::PingPong; break;
      default: *schedule = HopperSchedule::Serial;
    }
  }
  return mode != AttentionMode::CpAsync;
}

bool hopperAttentionBackwardRequested(int64_t d) {
  const AttentionMode mode = attentionMode();
  return mode == AttentionMode::HopperBackward || (mode == AttentionMode::Auto && d >= 128);
}

void hopperAttentionForward(AttentionOperands<bf16> in, bf16* out, float* lse, int64_t B, int64_t seqLen, int64_t H,
                            int64_t d, bool causal, cudaStream_t stream, HopperSchedule schedule) {
  MINIDP_CHECK(hopperAttentionAvailable(d, in, B, H),
               "Hopper attention: not available for head dim " << d << " on this device and operands");
  MINIDP_CHECK(seqLen <= (int64_t(1) << 30), "Hopper attention: sequence too long");
  if (B * seqLen * H == 0) return;
  switch (d) {
    case 64: return launch<64>(in, out, lse, B, seqLen, H, causal, schedule, stream);
    case 80: return launch<80>(in, out, lse, B, seqLen, H, causal, schedule, stream);
    case 96: return launch<96>(in, out, lse, B, seqLen, H, causal, schedule, stream);
    case 128: return launch<128>(in, out, lse, B, seqLen, H, causal, schedule, stream);
    case 256: return launch<256>(in, out, lse, B, seqLen, H, causal, schedule, stream);
    default: MINIDP_CHECK(false, "Hopper attention: head dim " << d << " has no kernel");
  }
}

}  // namespace minidp::kernels::cuda
