// The multi-layer perceptron: Linear layers "layers.i" with ReLU between them.
#pragma once

#include <vector>

#include "models/model.h"

namespace minidp::models {

/// dims = {in, hidden..., out}; e.g. {784, 256, 256, 10} for Fashion-MNIST. PyTorch: nn.ModuleList of
/// nn.Linear named layers.0, layers.1, ... (tests/reference/models.py).
class MLP : public Model {
 public:
  MLP(const std::vector<int64_t>& dims, uint64_t seed);
  /// inputs float (B, in) -> logits (B, out).
  Variable forward(const Tensor& inputs) const override;

 private:
  std::vector<std::shared_ptr<nn::Linear>> layers_;
};

}  // namespace minidp::models
