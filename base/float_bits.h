// floatBits, floatFromBits: a float's IEEE-754 bits and back, the scaffolding of the 16-bit float conversions
// (bf16.h, fp16.h). memcpy is the defined way to reinterpret; inlined, it is one register move.
#pragma once

#include <cstdint>
#include <cstring>

namespace minidp {

/// The bits of `f`.
inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// The float whose bits are `u`.
inline float floatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace minidp
