// LayerNorm: normalisation over the last dimension, as torch.nn.LayerNorm.
#pragma once

#include "framework/nn/module.h"

namespace minidp::nn {

/// LayerNorm over the last dimension, weight 1 and bias 0 at start, as torch.nn.LayerNorm.
class LayerNorm : public Module {
 public:
  LayerNorm(int64_t features, double eps = 1e-5);
  Variable forward(const Variable& x) const;
  Variable weight, bias;

 private:
  double eps_;
};

}  // namespace minidp::nn
