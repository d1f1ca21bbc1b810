// fp16: IEEE-754 half-precision storage shared by host and device code. Layout-compatible with CUDA's __half,
// so .cu files reinterpret_cast between the two; code compiled without CUDA names this type only. minidp
// carries fp16 as a wire format (collectives, comm hooks); its ops compute in fp32 and bf16.
#pragma once

#include <cstdint>

#include "base/float_bits.h"

namespace minidp {

/// A half-precision value: 1 sign, 5 exponent, 10 mantissa bits. Arithmetic happens in float.
struct fp16 {
  uint16_t bits;
};
static_assert(sizeof(fp16) == 2, "fp16 must be two bytes");

/// The float `h` stands for (exact).
inline float fp16ToFloat(fp16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    u = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // Subnormal or zero: mantissa * 2^-24, exact in float.
    u = sign | floatBits(static_cast<float>(mantissa) * 5.9604644775390625e-8f);
  }
  return floatFromBits(u);
}

/// `f` rounded to the nearest half, ties to even (as __float2half_rn); beyond 65520 it is infinite, NaN stays
/// a quiet NaN.
inline fp16 floatToFp16(float f) {
  uint32_t u = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return fp16{static_cast<uint16_t>(sign | 0x7e00u)};
  if (u >= 0x47800000u) return fp16{static_cast<uint16_t>(sign | 0x7c00u)};  // 2^16 and up
  const uint32_t biased = u >> 23;
  if (biased < 102) return fp16{sign};  // below 2^-25: zero (2^-25 itself ties to even zero)
  uint32_t shift, kept;
  if (biased < 113) {
    // A subnormal half: the 24-bit significand shifted to units of 2^-24.
    shift = 126 - biased;
    kept = ((u & 0x7fffffu) | 0x800000u) >> shift;
  } else {
    shift = 13;
    kept = (u >> 13) - (112u << 10);
  }
  const uint32_t rest = (shift == 13 ? u : ((u & 0x7fffffu) | 0x800000u)) & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;  // a carry moves into the exponent, as it should
  return fp16{static_cast<uint16_t>(sign | kept)};
}

}  // namespace minidp
