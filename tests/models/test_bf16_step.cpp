// A bf16 mixed-precision training step of the MLP, GPT and Llama on CUDA against the fp32 step from the same
// parameters and batch: loss and every parameter gradient within bf16 tolerances; the parameters and
// gradient buckets stay fp32. Then training: bf16 learns a copy task as fast as fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "framework/distributed/gradient/ddp.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"
#include "kernels/flash_attention.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "tests/support/cuda_skip.h"

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
  MINIDP_SKIP_WITHOUT_CUDA();
  const std::vector<int64_t> dims{64, 128, 128, 10};
  models::MLP f32(dims, 3), bf16(dims, 3, DType::BF16);
  f32.to(Device::CUDA, DType::F32);
  bf16.to(Device::CUDA, DType::F32);
  const Tensor x = testing::randomTensor({32, 64}, 4, 0, 1, DType::F32).to(Device::CUDA);
  const Tensor y = testing::randomIndices({32}, 10, 5).to(Device::CUDA);
  expectBf16StepMatchesF32(f32, bf16, x, y);
}

// The tiny GPT's bf16 step against its fp32 step, with the residual stream in bf16 (the default) or fp32.
void expectGptBf16StepMatchesF32(bool fp32Residual) {
  models::GptConfig c{64, 32, 2, 2, 64};
  models::GPT f32(c, 7);
  c.compute = DType::BF16;
  c.fp32Residual = fp32Residual;
  models::GPT bf16(c, 7);
  f32.to(Device::CUDA, DType::F32);
  bf16.to(Device::CUDA, DType::F32);
  const Tensor tokens = testing::randomIndices({4, 32}, 64, 8).to(Device::CUDA);
  const Tensor targets = testing::randomIndices({4, 32}, 64, 9).to(Device::CUDA);
  expectBf16StepMatchesF32(f32, bf16, tokens, targets);
}

TEST(Bf16Step, GptMatchesF32) {
  MINIDP_SKIP_WITHOUT_CUDA();
  expectGptBf16StepMatchesF32(false);
}

TEST(Bf16Step, GptWithAnFp32ResidualStreamMatchesF32) {
  // --residual fp32: the residual stream and its gradient in fp32, the blocks' insides in bf16.
  MINIDP_SKIP_WITHOUT_CUDA();
  expectGptBf16StepMatchesF32(true);
}

// A small llama: 4 query heads of 32 channels (a flash head dim) over `kvHeads` key/value heads.
models::LlamaConfig smallLlama(int64_t kvHeads, int64_t context) {
  models::LlamaConfig c;
  c.vocab = 64;
  c.context = context;
  c.layers = 2;
  c.heads = 4;
  c.kvHeads = kvHeads;
  c.embd = 128;
  c.hidden = 352;
  return c;
}

TEST(Bf16Step, LlamaMatchesF32) {
  // Both runs take the packed attention on the flash kernels (fp32 and bf16), grouped heads repeated; RMSNorm,
  // rotary, SwiGLU and the residual stream in bf16 over fp32 parameters, the loss in fp32.
  MINIDP_SKIP_WITHOUT_CUDA();
  for (int64_t kv : {2, 1}) {
    SCOPED_TRACE(kv);
    models::LlamaConfig c = smallLlama(kv, 32);
    models::Llama f32(c, 7);
    c.compute = DType::BF16;
    models::Llama bf16(c, 7);
    f32.to(Device::CUDA, DType::F32);
    bf16.to(Device::CUDA, DType::F32);
    const Tensor tokens = testing::randomIndices({4, 32}, 64, 8).to(Device::CUDA);
    const Tensor targets = testing::randomIndices({4, 32}, 64, 9).to(Device::CUDA);
    EXPECT_EQ(bf16.forward(tokens).dtype(), DType::BF16) << "logits";
    expectBf16StepMatchesF32(f32, bf16, tokens, targets);
  }
}

