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
  for (auto& [name, param] : namedParameters()) n += shapeNumel(param.shape());  // no read of the values (ZeRO-3)
  return n;
}

Variable Module::registerParameter(const std::string& name, Tensor value) {
  Variable p(std::move(value), /*requiresGrad=*/true);
  params_.emplace_back(name, p);
  return p;
}

}  // namespace minidp::nn
