// The caching allocator's promise: once training is in steady state, a step makes no cudaMalloc.
#include <gtest/gtest.h>

#include "framework/distributed/ddp.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/runtime/graph.h"
#include "models/gpt.h"
#include "tests/support/gradcheck.h"

namespace minidp {
namespace {

// Parameterised by the compute dtype: fp32, and bf16 (mixed precision: per-step bf16 weight copies, the
// flash attention's buffers and cuBLASLt's workspace must all come from the cache after the first steps).
class CachingAllocator : public ::testing::TestWithParam<DType> {};

TEST_P(CachingAllocator, SteadyStateTrainingStepsMakeNoCudaMalloc) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  models::GptConfig config{32, 16, 2, 2, 64};  // head dim 32: the flash kernels' (bf16 needs them)
  config.compute = GetParam();
  models::GPT model(config, 1);
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

// --cuda-graph: after the warm-up and the capture, replays make no cudaMalloc, and the memory held stays
// put (the graph's private pool keeps its blocks; nothing is allocated or released per replay).
TEST_P(CachingAllocator, GraphReplaysMakeNoCudaMallocAndHoldTheirMemory) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  models::GptConfig config{32, 16, 2, 2, 64};
  config.compute = GetParam();
  models::GPT model(config, 1);
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
  for (int i = 0; i < 2; ++i) step();
  adam.setScalarsOnDevice(true);
  runtime::CapturedGraph graph(step);
  runtime::synchronize();
  const runtime::AllocatorStats before = runtime::allocatorStats();
  for (int i = 0; i < 10; ++i) {
    adam.stageStep();
    graph.replay();
  }
  runtime::synchronize();
  const runtime::AllocatorStats after = runtime::allocatorStats();
  EXPECT_EQ(after.mallocCalls, before.mallocCalls);
  EXPECT_EQ(after.allocatedBytes, before.allocatedBytes);
  EXPECT_EQ(after.cachedBytes, before.cachedBytes);
  EXPECT_EQ(adam.stepCount(), 12);
}

// The peak counter behind minidp-bench's peak_mib and minidp-train's peak_gpu_mib.
TEST(CachingAllocatorCounters, PeakFollowsAllocationsUntilReset) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  runtime::resetPeakMemory();
  const size_t before = runtime::allocatorStats().allocatedBytes;
  const size_t bytes = size_t(4) << 20;  // a multiple of the 2 MiB rounding
  {
    const Tensor t = Tensor::empty({static_cast<int64_t>(bytes / 4)}, DType::F32, Device::CUDA);
    EXPECT_EQ(runtime::allocatorStats().allocatedBytes, before + bytes);
  }
  const runtime::AllocatorStats after = runtime::allocatorStats();
  EXPECT_EQ(after.allocatedBytes, before);
  EXPECT_EQ(after.peakAllocatedBytes, before + bytes);
  runtime::resetPeakMemory();
  EXPECT_EQ(runtime::allocatorStats().peakAllocatedBytes, before);
}

INSTANTIATE_TEST_SUITE_P(ComputeDtypes, CachingAllocator, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

}  // namespace
}  // namespace minidp