TEST(Bf16Step, LlamaWithoutAFlashHeadDimIsRefusedWhenBuilt) {
  // bf16 attention runs on the flash kernels alone: another head dim is refused by the constructor (before
  // any data or forward), in one line naming the flags; fp32 takes it.
  models::LlamaConfig c = smallLlama(1, 32);
  c.embd = 120;
  c.heads = 2;  // head dim 60
  c.compute = DType::BF16;
  try {
    models::Llama model(c, 1);
    ADD_FAILURE() << "head dim 60 in bf16 was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("(--embd 120 / --heads 2)"), std::string::npos) << what;
    EXPECT_NE(what.find(kernels::flashAttentionHeadDims()), std::string::npos) << what;
  }
  c.compute = DType::F32;
  EXPECT_NO_THROW(models::Llama(c, 1));
}

// ---- training, not one step: bf16 must learn as fast as fp32 ----

// A batch of a task that attention must solve: each row is a random block of `period` tokens repeated,
// so every token after the first block is the one `period` places back (a copy through attention).
std::pair<Tensor, Tensor> repeatedBlocks(int64_t batch, int64_t len, int64_t period, int32_t vocab, std::mt19937& rng) {
  std::vector<int32_t> in(batch * len), out(batch * len);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int32_t> block(period), row(len + 1);
    for (auto& t : block) t = token(rng);
    for (int64_t t = 0; t <= len; ++t) row[t] = block[t % period];
    for (int64_t t = 0; t < len; ++t) {
      in[b * len + t] = row[t];
      out[b * len + t] = row[t + 1];
    }
  }
  return {Tensor::fromVector<int32_t>(in, {batch, len}, Device::CUDA),
          Tensor::fromVector<int32_t>(out, {batch, len}, Device::CUDA)};
}

// The copy task: `steps` batches of `batch` rows of `context` tokens out of `vocab`, blocks of `period`.
struct CopyTask {
  int64_t vocab, context, batch, period;
  int steps;
};

// `task.steps` AdamW steps of `model` under single-rank DDP on the copy task; the losses.
std::vector<double> train(models::Model& model, const CopyTask& task, uint64_t seed) {
  distributed::CommOptions opts;
  opts.backend = "single";
  opts.cuda = true;
  distributed::DistributedDataParallel ddp(model.namedParameters(), distributed::makeCommunicator(opts, nullptr),
                                           distributed::DdpOptions{});
  optim::AdamW adam(model.namedParameters(), 1e-3, 0.9, 0.999, 1e-8, 0.01);
  std::mt19937 rng(seed);
  std::vector<double> losses;
  for (int s = 0; s < task.steps; ++s) {
    auto [x, y] = repeatedBlocks(task.batch, task.context, task.period, static_cast<int32_t>(task.vocab), rng);
    ddp.prepareStep();
    Variable loss = model.loss(x, y);
    loss.backward();
    ddp.finalize();
    adam.step();
    losses.push_back(loss.data().toVector<float>()[0]);
  }
  return losses;
}

double meanOfLast(const std::vector<double>& v, size_t n) {
  double sum = 0;
  for (size_t i = v.size() - n; i < v.size(); ++i) sum += v[i];
  return sum / static_cast<double>(n);
}

