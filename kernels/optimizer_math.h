// The per-element optimizer updates, shared by the CUDA kernels and their CPU twins.
#pragma once

#include <cmath>

#include "kernels/host_device.h"
#include "kernels/optimizer.h"

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
MINIDP_HOST_DEVICE inline void adamwUpdate(T& p, T g, T& m, T& v, const AdamWParams<T>& h, T bias1, T bias2) {
  p *= T(1) - h.lr * h.weightDecay;
  m = h.beta1 * m + (T(1) - h.beta1) * g;
  v = h.beta2 * v + (T(1) - h.beta2) * g * g;
  p -= h.lr * (m / bias1) / (sqrt(v / bias2) + h.eps);
}

}  // namespace minidp::kernels
