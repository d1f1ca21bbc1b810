// The rotary embedding kernel (one thread per channel pair, grid-stride), then its launcher. A pair is turned
// in AccumOf<T> (float for bf16) and each output rounded once to T.
#include <cmath>

#include "kernels/cuda_utils.cuh"
#include "kernels/rotary.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// Pair p = ((b * T + t) * H + h) * d/2 + i; reads x_i and x_{i+d/2} before writing them (in place is safe).
template <typename T>
__global__ void rotaryKernel(const T* x, T* y, int64_t pairs, int64_t seqLen, int64_t H, int64_t d, double theta,
                             bool inverse) {
  const int64_t half = d / 2;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % half, rowIndex = p / half, t = (rowIndex / H) % seqLen;
    const double angle = rotaryAngle(t, i, d, theta);
    const AccumOf<T> c = static_cast<AccumOf<T>>(cos(angle));
    const AccumOf<T> s = static_cast<AccumOf<T>>(inverse ? -sin(angle) : sin(angle));
    const int64_t row = rowIndex * d;
    const AccumOf<T> x1 = toAccum(x[row + i]), x2 = toAccum(x[row + i + half]);
    y[row + i] = fromAccum<T>(x1 * c - x2 * s);
    y[row + i + half] = fromAccum<T>(x2 * c + x1 * s);
  }
}

}  // namespace

template <typename T>
void rotary(const T* x, T* y, int64_t B, int64_t seqLen, int64_t H, int64_t d, double theta, bool inverse,
            cudaStream_t stream) {
  const int64_t pairs = B * seqLen * H * (d / 2);
  if (pairs == 0) return;
  rotaryKernel<T><<<gridFor(pairs, kBlock), kBlock, 0, stream>>>(x, y, pairs, seqLen, H, d, theta, inverse);
  CUDA_CHECK_LAUNCH();
}

template void rotary<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t, double, bool, cudaStream_t);
template void rotary<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t, double, bool, cudaStream_t);
template void rotary<bf16>(const bf16*, bf16*, int64_t, int64_t, int64_t, int64_t, double, bool, cudaStream_t);

}  // namespace minidp::kernels::cuda
