#include "models/mlp.h"

#include "framework/nn/module_list.h"
#include "framework/ops/ops.h"

namespace minidp::models {

MLP::MLP(const std::vector<int64_t>& dims, uint64_t seed, DType compute) : compute_(compute) {
  MINIDP_CHECK(dims.size() >= 2, "MLP needs at least an input and an output size");
  nn::Rng rng(seed);
  auto list = registerModule("layers", std::make_shared<nn::ModuleList>());
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    MINIDP_CHECK(dims[i] > 0 && dims[i + 1] > 0, "MLP layer sizes must be positive");
    layers_.push_back(list->append(std::make_shared<nn::Linear>(dims[i], dims[i + 1], true, rng)));
  }
}

Variable MLP::forward(const Tensor& inputs) const {
  MINIDP_CHECK(
      inputs.ndim() == 2 && inputs.size(1) == layers_.front()->weight.shape()[1],
      "MLP input " << shapeString(inputs.shape()) << ", expected (B, " << layers_.front()->weight.shape()[1] << ")");
  Variable x = ops::cast(Variable(inputs), activationDType(compute_, layers_.front()->weight.dtype()));
  for (size_t i = 0; i < layers_.size(); ++i) {
    x = layers_[i]->forward(x);
    if (i + 1 < layers_.size()) x = ops::relu(x);
  }
  return x;
}

}  // namespace minidp::models
