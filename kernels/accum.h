// Loads and stores of an activation type T through its accumulation type (AccumOf<T>): identity for
// float and double, bf16 <-> float with round-to-nearest-even for bf16. Shared by CUDA kernels and CPU code.
#pragma once

#include "base/bf16.h"
#include "base/host_device.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace minidp::kernels {

/// x in its accumulation type.
template <typename T>
MINIDP_HOST_DEVICE inline AccumOf<T> toAccum(T x) {
  return x;
}
MINIDP_HOST_DEVICE inline float toAccum(bf16 x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
#else
  return bf16ToFloat(x);
#endif
}

/// An accumulated value stored as T (rounded to nearest even for bf16).
template <typename T>
MINIDP_HOST_DEVICE inline T fromAccum(AccumOf<T> x) {
  return x;
}
template <>
MINIDP_HOST_DEVICE inline bf16 fromAccum<bf16>(float x) {
#if defined(__CUDA_ARCH__)
  return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
#else
  return floatToBf16(x);
#endif
}

/// x converted from From to To; double -> bf16 rounds through float on both devices.
template <typename To, typename From>
MINIDP_HOST_DEVICE inline To convertValue(From x) {
  return fromAccum<To>(static_cast<AccumOf<To>>(toAccum(x)));
}

}  // namespace minidp::kernels
