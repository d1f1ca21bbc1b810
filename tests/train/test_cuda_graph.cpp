// --cuda-graph through the Trainer: N steps of eager training and N steps with the step captured after the
// warm-up and replayed give byte-identical parameters and losses, for the MLP (SGD with momentum) and the
// GPT (AdamW under a warm-up + cosine learning rate and gradient clipping, so every replay needs new
// scalars), fp32 and bf16. Alone: the "single" communicator; under mpirun with 2 ranks: NCCL, whose
// all-reduces are captured from the comm stream. Also the usage errors, which need no GPU.
// The bf16 weight copies through the Trainer, GPT and llama: the copies the optimizer writes (eager and
// replayed) give the bytes of casting every forward (--cast-weights), and a run resumed from a saved state gives
// the bytes of the straight run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "framework/distributed/comm/communicator.h"
#include "framework/runtime/device.h"
#include "tests/distributed/dist_test_env.h"
#include "tests/support/cuda_skip.h"
#include "train/trainer.h"
#include "train/usage_rules.h"

namespace minidp {
namespace {

struct GraphCase {
  const char* name;
  const char* model;
  const char* dtype;
};

train::Options optionsOf(const GraphCase& c) {
  train::Options o;
  o.model = c.model;
  o.precision = train::precisionNames().at(c.dtype);
  o.device = Device::CUDA;
  o.steps = 7;  // 2 eager warm-up steps, the captured step, 4 more replays
  if (std::string(c.model) == "mlp") {
    o.modelFlags.set("hidden", "64 32");
    o.batchSize = 32;
    return o;
  }
  // The token models: AdamW under a warm-up + cosine learning rate and gradient clipping.
  o.modelFlags.set("layers", 2);
  o.modelFlags.set("heads", 2);
  o.modelFlags.set("context", 32);
  if (std::string(c.model) == "llama") {
    o.modelFlags.set("embd", 128);  // head dim 64, one key/value head: grouped-query attention
    o.modelFlags.set("kv-heads", 1);
    o.modelFlags.set("hidden", 352);
  } else {
    o.modelFlags.set("embd", 64);  // head dim 32: the flash kernels (bf16 needs them)
  }
  o.batchSize = 4;
  o.lr = 3e-3;
  o.lrSchedule = train::LrScheduleKind::Cosine;
  o.warmupSteps = 3;
  o.clipGradNorm = 0.5;
  return o;
}

/// Steps `trainer` from step `from` to o.steps; appends each step's loss bytes, then the parameters' bytes.
void trainTo(const train::Options& o, train::Trainer& trainer, int64_t from, std::vector<std::string>& out) {
  for (int64_t i = from; i < o.steps; ++i) {
    const Tensor loss = trainer.step().to(Device::CPU);  // read before the next replay rewrites it
    out.emplace_back(static_cast<const char*>(loss.raw()), loss.nbytes());
  }
  for (const Variable& p : trainer.model().parameters()) {
    const Tensor t = p.data().to(Device::CPU);
    out.emplace_back(static_cast<const char*>(t.raw()), t.nbytes());
  }
}

/// The parameters' bytes and every step's loss bytes after o.steps steps of a fresh Trainer.
std::vector<std::string> train(train::Options o, train::Session& session, bool graph) {
  o.cudaGraph = graph;
  train::Trainer trainer(o, session);
  std::vector<std::string> out;
  trainTo(o, trainer, 0, out);
  return out;
}

/// Expects two runs' losses and parameters (train's layout, the losses of steps first..o.steps) byte-identical.
void expectSameBytes(const std::vector<std::string>& want, const std::vector<std::string>& got, int64_t steps,
                     int64_t first, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool loss = i < static_cast<size_t>(steps - first);
    EXPECT_TRUE(want[i] == got[i]) << what << ": " << (loss ? "the loss of step " : "parameter ")
                                   << (loss ? first + i + 1 : i - (steps - first)) << " differs";
  }
}

class CudaGraphTraining : public ::testing::TestWithParam<GraphCase> {
 protected:
  void SetUp() override {
    MINIDP_SKIP_WITHOUT_CUDA();
    if (testing::mpiEnvironment()) {
      std::string reason;
      session_.comm = testing::sharedCommunicator(Device::CUDA, &reason);
      if (!session_.comm) GTEST_SKIP() << reason;
    } else {
      distributed::CommOptions opts;
      opts.backend = "single";
      opts.cuda = true;
      session_.comm = distributed::makeCommunicator(opts, nullptr);
    }
    if (std::string(GetParam().model) == "mlp" && !std::filesystem::exists(kFashionMnistDir)) {
      GTEST_SKIP() << "no Fashion-MNIST in " << kFashionMnistDir;
    }
    session_.device = Device::CUDA;
    session_.compute = train::computeDType(train::precisionNames().at(GetParam().dtype));
  }
  train::Session session_;
};

TEST_P(CudaGraphTraining, ReplaysAreByteIdenticalToEagerSteps) {
  const train::Options o = optionsOf(GetParam());
  const std::vector<std::string> eager = train(o, session_, false);
  const std::vector<std::string> graph = train(o, session_, true);
  expectSameBytes(eager, graph, o.steps, 0, "replays against eager training");
  // The replays trained: the last steps' losses are not the captured step's.
  EXPECT_FALSE(graph[o.steps - 1] == graph[train::kGraphWarmupSteps]);
  // Every rank holds the same parameters (NCCL: the replays' all-reduces ran).
  std::string all;
  for (size_t i = o.steps; i < graph.size(); ++i) all += graph[i];
  for (const std::string& bytes : session_.comm->allGather(all)) EXPECT_TRUE(bytes == all) << "ranks differ";
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGraphTraining,
                         ::testing::Values(GraphCase{"MlpFp32", "mlp", "fp32"}, GraphCase{"GptFp32", "gpt", "fp32"},
                                           GraphCase{"GptBf16", "gpt", "bf16"}),
                         [](const ::testing::TestParamInfo<GraphCase>& info) { return info.param.name; });

// bf16 only: the cases whose Trainer keeps weight copies (ops::ComputeCopies).
class WeightCopiesTraining : public CudaGraphTraining {};

TEST_P(WeightCopiesTraining, GiveTheBytesOfCastingEveryForwardEagerAndReplayed) {
  train::Options o = optionsOf(GetParam());
  EXPECT_TRUE(train::Trainer(o, session_).keepsWeightCopies());
  o.castWeights = true;
  EXPECT_FALSE(train::Trainer(o, session_).keepsWeightCopies());
  const std::vector<std::string> cast = train(o, session_, false);
  o.castWeights = false;
  expectSameBytes(cast, train(o, session_, false), o.steps, 0, "copies against casts");
  expectSameBytes(cast, train(o, session_, true), o.steps, 0, "replayed copies against casts");
}

// The second Trainer validates before it resumes, so its copies exist (made from its fresh parameters) when the
// saved parameters are loaded: they must be refreshed.
TEST_P(WeightCopiesTraining, AResumedRunGivesTheBytesOfTheStraightRun) {
  train::Options o = optionsOf(GetParam());
  o.evalBatches = 1;  // a validation forward, which makes the copies
  const int64_t saved = 4;
  std::vector<std::string> straight;
  {
    train::Trainer trainer(o, session_);
    for (int64_t i = 0; i < saved; ++i) trainer.step();
    trainTo(o, trainer, saved, straight);
  }
  // Rank 0 writes the state; every rank reads rank 0's file (the ranks of these tests share one host).
  const std::string path =
      session_.comm->allGather(::testing::TempDir() + "minidp_resume_" + std::to_string(getpid()) + ".safetensors")[0];
  {
    train::Trainer first(o, session_);
    for (int64_t i = 0; i < saved; ++i) first.step();
    first.saveState(path, saved);
  }
  session_.comm->allGather(std::string());  // the file is complete before any rank reads it
  train::Trainer second(o, session_);
  second.evaluate();
  EXPECT_EQ(second.resume(path), saved);
  std::vector<std::string> resumed;
  trainTo(o, second, saved, resumed);
  session_.comm->allGather(std::string());
  if (session_.rank() == 0) std::filesystem::remove(path);
  expectSameBytes(straight, resumed, o.steps, saved, "resumed against straight");
}

INSTANTIATE_TEST_SUITE_P(Models, WeightCopiesTraining,
                         ::testing::Values(GraphCase{"GptBf16", "gpt", "bf16"},
                                           GraphCase{"LlamaBf16", "llama", "bf16"}),
                         [](const ::testing::TestParamInfo<GraphCase>& info) { return info.param.name; });

TEST(CudaGraphUsage, NeedsCudaOneMicroBatchAndNoZero) {
  train::Options o;
  EXPECT_EQ(train::usageProblem(o), "");
  o.cudaGraph = true;
  EXPECT_EQ(train::usageProblem(o), "--cuda-graph needs --device cuda");
  o.device = Device::CUDA;
  EXPECT_EQ(train::usageProblem(o), "");
  o.gradAccum = 2;
  EXPECT_NE(train::usageProblem(o).find("--grad-accum"), std::string::npos);
  o.gradAccum = 1;
  o.ddp.zeroStage = 1;
  EXPECT_NE(train::usageProblem(o).find("--zero 1"), std::string::npos);
}

}  // namespace
}  // namespace minidp
