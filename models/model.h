// Model: a Module that maps a batch of inputs to logits and a mean cross-entropy loss.
#pragma once

#include "framework/nn/module.h"

namespace minidp::models {

/// What the trainer needs of a model.
class Model : public nn::Module {
 public:
  /// Logits as (N, classes): N = batch rows (MLP) or batch * context positions (GPT).
  virtual Variable forward(const Tensor& inputs) const = 0;
  /// Mean cross-entropy of forward(inputs) against int32 targets, flattened to (N). A model may override
  /// it with a fused computation of the same value (GPT: ops::linearCrossEntropy).
  virtual Variable loss(const Tensor& inputs, const Tensor& targets) const;
};

/// The activations' dtype of a model whose parameters are `param`: `compute` (F32, or BF16 for mixed
/// precision) over fp32 parameters; the parameters' own dtype otherwise (fp64 runs compute in fp64).
DType activationDType(DType compute, DType param);

}  // namespace minidp::models
