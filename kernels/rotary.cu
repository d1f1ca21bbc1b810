// The rotary embedding kernel, then its launcher. Block (t, b0) turns the pairs of position t in sequences b0,
// b0 + gridDim.y, ...: it first computes the position's cos and sin of every pair index (in double, rounded to
// AccumOf<T>: the values a per-pair computation gives) into shared memory, once for all its sequences and
// heads; then a thread per P pairs (16-byte accesses), turned in AccumOf<T> (float for bf16) and each output
// rounded once to T.
#include <algorithm>
#include <cmath>

#include "kernels/cuda_utils.cuh"
#include "kernels/rotary.h"

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
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    const int64_t base = (b * seqLen + t) * H * d;
    for (int64_t q = threadIdx.x; q < H * groups; q += blockDim.x) {
      const int64_t i = (q % groups) * P, row = base + (q / groups) * d;
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
}

}  // namespace

template <typename T>
void rotary(const T* x, T* y, int64_t B, int64_t seqLen, int64_t H, int64_t d, double theta, bool inverse,
            cudaStream_t stream) {
  if (B * seqLen * H * (d / 2) == 0) return;
  MINIDP_CHECK(seqLen <= INT32_MAX, "rotary: " << seqLen << " positions exceed a grid");
  const dim3 grid(static_cast<unsigned>(seqLen), static_cast<unsigned>(std::min<int64_t>(B, 65535)));
  const size_t shared = static_cast<size_t>(d) * sizeof(AccumOf<T>);  // d / 2 cosines, d / 2 sines
  constexpr int P = kPack<T>;
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
