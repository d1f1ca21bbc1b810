// A model that uses the RMSNorm layer, and its entry in minidp's model registry: Linear -> RMSNorm -> SiLU
// -> Linear on Fashion-MNIST images, trained and scored (test accuracy) by minidp's training loop.
#pragma once

#include <memory>

#include "framework/nn/linear.h"
#include "framework/nn/sequential.h"
#include "models/model.h"
#include "models/registry.h"
#include "rms_norm.h"

namespace custom {

/// inputs float (B, in) -> logits (B, classes). Parameters: layers.0.{weight,bias}, layers.1.weight,
/// layers.3.{weight,bias} (index 2 is the SiLU step, as in torch.nn.Sequential). `compute`: the activations'
/// dtype (--dtype; BF16 on CUDA: bf16 activations over the fp32 parameters, which Linear and RMSNorm's
/// mulBroadcast take as they are).
class RmsMlp : public minidp::models::Model {
 public:
  RmsMlp(int64_t in, int64_t hidden, int64_t classes, uint64_t seed, double eps = 1e-6,
         minidp::DType compute = minidp::DType::F32)
      : compute_(compute) {
    minidp::nn::Rng rng(seed);
    layers_ = registerModule("layers", std::make_shared<minidp::nn::Sequential>());
    first_ = std::make_shared<minidp::nn::Linear>(in, hidden, true, rng);
    layers_->add(first_);
    layers_->add(std::make_shared<RMSNorm>(hidden, eps));
    layers_->add([](const minidp::Variable& x) { return minidp::ops::silu(x); });
    layers_->add(std::make_shared<minidp::nn::Linear>(hidden, classes, true, rng));
  }
  minidp::Variable forward(const minidp::Tensor& inputs) const override {
    // The compute dtype over fp32 parameters; an fp64 model (--dtype fp64) computes in fp64.
    const minidp::DType dtype = minidp::models::activationDType(compute_, first_->weight.dtype());
    return layers_->forward(minidp::ops::cast(minidp::Variable(inputs), dtype));
  }

 private:
  minidp::DType compute_;
  std::shared_ptr<minidp::nn::Linear> first_;
  std::shared_ptr<minidp::nn::Sequential> layers_;
};

/// Registers "rms-mlp" with its own flags, --hidden (the width, default 128) and --norm-eps, which
/// custom-train and custom-bench list under --model rms-mlp --help.
inline void registerRmsMlp() {
  using minidp::models::FlagKind;
  using minidp::models::ModelFlag;
  minidp::models::ModelEntry e;
  e.description = "Linear -> RMSNorm -> SiLU -> Linear on Fashion-MNIST (examples/custom_layer)";
  e.data = minidp::models::DataKind::Images;
  e.defaultData = "fashion-mnist";
  e.evaluation = minidp::models::Evaluation::Accuracy;
  e.defaultSteps = 1000;
  e.defaultOptimizer = "sgd";
  e.defaultLr = 0.05;
  // Every field, in order: name, kind, default, help, min, max, choices, checkedOnResume.
  const ModelFlag hidden{"hidden", FlagKind::Integer, "128", "Width of the hidden layer", 1, 1e6, {}, true};
  const ModelFlag eps{"norm-eps", FlagKind::Number, "1e-6", "RMSNorm epsilon", 1e-12, 1, {}, true};
  e.flags = {hidden, eps};
  e.make = [](const minidp::models::ModelArgs& a) {
    return std::make_unique<RmsMlp>(a.inputs, a.flags.integer("hidden"), a.classes, a.seed, a.flags.number("norm-eps"),
                                    a.compute);
  };
  // The memory check's count (optional; without it the model is built to count its parameters): the two
  // Linear layers and the norm's gain, and per row the input, the hidden activations (Linear, RMSNorm,
  // SiLU) and the logits, with their gradients.
  e.memory = [](const minidp::models::ModelArgs& a, int64_t batch) {
    const int64_t h = a.flags.integer("hidden");
    minidp::models::MemoryNeed need;
    need.parameters = (a.inputs * h + h) + h + (h * a.classes + a.classes);
    need.activations = 2.0 * static_cast<double>(batch) * static_cast<double>(a.inputs + 4 * h + a.classes);
    need.flagsToLower = {"--hidden"};
    return need;
  };
  minidp::models::registerModel("rms-mlp", std::move(e));
}

}  // namespace custom
