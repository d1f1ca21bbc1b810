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
  Optimizer(std::vector<Variable> params, double lr) : params_(std::move(params)), lr_(lr) {}
  virtual ~Optimizer() = default;
  /// One update from the current gradients (which must exist).
  virtual void step() = 0;

 protected:
  std::vector<Variable> params_;
  double lr_;
};

/// torch.optim.SGD: momentum (dampening 0) and L2 weight decay added to the gradient.
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Variable> params, double lr, double momentum = 0, double weightDecay = 0);
  void step() override;

 private:
  double momentum_, weightDecay_;
  std::vector<Tensor> buffers_;
  bool firstStep_ = true;
};

/// torch.optim.AdamW: decoupled weight decay, bias-corrected moments.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Variable> params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weightDecay = 0.01);
  void step() override;

 private:
  double beta1_, beta2_, eps_, weightDecay_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;
};

/// "sgd" (momentum 0.9) or "adamw" with the given learning rate and weight decay.
std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, std::vector<Variable> params, double lr,
                                         double weightDecay);

}  // namespace minidp::optim
