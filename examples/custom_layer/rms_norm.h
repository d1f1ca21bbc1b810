// RMSNorm (Zhang and Sennrich, 2019), a layer minidp does not ship, written from minidp's composable ops:
// y = x / sqrt(mean(x^2 over the last dimension) + eps) * weight. Autograd derives its backward from the
// ops, and every op has CPU and CUDA kernels, so the layer runs on both devices with no kernel of its own.
#pragma once

#include <vector>

#include "framework/nn/module.h"
#include "framework/ops/ops.h"

namespace custom {

/// RMSNorm of x (..., C) with weight (C).
inline minidp::Variable rmsNorm(const minidp::Variable& x, const minidp::Variable& weight, double eps) {
  using namespace minidp::ops;
  minidp::Variable inv = rsqrt(addScalar(meanLastDim(mul(x, x)), eps));  // (..., 1)
  return mulBroadcast(mulBroadcast(x, inv), weight);
}

/// The layer: weight (C) starts at 1, as torch.nn.RMSNorm.
class RMSNorm : public minidp::nn::Module {
 public:
  explicit RMSNorm(int64_t features, double eps = 1e-6) : eps_(eps) {
    weight = registerParameter("weight", minidp::Tensor::fromVector(std::vector<float>(features, 1.0f), {features}));
  }
  minidp::Variable forward(const minidp::Variable& x) const { return rmsNorm(x, weight, eps_); }
  minidp::Variable weight;

 private:
  double eps_;
};

}  // namespace custom
