// The multi-layer perceptron: Linear layers "layers.i" with ReLU between them.
#pragma once

#include <vector>

#include "framework/nn/linear.h"
#include "models/model.h"

namespace minidp::models {

/// dims = {in, hidden..., out}; e.g. {784, 256, 256, 10} for Fashion-MNIST. PyTorch: nn.ModuleList of
/// nn.Linear named layers.0, layers.1, ... (tests/reference/models.py).
class MLP : public Model {
 public:
  /// `compute`: the activations' dtype over fp32 parameters (BF16: mixed precision; see activationDType).
  MLP(const std::vector<int64_t>& dims, uint64_t seed, DType compute = DType::F32);
  /// inputs float (B, in), cast to the compute dtype -> logits (B, out) in it.
  Variable forward(const Tensor& inputs) const override;

 private:
  std::vector<std::shared_ptr<nn::Linear>> layers_;
  DType compute_;
};

}  // namespace minidp::models
