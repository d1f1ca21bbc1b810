// The MLP, GPT and Llama against PyTorch: tests/reference/make_fixtures.py stored weights, one batch, the loss
// and every gradient (computed in float64 from the float32 weights); minidp must reproduce them. The Llama is
// built through its registry entry from its flags, as minidp-train builds it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <sstream>

#include "framework/nn/checkpoint.h"
#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/registry.h"
#include "tests/support/cuda_skip.h"
#include "tests/support/reference_models.h"

namespace minidp {
namespace {


struct Case {
  std::string fixture;
  DType dtype;
  Device device;
  double lossTol, gradTol;  // relative to the reference (gradients: to each tensor's max magnitude)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << " " << dtypeName(c.dtype) << " " << deviceName(c.device);
}

class Reference : public ::testing::TestWithParam<Case> {};

TEST_P(Reference, LossAndEveryGradientMatchPyTorch) {
  const Case& c = GetParam();
  if (c.device == Device::CUDA) MINIDP_SKIP_WITHOUT_CUDA();
  const SafeTensorFile f = readSafetensors(testing::fixturePath(c.fixture));
  auto model = testing::buildReferenceModel(f);
  std::string order;
  for (auto& [name, p] : model->namedParameters()) order += (order.empty() ? "" : ",") + name;
  EXPECT_EQ(order, f.metadata.at("param_order")) << "parameter names or order differ from PyTorch";
  nn::loadParameters(*model, f, "param.");
  model->to(c.device, c.dtype);

  Tensor inputs = nn::fromSafeTensor(f.at("batch.inputs"), "batch.inputs");
  if (inputs.dtype() != DType::I32) inputs = inputs.toDType(c.dtype);
  Tensor targets = nn::fromSafeTensor(f.at("batch.targets"), "batch.targets").to(c.device);
  Variable loss = model->loss(inputs.to(c.device), targets);
  loss.backward();

  Tensor refLoss = nn::fromSafeTensor(f.at("loss"), "loss");
  EXPECT_LT(testing::relativeError(loss.data(), refLoss), c.lossTol);
  for (auto& [name, p] : model->namedParameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    Tensor ref = nn::fromSafeTensor(f.at("grad." + name), name);
    EXPECT_LT(testing::relativeError(p.grad(), ref), c.gradTol) << name;
  }
}

// float64 is exact up to summation order; float32 on the CPU meets 1e-5 against PyTorch; on CUDA the
// fp32 GEMMs (no TF32) and reductions sum in other orders over K up to 4C = 128, so 1e-4 is allowed.
INSTANTIATE_TEST_SUITE_P(Models, Reference,
                         ::testing::Values(Case{"mlp_tiny.safetensors", DType::F64, Device::CPU, 1e-12, 1e-10},
                                           Case{"mlp_tiny.safetensors", DType::F32, Device::CPU, 1e-5, 1e-5},
                                           Case{"gpt_tiny.safetensors", DType::F64, Device::CPU, 1e-12, 1e-10},
                                           Case{"gpt_tiny.safetensors", DType::F32, Device::CPU, 1e-5, 1e-5},
                                           Case{"mlp_tiny.safetensors", DType::F32, Device::CUDA, 1e-5, 1e-4},
                                           Case{"gpt_tiny.safetensors", DType::F32, Device::CUDA, 1e-5, 1e-4},
                                           Case{"gpt_tiny.safetensors", DType::F64, Device::CUDA, 1e-12, 1e-10},
                                           Case{"llama_tiny.safetensors", DType::F64, Device::CPU, 1e-12, 1e-10},
                                           Case{"llama_tiny.safetensors", DType::F32, Device::CPU, 1e-5, 1e-5},
                                           Case{"llama_tiny.safetensors", DType::F32, Device::CUDA, 1e-5, 1e-4},
                                           Case{"llama_tiny.safetensors", DType::F64, Device::CUDA, 1e-12, 1e-10}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return c.fixture.substr(0, c.fixture.find('_')) + "_" + dtypeName(c.dtype) + "_" + deviceName(c.device);
                         });

}  // namespace
}  // namespace minidp
