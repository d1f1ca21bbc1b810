// bf16: bfloat16 storage shared by host and device code. Layout-compatible with CUDA's __nv_bfloat16
// (the upper 16 bits of an IEEE-754 float), so .cu files reinterpret_cast between the two; code that
// is compiled without CUDA (the CPU build, framework/) names this type only.
#pragma once

#include <cstdint>

#include "base/float_bits.h"
#include "base/host_device.h"

namespace minidp {

/// A bfloat16 value: 1 sign, 8 exponent, 7 mantissa bits. Arithmetic happens in float.
struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 must be two bytes");

/// The float whose upper 16 bits are `b` (exact).
inline float bf16ToFloat(bf16 b) { return floatFromBits(static_cast<uint32_t>(b.bits) << 16); }

/// `f` rounded to the nearest bfloat16, ties to even (as __float2bfloat16_rn); NaN stays a quiet NaN.
inline bf16 floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

}  // namespace minidp

namespace minidp {

/// The types a kernel pairs with activation type T: parameters (and their gradients) and accumulation.
/// fp32 and fp64 runs keep one type throughout; bf16 activations pair with fp32 master parameters,
/// fp32 parameter gradients and fp32 accumulation (mixed precision).
template <typename T>
struct MixedTypes {
  using Param = T;
  using Accum = T;
};
template <>
struct MixedTypes<bf16> {
  using Param = float;
  using Accum = float;
};
template <typename T>
using ParamOf = typename MixedTypes<T>::Param;
template <typename T>
using AccumOf = typename MixedTypes<T>::Accum;

}  // namespace minidp
