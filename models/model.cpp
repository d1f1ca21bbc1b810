#include "models/model.h"

#include "framework/ops/ops.h"

namespace minidp::models {

Variable Model::loss(const Tensor& inputs, const Tensor& targets) const {
  return ops::crossEntropy(forward(inputs), targets.view({-1}));
}

DType activationDType(DType compute, DType param) { return param == DType::F32 ? compute : param; }

}  // namespace minidp::models
