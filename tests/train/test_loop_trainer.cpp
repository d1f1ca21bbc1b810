// The training loop through the Trainer, on 1 and 2 ranks (mpirun): validation sharded over the ranks
// equals the single-process loss of the same global batches; each step's learning rate follows the
// schedule worked out by hand; sampling gives token ids for a non-byte vocabulary, bytes for fortunes,
// the same on every rank and on every call.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>
#include <regex>

#include "framework/autograd/variable.h"
#include "tests/distributed/dist_test_env.h"
#include "train/trainer.h"

namespace minidp {
namespace {

train::Options tinyGpt() {
  train::Options o;
  o.model = "gpt";
  o.modelFlags.set("layers", 1);
  o.modelFlags.set("embd", 16);
  o.modelFlags.set("heads", 2);
  o.modelFlags.set("context", 16);
  o.batchSize = 4;
  o.steps = 6;
  return o;
}

class TrainerLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    session_.comm = testing::sharedCommunicator(Device::CPU, &reason);
    if (!session_.comm) GTEST_SKIP() << reason;
  }
  train::Session session_;
};

TEST_F(TrainerLoop, ShardedValidationEqualsTheGlobalBatches) {
  train::Options o = tinyGpt();
  o.evalBatches = 3;
  train::Trainer trainer(o, session_);
  const train::Evaluation e = trainer.evaluate();
  EXPECT_TRUE(std::isnan(e.accuracy));
  // One process, the whole global batch (batch x world rows) of the same validation windows.
  const TokenCorpus corpus = loadFortunes();
  const auto model = models::findModel(o.model).make(train::modelArgs(o, 0, corpus.vocab));
  const int64_t rows = o.batchSize * session_.world(), context = o.context();
  auto source = windowBatches(corpus.val, rows, static_cast<int>(context), 0, 1, 7);
  std::vector<int32_t> inputs(rows * context), targets(inputs.size());
  NoGradGuard noGrad;
  double total = 0;
  for (int b = 0; b < 3; ++b) {
    source->fill(inputs.data(), targets.data());
    total += model->loss(Tensor::fromVector(inputs, {rows, context}), Tensor::fromVector(targets, {rows, context}))
                 .data()
                 .toVector<float>()[0];
  }
  EXPECT_NEAR(e.loss, total / 3, 1e-5);
}

TEST_F(TrainerLoop, EachStepTakesTheScheduledLearningRate) {
  train::Options o = tinyGpt();
  o.lr = 1e-3;
  o.lrSchedule = train::LrScheduleKind::Cosine;
  o.warmupSteps = 2;
  o.minLrFrac = 0.1;
  o.clipGradNorm = 1;
  train::Trainer trainer(o, session_);
  // Warm-up 5e-4, 1e-3; then cosine over steps 2..5 from 1e-3 to 1e-4: 1e-4 + 9e-4 (1 + cos(pi r)) / 2.
  const double want[] = {5e-4, 1e-3, 1e-3, 7.75e-4, 3.25e-4, 1e-4};
  for (double lr : want) {
    trainer.step();
    EXPECT_NEAR(trainer.lr(), lr, 1e-15);
    EXPECT_GT(trainer.gradNorm(), 0);
  }
}

void writeLlmc(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
  f.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
}

TEST_F(TrainerLoop, SamplesTokenIdsForGpt2VocabulariesAndBytesForFortunes) {
  train::Options o = tinyGpt();
  o.temperature = 0.9;
  o.topK = 50;
  const std::string dir = ::testing::TempDir() + "minidp_sample_" + std::to_string(getpid());
  std::mt19937 rng(3);
  std::vector<uint16_t> train(3000), val(500);
  for (uint16_t& t : train) t = static_cast<uint16_t>(rng() % 50257);
  for (uint16_t& t : val) t = static_cast<uint16_t>(rng() % 50257);
  train[0] = 50256;  // vocabulary 50257, as GPT-2's
  writeLlmc(dir + "_train.bin", train);
  writeLlmc(dir + "_val.bin", val);
  o.data = train::DataSet::Llmc;
  o.llmcTrain = dir + "_train.bin";
  o.llmcVal = dir + "_val.bin";
  std::string ids;
  {
    train::Trainer trainer(o, session_);
    ids = trainer.sample(6);
    EXPECT_EQ(trainer.sample(6), ids) << "seeded: the same tokens on every call";
  }
  std::remove(o.llmcTrain.c_str());
  std::remove(o.llmcVal.c_str());
  EXPECT_TRUE(std::regex_match(ids, std::regex("[0-9]+( [0-9]+){5}"))) << ids;
  const std::vector<std::string> all = session_.comm->allGather(ids);
  for (size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r;

  train::Options bytes = tinyGpt();
  train::Trainer trainer(bytes, session_);
  EXPECT_EQ(trainer.sample(7).size(), 7u);
}

}  // namespace
}  // namespace minidp
