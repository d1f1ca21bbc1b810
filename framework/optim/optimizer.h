// Optimizers over a list of parameters; each step launches one fused kernel per parameter tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/autograd/variable.h"

namespace minidp::optim {

/// Updates parameters in place from their gradients.
class Optimizer {
 public:
  /// Named state tensors, e.g. ("layers.0.weight.exp_avg", m).
  using State = std::vector<std::pair<std::string, Tensor>>;
  Optimizer(std::vector<Variable> params, double lr) : params_(std::move(params)), lr_(lr) {}
  virtual ~Optimizer() = default;
  /// One update from the current gradients (which must exist).
  virtual void step() = 0;
  /// The per-parameter state as "<name>.<kind>" (PyTorch's kinds: momentum_buffer, exp_avg, exp_avg_sq),
  /// names from setParameterNames (else the parameter's index). The tensors are the live state: copying
  /// into them restores it.
  virtual State state() const { return {}; }
  /// Updates taken so far (AdamW's bias correction counts them).
  int64_t stepCount() const { return steps_; }
  void setStepCount(int64_t steps) { steps_ = steps; }
  /// The names state() uses, one per parameter in order.
  void setParameterNames(std::vector<std::string> names);

 protected:
  /// state()'s name of parameter `index`'s `kind` tensor.
  std::string stateName(size_t index, const char* kind) const;
  std::vector<Variable> params_;
  double lr_;
  int64_t steps_ = 0;
  std::vector<std::string> names_;
};

/// torch.optim.SGD: momentum (dampening 0) and L2 weight decay added to the gradient.
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Variable> params, double lr, double momentum = 0, double weightDecay = 0);
  void step() override;
  State state() const override;

 private:
  double momentum_, weightDecay_;
  std::vector<Tensor> buffers_;
};

/// torch.optim.AdamW: decoupled weight decay, bias-corrected moments.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Variable> params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weightDecay = 0.01);
  void step() override;
  State state() const override;

 private:
  double beta1_, beta2_, eps_, weightDecay_;
  std::vector<Tensor> m_, v_;
};

/// "sgd" (momentum 0.9) or "adamw" with the given learning rate and weight decay.
std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, std::vector<Variable> params, double lr,
                                         double weightDecay);

}  // namespace minidp::optim
