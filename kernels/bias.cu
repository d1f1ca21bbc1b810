// Bias kernels, then their launchers. The column sums use the two-stage reduction of kernels/cuda_utils.cuh.
#include "kernels/bias.h"
#include "kernels/cuda_utils.cuh"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

// y += bias over P consecutive elements per step (P divides C, so a step stays within one row).
template <int P, typename T>
__global__ void addBiasKernel(T* y, const ParamOf<T>* bias, int64_t n, int64_t C) {
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * P; i < n;
       i += int64_t(gridDim.x) * blockDim.x * P) {
    AccumOf<T> v[P], b[P];
    loadAccum<P>(y + i, v);
    loadAccum<P>(bias + i % C, b);
#pragma unroll
    for (int j = 0; j < P; ++j) v[j] += b[j];
    storeAccum<P>(y + i, v);
  }
}

// The term of row n, column c of a plain column sum.
template <typename T>
struct ColumnValue {
  static constexpr int kPack = cuda::kPack<T>;
  const T* x;
  int64_t C;
  template <int P>
  __device__ void pack(int64_t n, int64_t c, AccumOf<T> (&acc)[P][1]) const {
    AccumOf<T> v[P];
    loadAccum<P>(x + n * C + c, v);
#pragma unroll
    for (int j = 0; j < P; ++j) acc[j][0] += v[j];
  }
  bool packable() const { return C % kPack == 0 && aligned16(x); }
};

}  // namespace

template <typename T>
void addBias(T* y, const ParamOf<T>* bias, int64_t N, int64_t C, cudaStream_t stream) {
  const int64_t n = N * C;
  if (n == 0) return;
  constexpr int P = kPack<T>;
  if (C % P == 0 && aligned16(y) && aligned16(bias)) {
    addBiasKernel<P, T><<<gridFor(n / P, kBlock), kBlock, 0, stream>>>(y, bias, n, C);
  } else {
    addBiasKernel<1, T><<<gridFor(n, kBlock), kBlock, 0, stream>>>(y, bias, n, C);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void sumColumns(const T* x, ParamOf<T>* out, AccumOf<T>* scratch, int64_t N, int64_t C, bool accumulate,
                cudaStream_t stream) {
  reduceColumns<1>(ColumnValue<T>{x, C}, ColumnOutputs<1, ParamOf<T>>{{out}, {accumulate}}, scratch, N, C, stream);
}

#define MINIDP_INSTANTIATE(T)                                                      \
  template void addBias<T>(T*, const ParamOf<T>*, int64_t, int64_t, cudaStream_t); \
  template void sumColumns<T>(const T*, ParamOf<T>*, AccumOf<T>*, int64_t, int64_t, bool, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
MINIDP_INSTANTIATE(bf16)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
