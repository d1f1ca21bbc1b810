// Double-buffered tiled SGEMM. Each block owns a kBM x kBN tile of C and walks K in steps of kBK:
// while the threads multiply the K-tile in one shared-memory stage, cp.async fills the other stage
// with the next K-tile. Each of the 256 threads accumulates an 8 x 8 sub-tile in registers.
#include <cuda_pipeline.h>

#include <climits>
#include <cstdint>

#include "base/cuda_check.h"
#include "kernels/tiled_gemm.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 16;
constexpr int kThreadsX = 16, kThreadsY = 16, kThreads = kThreadsX * kThreadsY;
constexpr int kTM = kBM / kThreadsY, kTN = kBN / kThreadsX;  // 8 x 8 outputs per thread
static_assert(kTM == 8 && kTN == 8, "the register tile below is written for 8 x 8");

struct Stage {
  float a[kBM][kBK];  // A (kBM, kBK)
  float b[kBK][kBN];  // B (kBK, kBN)
};

// Issues the asynchronous copies of K-tile `k0` into `stage`; chunks of kVec floats (4 or 16 bytes).
// Out-of-range chunks are zero-filled, so the multiply needs no bounds checks. With kVec = 4, K and N
// are multiples of 4, so a chunk is either wholly inside the matrix or wholly outside.
template <int kVec>
__device__ void loadTile(Stage& stage, const float* A, const float* B, int64_t M, int64_t N, int64_t K, int64_t m0,
                         int64_t n0, int64_t k0) {
  constexpr int kBytes = kVec * sizeof(float);
  constexpr int kChunksA = kBM * kBK / kVec, kChunksB = kBK * kBN / kVec;
  static_assert(kChunksA % kThreads == 0 && kChunksB % kThreads == 0, "chunks must divide among threads");
  for (int idx = threadIdx.x; idx < kChunksA; idx += kThreads) {
    const int m = idx / (kBK / kVec), k = idx % (kBK / kVec) * kVec;
    const bool inside = m0 + m < M && k0 + k < K;
    const float* src = inside ? A + (m0 + m) * K + k0 + k : A;  // a valid address even when nothing is read
    __pipeline_memcpy_async(&stage.a[m][k], src, kBytes, inside ? 0 : kBytes);
  }
  for (int idx = threadIdx.x; idx < kChunksB; idx += kThreads) {
    const int k = idx / (kBN / kVec), n = idx % (kBN / kVec) * kVec;
    const bool inside = k0 + k < K && n0 + n < N;
    const float* src = inside ? B + (k0 + k) * N + n0 + n : B;
    __pipeline_memcpy_async(&stage.b[k][n], src, kBytes, inside ? 0 : kBytes);
  }
}

template <int kVec>
__global__ void __launch_bounds__(kThreads)
    tiledGemmKernel(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  __shared__ __align__(16) Stage stages[2];
  const int tx = threadIdx.x % kThreadsX, ty = threadIdx.x / kThreadsX;
  const int64_t m0 = blockIdx.y * int64_t(kBM), n0 = blockIdx.x * int64_t(kBN);
  // Thread (tx, ty) owns rows ty + 16 i and columns 4 tx + 64 h + j (i < 8, h < 2, j < 4): the two
  // row values in a warp read A's stage as broadcasts, and B's columns come as conflict-free float4s.
  float acc[kTM][kTN] = {};
  const int64_t tiles = (K + kBK - 1) / kBK;
  loadTile<kVec>(stages[0], A, B, M, N, K, m0, n0, 0);
  __pipeline_commit();
  for (int64_t t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) loadTile<kVec>(stages[(t + 1) % 2], A, B, M, N, K, m0, n0, (t + 1) * kBK);
    __pipeline_commit();       // possibly empty, so that "all but the newest group" is always tile t
    __pipeline_wait_prior(1);  // this thread's copies of tile t have landed...
    __syncthreads();           // ...and so have every other thread's
    const Stage& s = stages[t % 2];
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      float a[kTM], b[kTN];
#pragma unroll
      for (int i = 0; i < kTM; ++i) a[i] = s.a[ty + kThreadsY * i][k];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 v = *reinterpret_cast<const float4*>(&s.b[k][4 * tx + 64 * h]);
        b[4 * h] = v.x;
        b[4 * h + 1] = v.y;
        b[4 * h + 2] = v.z;
        b[4 * h + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();  // the next iteration's copies overwrite this stage
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int64_t row = m0 + ty + kThreadsY * i;
    if (row >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t col = n0 + 4 * tx + 64 * h;
      const float* v = &acc[i][4 * h];
      if constexpr (kVec == 4) {  // N % 4 == 0: the four columns are all inside or all outside
        if (col < N) *reinterpret_cast<float4*>(C + row * N + col) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        for (int j = 0; j < 4; ++j)
          if (col + j < N) C[row * N + col + j] = v[j];
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void tiledGemm(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C, cudaStream_t stream) {
  MINIDP_CHECK(M >= 0 && N >= 0 && K >= 0, "tiledGemm: negative size M=" << M << " N=" << N << " K=" << K);
  MINIDP_CHECK((M + kBM - 1) / kBM <= 65535, "tiledGemm: " << M << " rows exceed the grid");
  if (M == 0 || N == 0) return;
  const dim3 grid(ceilDiv(N, kBN), ceilDiv(M, kBM));
  if (K % 4 == 0 && N % 4 == 0 && aligned16(A) && aligned16(B) && aligned16(C)) {
    tiledGemmKernel<4><<<grid, kThreads, 0, stream>>>(A, B, C, M, N, K);
  } else {
    tiledGemmKernel<1><<<grid, kThreads, 0, stream>>>(A, B, C, M, N, K);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace minidp::kernels::cuda
