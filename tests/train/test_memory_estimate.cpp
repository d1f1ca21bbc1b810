// The memory estimate the run checks compare with the memory there is: its parameter count is the built
// model's; it admits the runs the project does (the fortunes GPT on 2 CPU ranks, GPT-2 small at batch 16
// on a 141 GB H200, the MLP); on a GPU it bounds what training really takes from the device.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "data/text.h"
#include "framework/distributed/comm/communicator.h"
#include "framework/runtime/device.h"
#include "models/mlp.h"
#include "models/registry.h"
#include "tests/support/cuda_skip.h"
#include "train/run_checks.h"
#include "train/trainer.h"

namespace minidp {
namespace {

train::Options gpt(int64_t layers, int64_t heads, int64_t embd, int64_t context, int64_t batch,
                   const std::string& model = "gpt") {
  train::Options o;
  o.model = model;
  o.modelFlags.set("layers", layers);
  o.modelFlags.set("heads", heads);
  o.modelFlags.set("embd", embd);
  o.modelFlags.set("context", context);
  o.batchSize = batch;
  return o;
}

int64_t builtParameters(const train::Options& o, int64_t vocab) {
  const models::ModelEntry& entry = models::findModel(o.model);
  const bool tokens = entry.data == models::DataKind::Tokens;
  return entry.make(train::modelArgs(o, tokens ? 0 : 28 * 28, tokens ? vocab : 10))->numParameters();
}

TEST(MemoryEstimate, CountsTheBuiltModelsParameters) {
  const train::Options small = gpt(2, 2, 32, 24, 4);
  EXPECT_EQ(train::estimateMemory(small, 300, Device::CPU, DType::F32, DType::F32).parameters,
            builtParameters(small, 300));
  train::Options llama = gpt(3, 4, 32, 24, 4, "llama");
  llama.modelFlags.set("kv-heads", 2);
  llama.modelFlags.set("hidden", 40);
  EXPECT_EQ(train::estimateMemory(llama, 300, Device::CPU, DType::F32, DType::F32).parameters,
            builtParameters(llama, 300));
  train::Options mlp;
  mlp.modelFlags.set("hidden", "48 16");
  EXPECT_EQ(train::estimateMemory(mlp, 0, Device::CPU, DType::F32, DType::F32).parameters, builtParameters(mlp, 0));
}

// A registered model without a memory count of its own: the parameters of the built model.
TEST(MemoryEstimate, AModelWithoutItsOwnCountIsBuiltAndCounted) {
  models::ModelEntry e;
  e.flags = {models::ModelFlag{"width", models::FlagKind::Integer, "6", "width"}};
  e.make = [](const models::ModelArgs& a) {
    return std::make_unique<models::MLP>(std::vector<int64_t>{a.inputs, a.flags.integer("width"), a.classes}, 1);
  };
  models::registerModel("memory-test-mlp", e);
  train::Options o;
  o.model = "memory-test-mlp";
  o.modelFlags.set("width", 5);
  const train::MemoryEstimate m = train::estimateMemory(o, 0, Device::CPU, DType::F32, DType::F32);
  EXPECT_EQ(m.parameters, (28 * 28 * 5 + 5) + (5 * 10 + 10));
  EXPECT_EQ(m.flagsToLower, std::vector<std::string>{"--width"});
}

TEST(MemoryEstimate, AdmitsTheProjectsRuns) {
  // GPT-2 small (124 M, vocabulary 50257) at batch 16 x 1024 on one H200 (141 GB, some of it the context's).
  const train::Options gpt2 = gpt(12, 12, 768, 1024, 16);
  for (DType compute : {DType::F32, DType::BF16}) {
    const train::MemoryEstimate e = train::estimateMemory(gpt2, 50257, Device::CUDA, DType::F32, compute);
    EXPECT_LT(e.total(), 120e9) << dtypeName(compute);
  }
  // The llama of the speed target (width 1024, 8 query and 4 key/value heads, SwiGLU 2816, 12 layers, context
  // 1024, vocabulary 32000) at batch 8 in fp32 and bf16 (head dim 128: the flash kernels).
  train::Options llama = gpt(12, 8, 1024, 1024, 8, "llama");
  llama.modelFlags.set("kv-heads", 4);
  llama.modelFlags.set("hidden", 2816);
  for (DType compute : {DType::F32, DType::BF16}) {
    EXPECT_LT(train::estimateMemory(llama, 32000, Device::CUDA, DType::F32, compute).total(), 120e9)
        << dtypeName(compute);
  }
  // The fortunes GPT of the README on the CPU: two ranks on a small machine.
  const train::Options fortunes = gpt(6, 6, 384, 256, 32);
  EXPECT_LT(train::estimateMemory(fortunes, 256, Device::CPU, DType::F32, DType::F32).total(), 5e9);
  // The default MLP.
  EXPECT_LT(train::estimateMemory(train::Options(), 0, Device::CPU, DType::F32, DType::F32).total(), 1e9);
  // And refuses what cannot fit: twice the batch rows, twice the activations.
  train::Options doubled = fortunes;
  doubled.batchSize *= 2;
  const train::MemoryEstimate one = train::estimateMemory(fortunes, 256, Device::CPU, DType::F32, DType::F32);
  const train::MemoryEstimate two = train::estimateMemory(doubled, 256, Device::CPU, DType::F32, DType::F32);
  EXPECT_DOUBLE_EQ(two.activationBytes, 2 * one.activationBytes);
  EXPECT_DOUBLE_EQ(two.stateBytes, one.stateBytes);
}

// What a few training steps take from the GPU (the caching allocator's blocks in use and cached, which it
// never returns) stays under the estimate, at the fortunes GPT's shape (the llama's: 2 key/value heads, SwiGLU
// width 352), fp32 and bf16.
TEST(MemoryEstimate, BoundsWhatTrainingTakesOnTheGpu) {
  MINIDP_SKIP_WITHOUT_CUDA();
  if (!std::filesystem::exists(kFortunesDir)) GTEST_SKIP() << "no fortunes in " << kFortunesDir;
  const std::vector<std::pair<std::string, std::string>> runs{
      {"gpt", "fp32"}, {"gpt", "bf16"}, {"llama", "fp32"}, {"llama", "bf16"}};
  for (const auto& [model, dtype] : runs) {
    train::Options o = gpt(6, 6, 384, 256, 32, model);
    o.device = Device::CUDA;
    o.precision = train::precisionNames().at(dtype);
    o.steps = 3;
    train::Session session;
    distributed::CommOptions comm;
    comm.backend = "single";
    comm.cuda = true;
    session.comm = distributed::makeCommunicator(comm, nullptr);
    session.device = Device::CUDA;
    session.compute = train::computeDType(o.precision);
    const runtime::AllocatorStats before = runtime::allocatorStats();
    {
      train::Trainer trainer(o, session);
      for (int64_t i = 0; i < o.steps; ++i) trainer.step();
      runtime::synchronize();
    }
    const runtime::AllocatorStats after = runtime::allocatorStats();
    const double taken = static_cast<double>(after.cachedBytes + after.allocatedBytes) -
                         static_cast<double>(before.cachedBytes + before.allocatedBytes);
    const double bound = train::estimateMemory(o, 256, Device::CUDA, DType::F32, session.compute).total();
    std::cout << model << " " << dtype << ": training took " << taken / 1e9 << " GB of the GPU, the estimate is "
              << bound / 1e9 << " GB\n";
    EXPECT_GT(taken, 0);
    EXPECT_LE(taken, bound) << model << " " << dtype;
  }
}

// The stages shard what they say: each holds less state per rank than the one before, at any world size; one
// rank shards nothing but ZeRO-2/3's transient parts; ZeRO-3 at world 8 keeps under 0.3 x DDP's state for a
// model of many blocks; keeping units gathered or overlap off costs what they keep.
TEST(MemoryEstimate, KnowsTheZeroStages) {
  train::Options o = gpt(24, 16, 1024, 1024, 1);  // about 350 M parameters in 24 blocks
  const auto state = [&](int zero, int world) {
    train::Options s = o;
    s.ddp.zeroStage = zero;
    return train::estimateMemory(s, 50257, Device::CUDA, DType::F32, DType::BF16, world).stateBytes;
  };
  const double P = static_cast<double>(train::estimateMemory(o, 50257, Device::CUDA, DType::F32, DType::BF16).parameters);
  EXPECT_DOUBLE_EQ(state(0, 8), 6 * 4 * P);
  EXPECT_DOUBLE_EQ(state(0, 1), state(0, 8));
  for (int world : {2, 8}) {
    EXPECT_LT(state(1, world), state(0, world)) << world;
    EXPECT_LT(state(2, world), state(1, world)) << world;
    EXPECT_LT(state(3, world), state(2, world)) << world;
  }
  EXPECT_LT(state(3, 8), 0.3 * state(0, 8));
  const double released = state(3, 8);
  o.zeroKeepGathered = true;
  EXPECT_DOUBLE_EQ(state(3, 8), released + 4 * P);
  o.zeroKeepGathered = false;
  o.ddp.zeroStage = 2;
  const double on = train::estimateMemory(o, 50257, Device::CUDA, DType::F32, DType::BF16, 8).stateBytes;
  o.ddp.overlap = distributed::Overlap::AfterBackward;
  EXPECT_DOUBLE_EQ(train::estimateMemory(o, 50257, Device::CUDA, DType::F32, DType::BF16, 8).stateBytes, on + 4 * P);
}

}  // namespace
}  // namespace minidp
