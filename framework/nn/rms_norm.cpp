#include "framework/nn/rms_norm.h"

#include <vector>

#include "framework/ops/ops.h"

namespace minidp::nn {

RMSNorm::RMSNorm(int64_t features, double eps) : eps_(eps) {
  weight = registerParameter("weight", Tensor::fromVector(std::vector<float>(features, 1.0f), {features}));
}

Variable RMSNorm::forward(const Variable& x) const { return ops::rmsNorm(x, weight, eps_); }

}  // namespace minidp::nn
