// Row gather and scatter of a (V, C) gradient by a list of row ids (--sparse-embedding-grad): the rows a
// step touched are packed into (n, C), averaged over the ranks, and written back. Ids must lie in [0, V);
// an id listed twice is packed twice and written back twice (with the same averaged values).
#pragma once

#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {

namespace cpu {
/// packed[k, :] = grad[ids[k], :] for k < n; grad (V, C), packed (n, C).
template <typename T>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, T* packed);
/// grad[ids[k], :] = packed[k, :] for k < n.
template <typename T>
void scatterRows(const T* packed, const int32_t* ids, int64_t n, int64_t C, T* grad);
}  // namespace cpu

namespace cuda {
template <typename T>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, T* packed, cudaStream_t stream);
template <typename T>
void scatterRows(const T* packed, const int32_t* ids, int64_t n, int64_t C, T* grad, cudaStream_t stream);
}  // namespace cuda

}  // namespace minidp::kernels
