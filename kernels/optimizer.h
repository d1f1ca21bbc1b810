// Fused optimizer updates: one kernel per parameter tensor and step, reading the gradient once.
#pragma once

#include <cstdint>

#include "kernels/stream.h"

namespace minidp::kernels {

/// Hyper-parameters of SGD as torch.optim.SGD defines them (dampening 0, no Nesterov).
template <typename T>
struct SgdParams {
  T lr, momentum, weightDecay;
  bool firstStep;  // the momentum buffer starts as the first gradient
};

/// Hyper-parameters of AdamW as torch.optim.AdamW defines them; `step` counts from 1.
template <typename T>
struct AdamWParams {
  T lr, beta1, beta2, eps, weightDecay;
  int64_t step;
};

namespace cpu {
/// g = grad + wd * p; buf = first ? g : momentum * buf + g; p -= lr * (momentum ? buf : g).
template <typename T> void sgdStep(T* param, const T* grad, T* momentumBuf, int64_t n, SgdParams<T> h);
/// p *= 1 - lr*wd; m, v moments; p -= lr * mhat / (sqrt(vhat) + eps).
template <typename T> void adamwStep(T* param, const T* grad, T* m, T* v, int64_t n, AdamWParams<T> h);
}  // namespace cpu

namespace cuda {
template <typename T>
void sgdStep(T* param, const T* grad, T* momentumBuf, int64_t n, SgdParams<T> h, cudaStream_t stream);
template <typename T>
void adamwStep(T* param, const T* grad, T* m, T* v, int64_t n, AdamWParams<T> h, cudaStream_t stream);
}  // namespace cuda

}  // namespace minidp::kernels
