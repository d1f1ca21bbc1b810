// Device and host building blocks of the Hopper (sm_90a) attention kernels, written from the PTX ISA and
// shared by the forward (kernels/flash_attention_sm90.cu) and the backward (flash_attention_sm90_backward.cu):
// mbarriers with a bounded wait, TMA tile copies of 4-D tensor maps (128-byte swizzle), wgmma shared-memory
// descriptors and the m64nNk16 bf16 products, register fences. Included by the sm_90a object only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "base/bf16.h"
#include "base/check.h"
#include "base/cuda_check.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MINIDP_SM90A_DEVICE 1
#else
#define MINIDP_SM90A_DEVICE 0
#endif

namespace minidp::kernels::cuda::sm90 {

constexpr int kBox = 64;                // columns of one TMA box: 64 bf16 = 128 bytes, the swizzle span
constexpr int kBoxRowBytes = kBox * 2;  // 128

#if MINIDP_SM90A_DEVICE

// ---- shared memory, mbarriers, TMA ----

__device__ __forceinline__ uint32_t sharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrierInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Arrives (count 1) and adds `bytes` to the transaction count the phase waits for.
__device__ __forceinline__ void barrierExpectBytes(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void barrierArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool barrierTryWait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}

__device__ __forceinline__ uint64_t globalNanoseconds() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// No wait of this kernel lasts longer than a tile's copies or products (microseconds). One that lasts
// kWaitLimitNs is a protocol error: the thread then stores to address 0 on purpose, so that the launch fails
// with an illegal-address error (sticky: the host's next CUDA call reports it) instead of hanging the GPU.
// (__trap() would say so more plainly, but made ptxas spill the accumulators of most instantiations.)
constexpr uint64_t kWaitLimitNs = 10'000'000'000ull;

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void barrierWait(uint32_t bar, uint32_t parity) {
  if (barrierTryWait(bar, parity)) return;
  const uint64_t start = globalNanoseconds();
  while (!barrierTryWait(bar, parity)) {
    if (globalNanoseconds() - start > kWaitLimitNs) {
      asm volatile("st.global.u32 [%0], 0;\nexit;\n" ::"l"(0ull) : "memory");
    }
  }
}

// One box of a 4-D tensor map (columns, head, token, batch) into shared memory at `dst`, completing on `bar`.
__device__ __forceinline__ void tmaLoad(uint32_t dst, const CUtensorMap* map, int col, int head, int token, int batch,
                                        uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(head), "r"(token), "r"(batch), "r"(bar)
      : "memory");
}

// ---- wgmma ----

