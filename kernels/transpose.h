// Batched transpose of the last two dimensions: float and double on both devices, bf16 on CUDA.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

#define MINIDP_TRANSPOSE_DECLARATIONS(...)                                                \
  /* y[b] (N, M) = x[b] (M, N)^T for b in [0, batch); x and y contiguous and distinct. */ \
  template <typename T>                                                                   \
  void transpose(const T* x, T* y, int64_t batch, int64_t M, int64_t N __VA_ARGS__);

namespace cpu {
MINIDP_TRANSPOSE_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_TRANSPOSE_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_TRANSPOSE_DECLARATIONS

}  // namespace minidp::kernels
