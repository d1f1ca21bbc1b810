// Rotary position embedding (RoPE) over (B, T, H, d) activations, the "rotate half" form of GPT-NeoX and
// Hugging Face's LLaMA: channel i < d/2 of a head pairs with channel i + d/2, and the pair at position t
// turns by the angle t * theta^(-2i/d). The angles are computed in double from (t, i) by both twins
// (once per position and pair in each launch: no tables to keep or move between devices). CPU twins share the
// signatures, minus the stream.
// Instantiated for float and double, and on CUDA for bf16 (the pair turned in float, rounded once).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/bf16.h"
#include "base/host_device.h"
#include "base/stream.h"

namespace minidp::kernels {

/// The angle of channel pair i (< d/2) at position t: t / theta^(2i/d), in double, as PyTorch computes
/// 1 / theta ** (arange(0, d, 2) / d) and its outer product with the positions in float64.
MINIDP_HOST_DEVICE inline double rotaryAngle(int64_t t, int64_t i, int64_t d, double theta) {
  return static_cast<double>(t) * (1.0 / pow(theta, static_cast<double>(2 * i) / static_cast<double>(d)));
}

#define MINIDP_ROTARY_DECLARATIONS(...)                                                                     \
  /* y (B, T, H, d) = x rotated per position: with c, s = cos, sin of rotaryAngle(t, i) in AccumOf<T>, */   \
  /* y_i = x_i c - x_{i+d/2} s and y_{i+d/2} = x_{i+d/2} c + x_i s for i < d/2 (d even). `inverse` turns */ \
  /* the other way (s -> -s): the backward, since the rotation is orthogonal. y may equal x (in place). */  \
  template <typename T>                                                                                     \
  void rotary(const T* x, T* y, int64_t B, int64_t seqLen, int64_t H, int64_t d, double theta,              \
              bool inverse __VA_ARGS__);

namespace cpu {
MINIDP_ROTARY_DECLARATIONS()
}  // namespace cpu

namespace cuda {
MINIDP_ROTARY_DECLARATIONS(, cudaStream_t stream)
}  // namespace cuda

#undef MINIDP_ROTARY_DECLARATIONS

}  // namespace minidp::kernels
