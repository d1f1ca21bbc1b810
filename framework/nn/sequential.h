// Sequential: layers applied in order, named 0, 1, 2, ... as torch.nn.Sequential (a parameterless step
// such as ops::relu takes an index too, so names match PyTorch's Sequential(Linear, ReLU, Linear)).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "framework/nn/module.h"

namespace minidp::nn {

/// x -> layer_n(... layer_1(layer_0(x))).
class Sequential : public Module {
 public:
  using Step = std::function<Variable(const Variable&)>;
  /// Appends a module with `Variable forward(const Variable&) const`, registered under its index.
  template <typename M>
  std::shared_ptr<M> add(std::shared_ptr<M> module) {
    registerModule(std::to_string(steps_.size()), module);
    steps_.push_back([module](const Variable& x) { return module->forward(x); });
    return module;
  }
  /// Appends a parameterless step (e.g. ops::relu); it takes an index but registers nothing.
  void add(Step step);
  /// Applies every step in order.
  Variable forward(const Variable& x) const;
  size_t size() const { return steps_.size(); }

 private:
  std::vector<Step> steps_;
};

}  // namespace minidp::nn
