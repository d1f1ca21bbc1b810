#include "framework/nn/linear.h"

#include <cmath>

#include "framework/ops/ops.h"

namespace minidp::nn {

Linear::Linear(int64_t in, int64_t out, bool hasBias, Rng& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = registerParameter("weight", uniform({out, in}, bound, rng));
  if (hasBias) bias = registerParameter("bias", uniform({out}, bound, rng));
}

Variable Linear::forward(const Variable& x) const { return ops::linear(x, weight, bias); }

Variable Linear::forward(const Variable& x, const Variable& residual) const {
  return ops::linear(x, weight, bias, residual);
}

}  // namespace minidp::nn
