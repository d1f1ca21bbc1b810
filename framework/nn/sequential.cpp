#include "framework/nn/sequential.h"

namespace minidp::nn {

void Sequential::add(Step step) {
  MINIDP_CHECK(step != nullptr, "Sequential: empty step " << steps_.size());
  steps_.push_back(std::move(step));
}

Variable Sequential::forward(const Variable& x) const {
  Variable y = x;
  for (const Step& step : steps_) y = step(y);
  return y;
}

}  // namespace minidp::nn
