// The row gather of a (V, C) gradient indexed by token ids (--sparse-embedding-grad): the rows a rank's
// step touched are listed once each (markRows, then listMarkedRows: increasing ids, padded with -1 to a
// capacity every rank shares), packed into (n, C) in the wire's type (gatherRows), all-gathered, and every
// rank's packed rows are added into a zeroed gradient in rank order (scatterAddRows). A -1 id is padding:
// its packed row is zero and nothing is added for it.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

namespace cpu {
/// marks[ids[k]] = 1 for k < n; ids must lie in [0, V) (checked).
void markRows(const int32_t* ids, int64_t n, int64_t V, int32_t* marks);
/// The rows v with marks[v] != 0, increasing, into out[0, count), then -1 up to `capacity` (count must not
/// exceed capacity: checked).
void listMarkedRows(const int32_t* marks, int64_t V, int32_t* out, int64_t capacity);
/// packed[k, :] = W(grad[ids[k], :]) (bf16: rounded to nearest even), or zeros where ids[k] < 0.
template <typename T, typename W>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, W* packed);
/// grad[ids[k], :] += T(packed[k, :]) for each ids[k] >= 0; the ids >= 0 must be distinct.
template <typename W, typename T>
void scatterAddRows(const W* packed, const int32_t* ids, int64_t n, int64_t C, T* grad);
}  // namespace cpu

namespace cuda {
/// As the CPU twins; ids are not range-checked here (they are the embedding's, checked by its forward).
void markRows(const int32_t* ids, int64_t n, int64_t V, int32_t* marks, cudaStream_t stream);
/// One block scans the marks; entries past the capacity are dropped (the caller sizes it to fit).
void listMarkedRows(const int32_t* marks, int64_t V, int32_t* out, int64_t capacity, cudaStream_t stream);
template <typename T, typename W>
void gatherRows(const T* grad, const int32_t* ids, int64_t n, int64_t C, W* packed, cudaStream_t stream);
template <typename W, typename T>
void scatterAddRows(const W* packed, const int32_t* ids, int64_t n, int64_t C, T* grad, cudaStream_t stream);
}  // namespace cuda

}  // namespace minidp::kernels
