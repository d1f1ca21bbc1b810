// CPU twins of the bf16 wire casts, and the bf16 sum and scale of the MPI path.
#include "kernels/bf16_cast.h"

namespace minidp::kernels::cpu {

void castToBf16(const float* x, bf16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = floatToBf16(x[i]);
}

void castFromBf16(const bf16* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16ToFloat(x[i]);
}

void addBf16(const bf16* src, bf16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = floatToBf16(bf16ToFloat(dst[i]) + bf16ToFloat(src[i]));
}

void scaleBf16(bf16* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = floatToBf16(bf16ToFloat(x[i]) * s);
}

}  // namespace minidp::kernels::cpu
