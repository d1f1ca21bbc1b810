// Dtype conversion of a buffer (fp32, fp64, bf16 in any pair): the cast op and host toDType.
#pragma once

#include <cstdint>

#include "base/stream.h"

namespace minidp::kernels {

namespace cpu {
/// y[i] = x[i] converted to To (bf16 rounds to nearest even; double -> bf16 through float).
template <typename From, typename To>
void convert(const From* x, To* y, int64_t n);
}  // namespace cpu
namespace cuda {
/// As the CPU twin, on `stream`.
template <typename From, typename To>
void convert(const From* x, To* y, int64_t n, cudaStream_t stream);
}  // namespace cuda

}  // namespace minidp::kernels

/// Calls MACRO(From, To) for every ordered pair of distinct float types (float, double, bf16).
#define MINIDP_FOR_EACH_CONVERSION(MACRO) \
  MACRO(float, double)                    \
  MACRO(double, float)                    \
  MACRO(float, ::minidp::bf16)            \
  MACRO(::minidp::bf16, float)            \
  MACRO(double, ::minidp::bf16)           \
  MACRO(::minidp::bf16, double)
