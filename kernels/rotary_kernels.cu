// The rotary embedding kernel, then its launcher. Block (t, b0) turns the pairs of position t in sequences
// b0, b0 + gridDim.y, ... (gridDim.y chosen so that a block has about 4 packs per thread): it first computes
// the position's cos and sin of every pair index (in double, rounded to AccumOf<T>: the values a per-pair
// computation gives) into shared memory, once for all its sequences and heads; then a thread per P pairs
// (16-byte accesses), turned in AccumOf<T> (float for bf16) and each output rounded once to T.
#include <algorithm>
#include <cmath>

#include "kernels/cuda_utils.cuh"
#include "kernels/rotary_kernels.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// Reads x_i and x_{i+d/2} before writing them (in place is safe). P consecutive pairs per thread (16-byte
// accesses when P = kPack<T>; the launcher checks that d / 2 is a multiple of P and the pointers allow it).
template <int P, typename T>
__global__ void rotaryKernel(const T* x, T* y, int64_t B, int64_t seqLen, int64_t H, int64_t d, double theta,
                             bool inverse) {
  using A = AccumOf<T>;
  extern __shared__ unsigned char shared[];
  A* cs = reinterpret_cast<A*>(shared);  // cos of pair i at cs[i], sin at cs[half + i]
  const int64_t half = d / 2, t = blockIdx.x, groups = half / P;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const double angle = rotaryAngle(t, i, d, theta);
    cs[i] = static_cast<A>(cos(angle));
    cs[half + i] = static_cast<A>(inverse ? -sin(angle) : sin(angle));
  }
  __syncthreads();
  // The block's packs, (sequence, head, pack) flattened so that every thread has work.
  const int64_t perSequence = H * groups, sequences = (B - blockIdx.y + gridDim.y - 1) / gridDim.y;
  for (int64_t q = threadIdx.x; q < sequences * perSequence; q += blockDim.x) {
    const int64_t b = blockIdx.y + q / perSequence * gridDim.y, r = q % perSequence;
    const int64_t i = (r % groups) * P, row = (b * seqLen + t) * H * d + (r / groups) * d;
    A x1[P], x2[P], y1[P], y2[P];
    loadAccum<P>(x + row + i, x1);
    loadAccum<P>(x + row + i + half, x2);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const A c = cs[i + j], s = cs[half + i + j];
      y1[j] = x1[j] * c - x2[j] * s;
      y2[j] = x2[j] * c + x1[j] * s;
    }
    storeAccum<P>(y + row + i, y1);
    storeAccum<P>(y + row + i + half, y2);
  }
}

}  // namespace

template <typename T>
void rotary(const T* x, T* y, int64_t B, int64_t seqLen, int64_t H, int64_t d, double theta, bool inverse,
            cudaStream_t stream) {
  if (B * seqLen * H * (d / 2) == 0) return;
  MINIDP_CHECK(seqLen <= INT32_MAX, "rotary: " << seqLen << " positions exceed a grid");
  constexpr int P = kPack<T>;
  // Sequences per block: enough that the table's double-precision cos and sin (d / 2 threads) are paid for
  // by about 4 packs per thread (counted in 16-byte packs, also for the element-wise fallback).
  const int64_t packsPerSequence = H * std::max<int64_t>(d / 2 / P, 1);
  const int64_t sequencesPerBlock = std::clamp<int64_t>(4 * kBlock / packsPerSequence, 1, B);
  const dim3 grid(static_cast<unsigned>(seqLen),
                  static_cast<unsigned>(std::min<int64_t>(ceilDiv(B, sequencesPerBlock), 65535)));
  const size_t shared = static_cast<size_t>(d) * sizeof(AccumOf<T>);  // d / 2 cosines, d / 2 sines
  if ((d / 2) % P == 0 && aligned16(x) && aligned16(y)) {
    rotaryKernel<P, T><<<grid, kBlock, shared, stream>>>(x, y, B, seqLen, H, d, theta, inverse);
  } else {
    rotaryKernel<1, T><<<grid, kBlock, shared, stream>>>(x, y, B, seqLen, H, d, theta, inverse);
  }
  CUDA_CHECK_LAUNCH();
}

template void rotary<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t, double, bool, cudaStream_t);
template void rotary<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t, double, bool, cudaStream_t);
template void rotary<bf16>(const bf16*, bf16*, int64_t, int64_t, int64_t, int64_t, double, bool, cudaStream_t);

}  // namespace minidp::kernels::cuda
