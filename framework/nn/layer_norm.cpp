#include "framework/nn/layer_norm.h"

#include <vector>

#include "framework/ops/ops.h"

namespace minidp::nn {

LayerNorm::LayerNorm(int64_t features, double eps) : eps_(eps) {
  std::vector<float> ones(features, 1.0f);
  weight = registerParameter("weight", Tensor::fromVector(ones, {features}));
  bias = registerParameter("bias", Tensor::zeros({features}, DType::F32, Device::CPU));
}

Variable LayerNorm::forward(const Variable& x) const { return ops::layerNorm(x, weight, bias, eps_); }

}  // namespace minidp::nn
