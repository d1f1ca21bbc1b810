// A bf16 mixed-precision training step of the MLP and GPT on CUDA against the fp32 step from the same
// parameters and batch: loss and every parameter gradient within bf16 tolerances; the parameters and
// gradient buckets stay fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "framework/distributed/ddp.h"
#include "framework/runtime/device.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "tests/support/gradcheck.h"

namespace minidp {
namespace {

// Tolerances: every activation is rounded to bf16 (2^-9 relative) at each op, through a handful of
// layers: the loss moves by well under 1%, a gradient by a few percent in the L2 sense. A wrong kernel
// (a missing bias, a transposed operand, an unscaled gradient) is off by O(1).
constexpr double kLossTolerance = 1e-2;
constexpr double kGradTolerance = 5e-2;

// One forward/backward of `model` under single-rank DDP (gradients in its fp32 buckets); the loss.
double stepOnce(models::Model& model, const Tensor& inputs, const Tensor& targets) {
  distributed::CommOptions opts;
  opts.backend = "single";
  opts.cuda = true;
  distributed::DistributedDataParallel ddp(model.namedParameters(), distributed::makeCommunicator(opts, nullptr),
                                           distributed::DdpOptions{});
  ddp.prepareStep();
  Variable loss = model.loss(inputs, targets);
  EXPECT_EQ(loss.dtype(), DType::F32);
  loss.backward();
  ddp.finalize();
  return loss.data().toVector<float>()[0];
}

void expectBf16StepMatchesF32(models::Model& f32, models::Model& bf16, const Tensor& inputs, const Tensor& targets) {
  const double loss32 = stepOnce(f32, inputs, targets);
  const double loss16 = stepOnce(bf16, inputs, targets);
  EXPECT_NEAR(loss16, loss32, kLossTolerance * std::abs(loss32));
  const nn::NamedParameters p32 = f32.namedParameters(), p16 = bf16.namedParameters();
  ASSERT_EQ(p32.size(), p16.size());
  for (size_t i = 0; i < p32.size(); ++i) {
    const Variable& v = p16[i].second;
    ASSERT_EQ(v.dtype(), DType::F32) << p16[i].first;
    ASSERT_EQ(v.grad().dtype(), DType::F32) << p16[i].first;
    EXPECT_LT(testing::relativeL2(v.grad(), p32[i].second.grad()), kGradTolerance) << p16[i].first;
  }
}

TEST(Bf16Step, MlpMatchesF32) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  const std::vector<int64_t> dims{64, 128, 128, 10};
  models::MLP f32(dims, 3), bf16(dims, 3, DType::BF16);
  f32.to(Device::CUDA, DType::F32);
  bf16.to(Device::CUDA, DType::F32);
  const Tensor x = testing::randomTensor({32, 64}, 4, 0, 1, DType::F32).to(Device::CUDA);
  const Tensor y = testing::randomIndices({32}, 10, 5).to(Device::CUDA);
  expectBf16StepMatchesF32(f32, bf16, x, y);
}

TEST(Bf16Step, GptMatchesF32) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  models::GptConfig c{64, 32, 2, 2, 64};
  models::GPT f32(c, 7);
  c.compute = DType::BF16;
  models::GPT bf16(c, 7);
  f32.to(Device::CUDA, DType::F32);
  bf16.to(Device::CUDA, DType::F32);
  const Tensor tokens = testing::randomIndices({4, 32}, 64, 8).to(Device::CUDA);
  const Tensor targets = testing::randomIndices({4, 32}, 64, 9).to(Device::CUDA);
  expectBf16StepMatchesF32(f32, bf16, tokens, targets);
}

}  // namespace
}  // namespace minidp
