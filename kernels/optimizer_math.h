// The per-element optimizer updates with their hyper-parameters (SgdParams, AdamWParams) and the clip factor,
// shared by the CUDA kernels and their CPU twins (kernels/optimizer_kernels.h).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/host_device.h"

namespace minidp::kernels {

/// Hyper-parameters of one SGD step as torch.optim.SGD defines them (dampening 0, no Nesterov).
template <typename T>
struct SgdParams {
  T lr, momentum, weightDecay;
  bool firstStep;  // the momentum buffer starts as the first gradient
};

/// Hyper-parameters of one AdamW step, torch.optim.AdamW's arithmetic: the bias corrections enter as
/// stepSize = lr / (1 - beta1^t) and bias2Sqrt = sqrt(1 - beta2^t), computed in double (adamwParams).
template <typename T>
struct AdamWParams {
  T lr, weightDecay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, eps, stepSize, bias2Sqrt;
};

/// AdamW's per-step scalars for step `step` (from 1). Every scalar is computed in double and rounded to T
/// once, as PyTorch does: in fp32, 1 - beta2^t computed in fp32 is off by up to ~1e-4 relative.
template <typename T>
inline AdamWParams<T> adamwParams(double lr, double beta1, double beta2, double eps, double weightDecay, int64_t step) {
  const double bias1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  return {T(lr),          T(weightDecay), T(beta1),      T(1.0 - beta1),     T(beta2),
          T(1.0 - beta2), T(eps),         T(lr / bias1), T(std::sqrt(bias2))};
}

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
