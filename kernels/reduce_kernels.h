// Whole-tensor reductions with a fixed summation order (bitwise deterministic), and the broadcast back.
#pragma once

#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {
namespace cpu {
/// out[0] = sum(x[0..n)).
template <typename T>
void sumAll(const T* x, T* out, int64_t n);
/// out[i] = scalar[0] * s for i in [0, n): the backward of sum and mean.
template <typename T>
void broadcastScalar(const T* scalar, T s, T* out, int64_t n);
}  // namespace cpu
namespace cuda {
template <typename T>
void sumAll(const T* x, T* out, int64_t n, cudaStream_t stream);
template <typename T>
void broadcastScalar(const T* scalar, T s, T* out, int64_t n, cudaStream_t stream);
}  // namespace cuda
}  // namespace minidp::kernels
