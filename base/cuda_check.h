// CUDA and cuBLAS checks, derived from MINIDP_CHECK_STATUS; included only by CUDA-enabled code.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "base/check.h"

#define CUDA_CHECK(call) MINIDP_CHECK_STATUS(call, cudaSuccess, cudaGetErrorString)
#define CUBLAS_CHECK(call) MINIDP_CHECK_STATUS(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
/// Checks the last kernel launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace minidp::kernels {
/// Grid size for n elements at `block` threads each.
inline unsigned ceilDiv(long long n, long long block) { return static_cast<unsigned>((n + block - 1) / block); }
}  // namespace minidp::kernels
