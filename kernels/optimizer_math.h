// The per-element optimizer updates and the norm's slicing, shared by the CUDA kernels and their CPU twins.
#pragma once

#include <cmath>

#include "base/host_device.h"
#include "kernels/optimizer_kernels.h"

namespace minidp::kernels {

template <typename T>
MINIDP_HOST_DEVICE inline void sgdUpdate(T& p, T g, T& buf, const SgdParams<T>& h) {
  g += h.weightDecay * p;
  if (h.momentum != T(0)) {
    buf = h.firstStep ? g : h.momentum * buf + g;
    g = buf;
  }
  p -= h.lr * g;
}

template <typename T>
MINIDP_HOST_DEVICE inline void adamwUpdate(T& p, T g, T& m, T& v, const AdamWParams<T>& h) {
  p *= T(1) - h.lr * h.weightDecay;
  m = h.beta1 * m + h.oneMinusBeta1 * g;
  v = h.beta2 * v + h.oneMinusBeta2 * g * g;
  p -= h.stepSize * m / (sqrt(v) / h.bias2Sqrt + h.eps);
}

/// The gradient factor of a step: the clip coefficient when there is one.
template <typename T>
MINIDP_HOST_DEVICE inline T gradFactor(const T* gradScale) {
  return gradScale ? *gradScale : T(1);
}

/// The clip coefficient from the global norm (torch.nn.utils.clip_grad_norm_: min(1, max / (norm + 1e-6))).
template <typename T>
MINIDP_HOST_DEVICE inline T clipFactor(double norm, double maxNorm) {
  return maxNorm > 0 ? T(fmin(1.0, maxNorm / (norm + 1e-6))) : T(1);
}

}  // namespace minidp::kernels