// Trains f32 and bf16 (the same model and seed; fp32 and bf16 compute) on the copy task, AdamW with the
// trainer's defaults. The task is learnable only through attention: fp32 must fall well below the unigram
// loss log(V) in the given steps, and bf16 must follow it (mean of the last 20 losses within 10% + 0.05
// nats). Then, from the fp32 model's trained parameters, one more step in each precision: every gradient
// within gradTolerance relative L2 (sharper attention and larger activations than at initialisation).
void expectBf16LearnsAsFastAsF32(models::Model& f32, models::Model& bf16, const CopyTask& task,
                                 double gradTolerance = kGradTolerance) {
  f32.to(Device::CUDA, DType::F32);
  bf16.to(Device::CUDA, DType::F32);
  const std::vector<double> l32 = train(f32, task, 5), l16 = train(bf16, task, 5);
  for (int s = 0; s < task.steps; s += task.steps / 10)
    std::printf("step %3d: fp32 %.4f bf16 %.4f\n", s, l32[s], l16[s]);
  const double end32 = meanOfLast(l32, 20), end16 = meanOfLast(l16, 20);
  std::printf("last 20: fp32 %.4f bf16 %.4f\n", end32, end16);
  EXPECT_LT(end32, 0.5 * std::log(double(task.vocab)))
      << "the copy task was not learned in fp32: the test shows nothing";
  EXPECT_LT(end16, 1.1 * end32 + 0.05) << "bf16 training falls behind fp32";

  const nn::NamedParameters p32 = f32.namedParameters(), p16 = bf16.namedParameters();
  for (size_t i = 0; i < p32.size(); ++i) {
    Variable p = p16[i].second;
    p.data().copyFrom(p32[i].second.data());
  }
  std::mt19937 rng(99);
  auto [x, y] = repeatedBlocks(task.batch, task.context, task.period, static_cast<int32_t>(task.vocab), rng);
  const double loss32 = stepOnce(f32, x, y), loss16 = stepOnce(bf16, x, y);
  EXPECT_NEAR(loss16, loss32, 2e-2 * std::abs(loss32) + 1e-2);
  for (size_t i = 0; i < p32.size(); ++i) {
    const double err = testing::relativeL2(p16[i].second.grad(), p32[i].second.grad());
    std::printf("%-28s %.3e\n", p16[i].first.c_str(), err);
    EXPECT_LT(err, gradTolerance) << p16[i].first;
  }
}

struct TrainShape {
  models::GptConfig config;
  int64_t batch, period;
  int steps;
};

class Bf16Training : public ::testing::TestWithParam<TrainShape> {};

TEST_P(Bf16Training, GptLearnsAsFastAsF32AndKeepsItsGradientsAtATrainedState) {
  // Head dim 64 (the flash kernels' bf16 path), contexts over several key tiles.
  MINIDP_SKIP_WITHOUT_CUDA();
  const TrainShape& shape = GetParam();
  models::GptConfig c = shape.config;
  models::GPT f32(c, 11);
  c.compute = DType::BF16;
  models::GPT bf16(c, 11);
  expectBf16LearnsAsFastAsF32(f32, bf16, {c.vocab, c.context, shape.batch, shape.period, shape.steps});
}

// Width 128 over 2 layers. The fortunes GPT's shape (6 layers, width 384, 6 heads, context 256, batch 32,
// vocabulary 256) is not here: on this task both precisions sit on the unigram plateau for 200-300+ steps
// and the step at which each escapes is chaotic (measured on the H200: bf16 escaped at about step 210, fp32
// not within 300), so a bound on it would test luck, not bf16.
INSTANTIATE_TEST_SUITE_P(Shapes, Bf16Training, ::testing::Values(TrainShape{{64, 128, 2, 2, 128}, 16, 24, 300}),
                         [](const ::testing::TestParamInfo<TrainShape>& info) {
                           return "L" + std::to_string(info.param.config.layers) + "C" +
                                  std::to_string(info.param.config.embd);
                         });

TEST(Bf16LlamaTraining, LearnsAsFastAsF32AndKeepsItsGradientsAtATrainedState) {
  // 4 query heads of 32 over 2 key/value heads, context 128 (two key tiles), the GPT test's task and steps.
  MINIDP_SKIP_WITHOUT_CUDA();
  models::LlamaConfig c = smallLlama(2, 128);
  models::Llama f32(c, 11);
  c.compute = DType::BF16;
  models::Llama bf16(c, 11);
  // Twice GPT's gradient tolerance: q and k are rounded to bf16 once more than GPT's (the rotary turn's output,
  // before the scores), and the scores of the trained copy task are sharp, so the query and key projections'
  // gradients carry the most rounding (on an H200: q_proj 5.7e-2, k_proj 4.7e-2 at layer 0; the other
  // gradients 1.9e-2 to 3.9e-2). A wrong kernel is off by O(1), and the training losses above follow fp32.
  expectBf16LearnsAsFastAsF32(f32, bf16, {c.vocab, c.context, 16, 24, 300}, 2 * kGradTolerance);
}

}  // namespace
}  // namespace minidp
