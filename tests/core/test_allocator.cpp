// The caching allocator's promise: once training is in steady state, a step makes no cudaMalloc.
#include <gtest/gtest.h>

#include "framework/distributed/gradient/ddp.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/runtime/graph.h"
#include "framework/testing/gradcheck.h"
#include "models/gpt.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

// Parameterised by the compute dtype: fp32, and bf16 (mixed precision: per-step bf16 weight copies, the
// flash attention's buffers and cuBLASLt's workspace must all come from the cache after the first steps).
class CachingAllocator : public ::testing::TestWithParam<DType> {};

/// A small GPT's training step (head dim 32: the flash kernels', which bf16 needs) on the "single"
/// communicator, one fixed batch, AdamW.
struct GptStep {
  static models::GptConfig config(DType compute) {
    models::GptConfig c{32, 16, 2, 2, 64};
    c.compute = compute;
    return c;
  }
  static distributed::CommOptions single() {
    distributed::CommOptions opts;
    opts.backend = "single";
    opts.cuda = true;
    return opts;
  }
  /// The model's parameters, moved to the GPU first.
  static nn::NamedParameters onCuda(models::GPT& m) {
    m.to(Device::CUDA, DType::F32);
    return m.namedParameters();
  }
  explicit GptStep(DType compute)
      : model(config(compute), 1),
        ddp(onCuda(model), distributed::makeCommunicator(single(), nullptr), distributed::DdpOptions{}),
        adam(model.parameters(), 1e-3) {}
  void operator()() {
    ddp.prepareStep();
    model.loss(tokens, targets).backward();
    ddp.finalize();
    adam.step();
  }
  models::GPT model;
  distributed::DistributedDataParallel ddp;
  optim::AdamW adam;
  const Tensor tokens = testing::randomIndices({4, 16}, 32, 2).to(Device::CUDA);
  const Tensor targets = testing::randomIndices({4, 16}, 32, 3).to(Device::CUDA);
};

TEST_P(CachingAllocator, SteadyStateTrainingStepsMakeNoCudaMalloc) {
  MINIDP_SKIP_WITHOUT_CUDA();
  GptStep step(GetParam());
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
  MINIDP_SKIP_WITHOUT_CUDA();
  GptStep step(GetParam());
  for (int i = 0; i < 2; ++i) step();
  step.adam.setScalarsOnDevice(true);
  runtime::CapturedGraph graph([&] { step(); });
  runtime::synchronize();
  const runtime::AllocatorStats before = runtime::allocatorStats();
  for (int i = 0; i < 10; ++i) {
    step.adam.stageStep();
    graph.replay();
  }
  runtime::synchronize();
  const runtime::AllocatorStats after = runtime::allocatorStats();
  EXPECT_EQ(after.mallocCalls, before.mallocCalls);
  EXPECT_EQ(after.allocatedBytes, before.allocatedBytes);
  EXPECT_EQ(after.cachedBytes, before.cachedBytes);
  EXPECT_EQ(step.adam.stepCount(), 12);
}

// The peak counter behind minidp-bench's peak_mib and minidp-train's peak_gpu_mib.
TEST(CachingAllocatorCounters, PeakFollowsAllocationsUntilReset) {
  MINIDP_SKIP_WITHOUT_CUDA();
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
