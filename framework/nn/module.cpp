#include "framework/nn/module.h"

#include <cmath>

#include "framework/ops/ops.h"

namespace minidp::nn {

NamedParameters Module::namedParameters() const {
  NamedParameters out;
  collect("", out);
  return out;
}

void Module::collect(const std::string& prefix, NamedParameters& out) const {
  for (const auto& [name, param] : params_) out.emplace_back(prefix + name, param);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, param] : namedParameters()) out.push_back(param);
  return out;
}

void Module::to(Device device, DType dtype) {
  for (auto& [name, param] : namedParameters()) {
    Variable p = param;
    if (p.device() == device && p.dtype() == dtype) continue;
    MINIDP_CHECK(!p.hasGradReadyHooks(),
                 "to() of parameter '" << name
                                       << "', which has grad-ready hooks: under "
                                          "DistributedDataParallel its gradient is a view of a bucket and would be "
                                          "detached from it; call to() before wrapping the model");
    p.data() = p.data().toDType(dtype).to(device);
    if (p.grad().defined()) p.setGrad(p.grad().toDType(dtype).to(device));
  }
}

void Module::zeroGrad() {
  for (auto& [name, param] : namedParameters()) {
    Variable p = param;
    p.zeroGrad();
  }
}

int64_t Module::numParameters() const {
  int64_t n = 0;
  for (auto& [name, param] : namedParameters()) n += param.data().numel();
  return n;
}

Variable Module::registerParameter(const std::string& name, Tensor value) {
  Variable p(std::move(value), /*requiresGrad=*/true);
  params_.emplace_back(name, p);
  return p;
}

namespace {
// A double in [0, 1) from the top 53 bits: identical on every platform, unlike std distributions.
double unit(Rng& rng) { return (rng() >> 11) * (1.0 / 9007199254740992.0); }
}  // namespace

Tensor uniform(const Shape& shape, double bound, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::CPU);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((2.0 * unit(rng) - 1.0) * bound);
  return t;
}

Tensor normal(const Shape& shape, double stddev, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::CPU);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double u1 = 1.0 - unit(rng), u2 = unit(rng);
    p[i] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return t;
}

Linear::Linear(int64_t in, int64_t out, bool hasBias, Rng& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = registerParameter("weight", uniform({out, in}, bound, rng));
  if (hasBias) bias = registerParameter("bias", uniform({out}, bound, rng));
}

Variable Linear::forward(const Variable& x) const { return ops::linear(x, weight, bias); }

LayerNorm::LayerNorm(int64_t features, double eps) : eps_(eps) {
  std::vector<float> ones(features, 1.0f);
  weight = registerParameter("weight", Tensor::fromVector(ones, {features}));
  bias = registerParameter("bias", Tensor::zeros({features}, DType::F32, Device::CPU));
}

Variable LayerNorm::forward(const Variable& x) const { return ops::layerNorm(x, weight, bias, eps_); }

}  // namespace minidp::nn
