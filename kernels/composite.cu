// Kernels of the composable ops (grid-stride maps; one block per row for the sums), then their launchers.
#include <cmath>

#include "kernels/composite.h"
#include "kernels/composite_math.h"
#include "kernels/cuda_utils.cuh"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <typename T>
__global__ void unaryForwardKernel(UnaryOp op, const T* x, T p, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = unaryValue(op, x[i], p);
}

template <typename T>
__global__ void unaryBackwardKernel(UnaryOp op, const T* x, T p, const T* dy, T* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = dy[i] * unaryDerivative(op, x[i], p);
}

template <typename T>
__global__ void binaryKernel(BinaryOp op, Broadcast broadcast, const T* a, const T* b, T* out, int64_t n,
                             int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = binaryValue(op, a ? a[i] : T(0), b[broadcastIndex(broadcast, i, cols)]);
}

// One block per row: strided partial sums, then blockReduce's fixed order (deterministic).
template <typename T>
__global__ void sumLastDimKernel(const T* x, T* out, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * cols;  // (cols)
    T s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += kBlock) s += row[c];
    s = blockReduce<kBlock>(s, SumOp());
    if (threadIdx.x == 0) out[r] = s;
  }
}

template <typename T>
__global__ void gatherRowsKernel(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t v = index[i / C];
    out[i] = v >= 0 && v < V ? table[v * C + i % C] : T(NAN);
  }
}

}  // namespace

template <typename T>
void unaryForward(UnaryOp op, const T* x, T p, T* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  unaryForwardKernel<<<gridFor(n, kBlock), kBlock, 0, s>>>(op, x, p, y, n);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void unaryBackward(UnaryOp op, const T* x, T p, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  unaryBackwardKernel<<<gridFor(n, kBlock), kBlock, 0, s>>>(op, x, p, dy, dx, n);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void binaryForward(BinaryOp op, Broadcast broadcast, const T* a, const T* b, T* out, int64_t rows, int64_t cols,
                   cudaStream_t s) {
  if (rows * cols == 0) return;
  binaryKernel<<<gridFor(rows * cols, kBlock), kBlock, 0, s>>>(op, broadcast, a, b, out, rows * cols, cols);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void sumLastDim(const T* x, T* out, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return;
  sumLastDimKernel<<<gridFor(rows, 1), kBlock, 0, s>>>(x, out, rows, cols);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void gatherRows(const T* table, const int32_t* index, T* out, int64_t n, int64_t C, int64_t V, cudaStream_t s) {
  if (n * C == 0) return;
  gatherRowsKernel<<<gridFor(n * C, kBlock), kBlock, 0, s>>>(table, index, out, n, C, V);
  CUDA_CHECK_LAUNCH();
}

#define MINIDP_INSTANTIATE(T)                                                                                  \
  template void unaryForward<T>(UnaryOp, const T*, T, T*, int64_t, cudaStream_t);                              \
  template void unaryBackward<T>(UnaryOp, const T*, T, const T*, T*, int64_t, cudaStream_t);                   \
  template void binaryForward<T>(BinaryOp, Broadcast, const T*, const T*, T*, int64_t, int64_t, cudaStream_t); \
  template void sumLastDim<T>(const T*, T*, int64_t, int64_t, cudaStream_t);                                   \
  template void gatherRows<T>(const T*, const int32_t*, T*, int64_t, int64_t, int64_t, cudaStream_t);
MINIDP_INSTANTIATE(float)
MINIDP_INSTANTIATE(double)
#undef MINIDP_INSTANTIATE

}  // namespace minidp::kernels::cuda