// A shared-memory matrix descriptor with the 128-byte swizzle and a stride byte offset of 1024.
__device__ __forceinline__ uint64_t matrixDescriptor(uint32_t address, uint32_t leadingBytes) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t((leadingBytes & 0x3FFFF) >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins register arrays in program order around the asynchronous products: the compiler may not move a read
// or write of them across this point (the wait before, the fence after).
template <int N>
__device__ __forceinline__ void fenceRegisters(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fenceRegisters(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// The wgmma .m64nNk16 products, bf16 in, fp32 accumulators d (N / 2 a thread, the fragment layout above).
// The accumulators are the asm statement's operands %0 .. %(R - 1), R = N / 2; the others follow them.
#define MINIDP_STR(x) #x
#define MINIDP_ACC_32                                                    \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
  ", "                                                                   \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MINIDP_ACC_64                                                              \
  MINIDP_ACC_32                                                                    \
  ", "                                                                             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
  ", "                                                                             \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MINIDP_ACC_128                                                                         \
  MINIDP_ACC_64                                                                                \
  ", "                                                                                         \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"             \
  ", "                                                                                         \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"             \
  ", "                                                                                         \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111" \
  ", "                                                                                         \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MINIDP_F8(i)                                                                                          \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define MINIDP_F32(i) MINIDP_F8(i), MINIDP_F8(i + 8), MINIDP_F8(i + 16), MINIDP_F8(i + 24)
#define MINIDP_F_32 MINIDP_F32(0)
#define MINIDP_F_64 MINIDP_F32(0), MINIDP_F32(32)
#define MINIDP_F_128 MINIDP_F_64, MINIDP_F32(64), MINIDP_F32(96)

// D (64 x N) = A B (scaleD 0) or D + A B (scaleD 1): A (64 x 16) and B (16 x N) in shared memory, both
// K-major (transpose bits 0). Operands after the accumulators: a = %R, b = %R + 1, scaleD = %R + 2.
#define MINIDP_WGMMA_SS(N, R, A, B, S)                                                                               \
  __device__ __forceinline__ void wgmmaSS(float(&d)[R], uint64_t a, uint64_t b, int scaleD) {                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" MINIDP_STR(                                                    \
                     S) ", 0;\nwgmma.mma_async.sync.aligned.m64n" MINIDP_STR(N) "k16.f32.bf16.bf16 {" MINIDP_ACC_##R \
                 "}, %" MINIDP_STR(A) ", %" MINIDP_STR(B) ", p, 1, 1, 0, 0;\n}\n"                                    \
                 : MINIDP_F_##R                                                                                      \
                 : "l"(a), "l"(b), "r"(scaleD));                                                                     \
  }
// D (64 x N) += A B: A (64 x 16) from registers (4 x 2 bf16 a thread), B (16 x N) in shared memory MN-major
// (transpose bit 1). Operands after the accumulators: a = %R .. %R + 3, b = %R + 4, scale-d = %R + 5 (1).
#define MINIDP_WGMMA_RS(N, R, A0, A1, A2, A3, B, S)                                                                  \
  __device__ __forceinline__ void wgmmaRS(float(&d)[R], const uint32_t(&a)[4], uint64_t b) {                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" MINIDP_STR(                                                    \
                     S) ", 0;\nwgmma.mma_async.sync.aligned.m64n" MINIDP_STR(N) "k16.f32.bf16.bf16 {" MINIDP_ACC_##R \
                 "}, {%" MINIDP_STR(A0) ", %" MINIDP_STR(A1) ", %" MINIDP_STR(A2) ", %" MINIDP_STR(                  \
                     A3) "}, %" MINIDP_STR(B) ", p, 1, 1, 1;\n}\n"                                                   \
                 : MINIDP_F_##R                                                                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                                      \
  }
MINIDP_WGMMA_SS(64, 32, 32, 33, 34)
MINIDP_WGMMA_SS(128, 64, 64, 65, 66)
MINIDP_WGMMA_RS(64, 32, 32, 33, 34, 35, 36, 37)
MINIDP_WGMMA_RS(128, 64, 64, 65, 66, 67, 68, 69)
MINIDP_WGMMA_RS(256, 128, 128, 129, 130, 131, 132, 133)
#undef MINIDP_WGMMA_RS
#undef MINIDP_WGMMA_SS
#undef MINIDP_F_128
#undef MINIDP_F_64
#undef MINIDP_F_32
#undef MINIDP_F32
#undef MINIDP_F8
#undef MINIDP_ACC_128
#undef MINIDP_ACC_64
#undef MINIDP_ACC_32
#undef MINIDP_STR

__device__ __forceinline__ float exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Named barrier `id` (1 and 2: 0 is __syncthreads) of `threads` threads: wait for them, or only arrive.
__device__ __forceinline__ void namedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void namedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The mbarriers of a producer/consumer ring, 8 bytes each from `base`: one for the tiles loaded once (own), then
// per stage s the two streamed tiles landed (fullA, fullB) and were read by every consumer warp (emptyA, emptyB).
template <int Stages>
struct RingBarriers {
  static constexpr int kStages = Stages;
  uint32_t base;
  __device__ uint32_t own() const { return base; }
  __device__ uint32_t fullA(int s) const { return base + 8 * (1 + s); }
  __device__ uint32_t fullB(int s) const { return base + 8 * (1 + kStages + s); }
  __device__ uint32_t emptyA(int s) const { return base + 8 * (1 + 2 * kStages + s); }
  __device__ uint32_t emptyB(int s) const { return base + 8 * (1 + 3 * kStages + s); }
  // By one thread, before the block's barrier: own and full wait for the producer's arrival with the byte count
  // (the copies complete them), empty for `consumerWarps` arrivals; fenced for the copy engine and the cluster.
  __device__ void init(int consumerWarps) const {
    barrierInit(own(), 1);
    for (int s = 0; s < kStages; ++s) {
      barrierInit(fullA(s), 1);
      barrierInit(fullB(s), 1);
      barrierInit(emptyA(s), consumerWarps);
      barrierInit(emptyB(s), consumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
};

#endif  // MINIDP_SM90A_DEVICE

// ---- host ----

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 encodeTiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status));
    MINIDP_CHECK(status == cudaDriverEntryPointSuccess && p, "Hopper attention: cuTensorMapEncodeTiled not found");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The 4-D map (d columns, heads, T tokens, B) of one operand, boxes of (64 columns, 1 head, rows tokens, 1),
// 128-byte swizzle; reads past any extent are zero-filled.
inline CUtensorMap operandMap(const bf16* base, int64_t stride, int64_t heads, int64_t B, int64_t seqLen, int64_t d,
                              int rows) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(heads), cuuint64_t(seqLen), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(d) * 2, cuuint64_t(stride) * 2, cuuint64_t(stride * seqLen) * 2};
  const cuuint32_t box[4] = {cuuint32_t(kBox), 1, cuuint32_t(rows), 1};
  const cuuint32_t elementStrides[4] = {1, 1, 1, 1};
  const CUresult r = encodeTiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<bf16*>(base), dims, strides,
                                   box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MINIDP_CHECK(r == CUDA_SUCCESS, "Hopper attention: cuTensorMapEncodeTiled failed with status " << int(r));
  return map;
}

}  // namespace minidp::kernels::cuda::sm90
