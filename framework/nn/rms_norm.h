// RMSNorm: root-mean-square normalisation over the last dimension with a learned gain, as LLaMA's
// (torch.nn.RMSNorm; no mean subtracted, no bias).
#pragma once

#include "framework/nn/module.h"

namespace minidp::nn {

/// x * rsqrt(mean(x^2 over the last dimension) + eps) * weight; weight (features), 1 at start. ops::rmsNorm,
/// one kernel each way: float32 and float64 on the CPU and CUDA, and a bf16 x on CUDA with the fp32 weight
/// (mixed precision: a bf16 output, an fp32 weight gradient).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t features, double eps = 1e-5);
  Variable forward(const Variable& x) const;
  Variable weight;

 private:
  double eps_;
};

}  // namespace minidp::nn
