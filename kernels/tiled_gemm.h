// A hand-written float32 SGEMM that overlaps global-to-shared copies (cp.async) with the math, kept
// beside cuBLAS as the worked example of a double-buffered pipeline. Its CPU twin is cpu::gemm.
#pragma once

#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels::cuda {

/// C (M, N) = A (M, K) @ B (K, N), all row-major and contiguous, any M, N, K >= 0. 128 x 128 output
/// tiles; the K-tile after the one being multiplied is copied with cp.async meanwhile. 16-byte copies
/// when K and N are multiples of 4 and the pointers 16-byte aligned, 4-byte copies otherwise.
void tiledGemm(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C, cudaStream_t stream);

}  // namespace minidp::kernels::cuda
