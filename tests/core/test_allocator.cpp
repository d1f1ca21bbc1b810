// The caching allocator's promise: once training is in steady state, a step makes no cudaMalloc.
#include <gtest/gtest.h>

#include "framework/distributed/ddp.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "models/gpt.h"
#include "tests/support/gradcheck.h"

namespace minidp {
namespace {

TEST(CachingAllocator, SteadyStateTrainingStepsMakeNoCudaMalloc) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  models::GPT model(models::GptConfig{32, 16, 2, 2, 32}, 1);
  model.to(Device::CUDA, DType::F32);
  distributed::CommOptions opts;
  opts.backend = "single";
  opts.cuda = true;
  distributed::DistributedDataParallel ddp(model.namedParameters(), distributed::makeCommunicator(opts, nullptr),
                                           distributed::DdpOptions{});
  optim::AdamW adam(model.parameters(), 1e-3);
  const Tensor tokens = testing::randomIndices({4, 16}, 32, 2).to(Device::CUDA);
  const Tensor targets = testing::randomIndices({4, 16}, 32, 3).to(Device::CUDA);
  const auto step = [&] {
    ddp.prepareStep();
    model.loss(tokens, targets).backward();
    ddp.finalize();
    adam.step();
  };
  for (int i = 0; i < 3; ++i) step();
  runtime::synchronize();
  const size_t before = runtime::allocatorStats().mallocCalls;
  for (int i = 0; i < 10; ++i) step();
  runtime::synchronize();
  EXPECT_EQ(runtime::allocatorStats().mallocCalls, before);
  EXPECT_GT(before, 0u);
}

}  // namespace
}  // namespace minidp
