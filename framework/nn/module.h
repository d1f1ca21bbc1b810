// Module: named parameters in a deterministic registration order, PyTorch-style dotted names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/autograd/variable.h"

namespace minidp::nn {

using NamedParameters = std::vector<std::pair<std::string, Variable>>;

/// Base of every layer and model. Parameters come before submodules' parameters, each in the order
/// registered, as torch.nn.Module.named_parameters() yields them.
class Module {
 public:
  virtual ~Module() = default;
  /// (dotted name, parameter) in registration order, e.g. "layers.0.weight".
  NamedParameters namedParameters() const;
  std::vector<Variable> parameters() const;
  /// Moves and converts every parameter in place (the Variables stay the same objects). An error for a
  /// parameter with grad-ready hooks (wrapped by DistributedDataParallel) that would move.
  void to(Device device, DType dtype);
  /// Zeroes every parameter's gradient.
  void zeroGrad();
  /// Total number of parameter elements.
  int64_t numParameters() const;

 protected:
  /// Adds a leaf that requires grad.
  Variable registerParameter(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> registerModule(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void collect(const std::string& prefix, NamedParameters& out) const;
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace minidp::nn
