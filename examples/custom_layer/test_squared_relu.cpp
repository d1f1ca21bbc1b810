// The CPU-only fused op: forward against relu(x)^2 composed from minidp's ops, backward against float64
// finite differences, and on a CUDA tensor (when there is a GPU) the error naming the op.
#include <gtest/gtest.h>

#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"
#include "squared_relu.h"

namespace {

using minidp::Variable;
using minidp::testing::randomTensor;

TEST(SquaredRelu, MatchesComposedOps) {
  // Away from the kink at 0, where the finite difference straddles two branches.
  Variable x(randomTensor({4, 9}, 1, 0.1, 1.0));
  Variable xNeg(randomTensor({4, 9}, 2, -1.0, -0.1));
  EXPECT_EQ(custom::squaredRelu(x).data().toVector<double>(),
            minidp::ops::mul(minidp::ops::relu(x), minidp::ops::relu(x)).data().toVector<double>());
  EXPECT_EQ(custom::squaredRelu(xNeg).data().toVector<double>(), std::vector<double>(36, 0.0));
  EXPECT_TRUE(minidp::testing::gradcheckPasses(
      [](const std::vector<Variable>& in) { return custom::squaredRelu(minidp::ops::addScalar(in[0], -0.5)); },
      {Variable(randomTensor({4, 9}, 3, 0.0, 1.0), true)}));
}

TEST(SquaredRelu, OnCudaNamesTheMissingKernel) {
  if (!minidp::runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  Variable x(randomTensor({4}, 4).to(minidp::Device::CUDA));
  try {
    custom::squaredRelu(x);
    ADD_FAILURE() << "no error";
  } catch (const minidp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'squaredRelu' has no CUDA kernel"), std::string::npos) << e.what();
  }
}

}  // namespace
