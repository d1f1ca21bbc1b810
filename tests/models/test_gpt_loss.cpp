// GPT::loss (the lm head fused with the cross-entropy, ops::linearCrossEntropy) against the unfused path it
// replaces, crossEntropy(GPT::forward(tokens), targets): the loss and every parameter gradient.
#include <gtest/gtest.h>

#include <string>

#include "framework/ops/ops.h"
#include "framework/testing/gradcheck.h"
#include "models/gpt.h"

namespace minidp {
namespace {

// Loss and gradients of one backward through `loss` from a fresh model (seed 3) in `dtype` on the CPU.
std::vector<Tensor> lossAndGradients(const models::GptConfig& config, DType dtype,
                                     const std::function<Variable(const models::GPT&)>& loss) {
  models::GPT model(config, 3);
  model.to(Device::CPU, dtype);
  Variable l = loss(model);
  l.backward();
  std::vector<Tensor> out{l.data()};
  for (const auto& [name, p] : model.namedParameters()) out.push_back(p.grad());
  return out;
}

TEST(GptLoss, FusedClassifierEqualsForwardThenCrossEntropy) {
  // An odd vocabulary (padded logits rows) and a multiple of 64 (none). Float64: the same products over a
  // padded buffer agree to 1e-12; float32 to the rounding of the longest sums.
  for (int64_t vocab : {67, 128}) {
    const models::GptConfig config{vocab, 16, 2, 2, 32};
    const Tensor tokens = testing::randomIndices({3, 16}, static_cast<int32_t>(vocab), 4);
    const Tensor targets = testing::randomIndices({3, 16}, static_cast<int32_t>(vocab), 5);
    for (DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + ", " + dtypeName(dtype));
      const auto fused = lossAndGradients(config, dtype, [&](const models::GPT& m) { return m.loss(tokens, targets); });
      const auto reference = lossAndGradients(config, dtype, [&](const models::GPT& m) {
        return ops::crossEntropy(m.forward(tokens), targets.view({-1}));
      });
      ASSERT_EQ(fused.size(), reference.size());
      const double tolerance = dtype == DType::F64 ? 1e-12 : 1e-5;
      for (size_t i = 0; i < fused.size(); ++i)
        EXPECT_LE(testing::relativeError(fused[i], reference[i]), tolerance) << (i == 0 ? "loss" : "gradient ") << i;
    }
  }
}

}  // namespace
}  // namespace minidp
