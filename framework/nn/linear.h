// Linear: the fully connected layer, as torch.nn.Linear.
#pragma once

#include "framework/nn/init.h"
#include "framework/nn/module.h"

namespace minidp::nn {

/// y = x W^T + b with W stored [out, in] as torch.nn.Linear; PyTorch's default initialisation
/// (weight and bias uniform in +-1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, Rng& rng);
  Variable forward(const Variable& x) const;
  /// residual + forward(x), the addition in the GEMM (ops::linear's residual form).
  Variable forward(const Variable& x, const Variable& residual) const;
  Variable weight, bias;
};

}  // namespace minidp::nn
