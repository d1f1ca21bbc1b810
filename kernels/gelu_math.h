// The tanh-approximate GELU and its derivative, shared by the CUDA kernels and their CPU twins.
#pragma once

#include <cmath>

#include "base/host_device.h"

namespace minidp::kernels {

template <typename T>
MINIDP_HOST_DEVICE inline T geluValue(T x) {
  const T c = T(0.7978845608028654);  // sqrt(2/pi)
  const T u = c * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh(u));
}

template <typename T>
MINIDP_HOST_DEVICE inline T geluDerivative(T x) {
  const T c = T(0.7978845608028654);
  const T u = c * (x + T(0.044715) * x * x * x);
  const T t = tanh(u);
  const T du = c * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

}  // namespace minidp::kernels
