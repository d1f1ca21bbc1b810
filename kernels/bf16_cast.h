// bf16 on the wire (gradient compression, --grad-comm bf16): fp32 <-> bf16 casts, rounding to nearest
// even, and the CPU's bf16 sum and scale, each rounding once per operation as NCCL's bf16 reductions do.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "base/stream.h"

namespace minidp::kernels {

namespace cpu {
/// out = bf16(x), round to nearest even.
void castToBf16(const float* x, bf16* out, int64_t n);
/// out = float(x) (exact).
void castFromBf16(const bf16* x, float* out, int64_t n);
/// dst = bf16(float(dst) + float(src)): the element-wise sum of a bf16 reduction.
void addBf16(const bf16* src, bf16* dst, int64_t n);
/// x = bf16(float(x) * s): NCCL's ncclAvg pre-multiplication of each rank's bf16 input by 1/N.
void scaleBf16(bf16* x, float s, int64_t n);
}  // namespace cpu

namespace cuda {
void castToBf16(const float* x, bf16* out, int64_t n, cudaStream_t stream);
void castFromBf16(const bf16* x, float* out, int64_t n, cudaStream_t stream);
}  // namespace cuda

}  // namespace minidp::kernels
