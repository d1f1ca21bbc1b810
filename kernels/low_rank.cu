#include "base/cuda_check.h"
#include "kernels/cuda_utils.cuh"
#include "kernels/low_rank.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kOrthoBlock = 512;

struct Add {
  __device__ double operator()(double a, double b) const { return a + b; }
};

/// One block: the columns in order, each sum a fixed-order block reduction in double.
__global__ void orthogonalizeKernel(float* m, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) {
    double squares = 0;
    for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) {
      const double v = m[r * cols + i];
      squares += v * v;
    }
    const float norm = static_cast<float>(sqrt(blockReduce<kOrthoBlock>(squares, Add{})));
    for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) m[r * cols + i] /= norm;
    __syncthreads();
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) {
        dot += static_cast<double>(m[r * cols + i]) * m[r * cols + j];
      }
      const float d = static_cast<float>(blockReduce<kOrthoBlock>(dot, Add{}));
      for (int64_t r = threadIdx.x; r < rows; r += kOrthoBlock) m[r * cols + j] -= d * m[r * cols + i];
      __syncthreads();
    }
  }
}

__global__ void subtractKernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[k] = a[k] - b[k];
  }
}

}  // namespace

void orthogonalizeColumns(float* m, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  orthogonalizeKernel<<<1, kOrthoBlock, 0, stream>>>(m, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void subtract(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  subtractKernel<<<gridFor(n, 256), 256, 0, stream>>>(a, b, out, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minidp::kernels::cuda
