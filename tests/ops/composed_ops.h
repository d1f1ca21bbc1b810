// RMSNorm and RoPE composed from public ops as docs/extending.md writes them: the tests compare them with the
// fused ops (ops::rmsNorm, ops::rotary) and minidp-bench-block times a block built from them.
#pragma once

#include <cmath>
#include <vector>

#include "framework/ops/ops.h"

namespace minidp::composed {

/// x * rsqrt(mean(x^2) + eps) * weight over the last dimension.
inline Variable rmsNorm(const Variable& x, const Variable& weight, double eps) {
  const Variable inv = ops::rsqrt(ops::addScalar(ops::meanLastDim(ops::mul(x, x)), eps));  // (..., 1)
  return ops::mulBroadcast(ops::mulBroadcast(x, inv), weight);
}

/// Rotate-half RoPE of x (B, T, H, d), as ops::rotary: x times cos, plus x with its halves swapped and the first
/// negated times sin; cos and sin are (T, H, d) tables (ropeTable).
inline Variable rope(const Variable& x, const Variable& cos, const Variable& sin) {
  const int64_t half = x.shape().back() / 2;
  const Variable swapped = ops::cat({ops::neg(ops::narrow(x, 3, half, half)), ops::narrow(x, 3, 0, half)}, 3);
  return ops::add(ops::mulBroadcast(x, cos), ops::mulBroadcast(swapped, sin));
}

/// The (T, H, d) float64 table of rope(): cos (or sin) of t / theta^(2i/d) for channel i mod d/2, repeated over
/// the heads (CPU).
inline Tensor ropeTable(int64_t T, int64_t H, int64_t d, double theta, bool sine) {
  std::vector<double> table;
  table.reserve(static_cast<size_t>(T * H * d));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < d; ++c) {
        const double angle = static_cast<double>(t) / std::pow(theta, 2.0 * static_cast<double>(c % (d / 2)) / d);
        table.push_back(sine ? std::sin(angle) : std::cos(angle));
      }
    }
  }
  return Tensor::fromVector(table, {T, H, d});
}

}  // namespace minidp::composed
