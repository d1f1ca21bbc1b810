// Row marking, listing (one block, cub::BlockScan), gather and scatter-add, then their launchers.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda_utils.cuh"
#include "kernels/rows.h"

namespace minidp::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kListBlock = 1024;

__global__ void markRowsKernel(const int32_t* ids, int64_t n, int32_t* marks) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    marks[ids[k]] = 1;  // threads marking one row write the same value
  }
}

__global__ void listMarkedRowsKernel(const int32_t* marks, int64_t V, int32_t* out, int64_t capacity) {
  using Scan = cub::BlockScan<int, kListBlock>;
  __shared__ typename Scan::TempStorage temp;
  int64_t count = 0;
  for (int64_t base = 0; base < V; base += kListBlock) {
    const int64_t v = base + threadIdx.x;
    const int flag = v < V && marks[v] != 0;
    int position = 0, total = 0;
    Scan(temp).ExclusiveSum(flag, position, total);
    if (flag && count + position < capacity) out[count + position] = static_cast<int32_t>(v);
    count += total;
    __syncthreads();  // temp is reused by the next chunk's scan
  }
  for (int64_t k = count + threadIdx.x; k < capacity; k += kListBlock) out[k] = -1;
}

template <typename T, typename W>
__global__ void gatherRowsKernel(const T* grad, const int32_t* ids, int64_t n, int64_t C, W* packed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = ids[i / C];
    packed[i] = fromAccum<W>(row < 0 ? toAccum(T(0)) : toAccum(grad[row * C + i % C]));
  }
}

template <typename W, typename T>
__global__ void scatterAddRowsKernel(const W* packed, const int32_t* ids, int64_t n, int64_t C, T* grad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = ids[i / C];
    if (row >= 0) grad[row * C + i % C] += static_cast<T>(toAccum(packed[i]));  // distinct rows: no race
  }
}

}  // namespace

void markRows(const int32_t* ids, int64_t n, int64_t V, int32_t* marks, cudaStream_t stream) {
  (void)V;
  if (n == 0) return;
  markRowsKernel<<<gridFor(n, kBlock), kBlock, 0, stream>>>(ids, n, marks);
  CUDA_CHECK_LAUNCH();
}

void listMarkedRows(const int32_t* marks, int64_t V, int32_t* out, int64_t capacity, cudaStream_t stream) {
  listMarkedRowsKernel<<<1, kListBlock, 0, stream>>>(marks, V, out, capacity);
  CUDA_CHECK_LAUNCH();
}

template <typename T, typename W>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, W* packed, cudaStream_t stream) {
  if (n * C == 0) return;
  gatherRowsKernel<T, W><<<gridFor(n * C, kBlock), kBlock, 0, stream>>>(grad, ids, n, C, packed);
  CUDA_CHECK_LAUNCH();
}

template <typename W, typename T>
void scatterAddRows(const W* packed, const int32_t* ids, int64_t n, int64_t C, T* grad, cudaStream_t stream) {
  if (n * C == 0) return;
  scatterAddRowsKernel<W, T><<<gridFor(n * C, kBlock), kBlock, 0, stream>>>(packed, ids, n, C, grad);
  CUDA_CHECK_LAUNCH();
}

template void gatherRows<float, float>(const float*, const int32_t*, int64_t, int64_t, float*, cudaStream_t);
template void gatherRows<double, double>(const double*, const int32_t*, int64_t, int64_t, double*, cudaStream_t);
template void gatherRows<float, bf16>(const float*, const int32_t*, int64_t, int64_t, bf16*, cudaStream_t);
template void scatterAddRows<float, float>(const float*, const int32_t*, int64_t, int64_t, float*, cudaStream_t);
template void scatterAddRows<double, double>(const double*, const int32_t*, int64_t, int64_t, double*, cudaStream_t);
template void scatterAddRows<bf16, float>(const bf16*, const int32_t*, int64_t, int64_t, float*, cudaStream_t);

}  // namespace minidp::kernels::cuda
