// A model that uses the RMSNorm layer, and its entry in minidp's model registry: Linear -> RMSNorm -> SiLU
// -> Linear on Fashion-MNIST images, trained and scored (test accuracy) by minidp's training loop.
#pragma once

#include <memory>

#include "framework/nn/linear.h"
#include "framework/nn/sequential.h"
#include "models/registry.h"
#include "rms_norm.h"

namespace custom {

/// inputs float (B, in) -> logits (B, classes). Parameters: layers.0.{weight,bias}, layers.1.weight,
/// layers.3.{weight,bias} (index 2 is the SiLU step, as in torch.nn.Sequential).
class RmsMlp : public minidp::models::Model {
 public:
  RmsMlp(int64_t in, int64_t hidden, int64_t classes, uint64_t seed) {
    minidp::nn::Rng rng(seed);
    layers_ = registerModule("layers", std::make_shared<minidp::nn::Sequential>());
    layers_->add(std::make_shared<minidp::nn::Linear>(in, hidden, true, rng));
    layers_->add(std::make_shared<RMSNorm>(hidden));
    layers_->add([](const minidp::Variable& x) { return minidp::ops::silu(x); });
    layers_->add(std::make_shared<minidp::nn::Linear>(hidden, classes, true, rng));
  }
  minidp::Variable forward(const minidp::Tensor& inputs) const override {
    return layers_->forward(minidp::Variable(inputs));
  }

 private:
  std::shared_ptr<minidp::nn::Sequential> layers_;
};

/// Registers "rms-mlp": --hidden's first size is the width (default 256).
inline void registerRmsMlp() {
  minidp::models::ModelEntry e;
  e.description = "Linear -> RMSNorm -> SiLU -> Linear on Fashion-MNIST (examples/custom_layer)";
  e.data = minidp::models::DataKind::Images;
  e.defaultData = "fashion-mnist";
  e.evaluation = minidp::models::Evaluation::Accuracy;
  e.defaultSteps = 1000;
  e.defaultOptimizer = "sgd";
  e.defaultLr = 0.05;
  e.make = [](const minidp::models::ModelArgs& a) {
    const int64_t hidden = a.hidden.empty() ? 256 : a.hidden.front();
    return std::make_unique<RmsMlp>(a.inputs, hidden, a.classes, a.seed);
  };
  minidp::models::registerModel("rms-mlp", std::move(e));
}

}  // namespace custom
