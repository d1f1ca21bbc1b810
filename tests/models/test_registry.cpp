// The model registry: the built-in factories build the same models as the constructors (names, shapes and
// values from the same seed) from their flags, flag values take defaults and are checked, refusals name the
// flags, a registered model is found by name with defaults for what it leaves out, and errors list what is
// registered.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"
#include "models/registry.h"
#include "tests/support/parameters.h"

namespace minidp {
namespace {

using testing::expectSameParameters;

TEST(ModelRegistry, MlpFactoryMatchesConstructor) {
  const models::ModelEntry& e = models::findModel("mlp");
  EXPECT_EQ(e.data, models::DataKind::Images);
  EXPECT_EQ(e.evaluation, models::Evaluation::Accuracy);
  models::ModelArgs args;
  args.seed = 5;
  args.inputs = 12;
  args.classes = 4;
  models::FlagValues given;
  given.set("hidden", "7 6");
  args.flags = models::flagValues("mlp", e, given);
  expectSameParameters(*e.make(args), models::MLP({12, 7, 6, 4}, 5));
}

TEST(ModelRegistry, GptFactoryMatchesConstructor) {
  const models::ModelEntry& e = models::findModel("gpt");
  EXPECT_EQ(e.data, models::DataKind::Tokens);
  EXPECT_EQ(e.evaluation, models::Evaluation::MeanLoss);
  models::ModelArgs args;
  args.seed = 6;
  args.classes = 32;
  args.context = 8;
  models::FlagValues given;
  given.set("layers", 2);
  given.set("heads", 2);
  given.set("embd", 16);
  args.flags = models::flagValues("gpt", e, given);
  expectSameParameters(*e.make(args), models::GPT(models::GptConfig{32, 8, 2, 2, 16}, 6));
}

TEST(ModelRegistry, LlamaFactoryReadsItsFlags) {
  const models::ModelEntry& e = models::findModel("llama");
  EXPECT_EQ(e.data, models::DataKind::Tokens);
  EXPECT_EQ(e.rowSparseParameter, "model.embed_tokens.weight");
  models::ModelArgs args;
  args.seed = 7;
  args.classes = 32;
  args.context = 8;
  models::FlagValues given;
  given.set("layers", 2);
  given.set("heads", 4);
  given.set("kv-heads", 1);
  given.set("embd", 16);
  given.set("hidden", 24);
  given.set("rope-theta", "500");
  args.flags = models::flagValues("llama", e, given);
  models::LlamaConfig c;
  c.vocab = 32;
  c.context = 8;
  c.layers = 2;
  c.heads = 4;
  c.kvHeads = 1;
  c.embd = 16;
  c.hidden = 24;
  c.ropeTheta = 500;
  expectSameParameters(*e.make(args), models::Llama(c, 7));
  // Hugging Face's names and shapes: k and v have kv-heads x head dim rows.
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : e.make(args)->namedParameters()) shapes[name] = p.shape();
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.k_proj.weight"), (Shape{4, 16}));
  EXPECT_EQ(shapes.at("model.layers.1.mlp.down_proj.weight"), (Shape{16, 24}));
  EXPECT_EQ(shapes.size(), 3u + 2 * 9);  // embed_tokens, norm, lm_head and 9 per layer
}

// Flags: the defaults fill what is not given, values are made canonical, a flag of another model and a
// value out of range are errors naming the flag.
TEST(ModelRegistry, FlagValuesTakeDefaultsAndCheckWhatIsGiven) {
  const models::ModelEntry& e = models::findModel("llama");
  models::FlagValues given;
  given.set("heads", "08");
  given.set("rope-theta", "1e4");
  const models::FlagValues v = models::flagValues("llama", e, given);
  EXPECT_EQ(v.integer("heads"), 8);
  EXPECT_EQ(v.text("heads"), "8");
  EXPECT_EQ(v.text("rope-theta"), "10000");
  EXPECT_EQ(v.number("norm-eps"), 1e-5);
  EXPECT_EQ(v.integer("kv-heads"), 2);  // the default
  EXPECT_EQ(v.values().size(), e.flags.size());
  const auto message = [&e](const std::string& flag, const std::string& value) {
    models::FlagValues bad;
    bad.set(flag, value);
    try {
      models::flagValues("llama", e, bad);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("residual", "fp32").find("--residual is not a flag of model llama"), std::string::npos);
  EXPECT_NE(message("heads", "0").find("--heads must be an integer in [1, "), std::string::npos);
  EXPECT_NE(message("heads", "2.5").find("--heads"), std::string::npos);
  EXPECT_NE(message("heads", "4 4").find("--heads takes one integer"), std::string::npos);
  EXPECT_NE(message("norm-eps", "nan").find("--norm-eps must be a number"), std::string::npos);
  EXPECT_EQ(models::flagValues("mlp", models::findModel("mlp"), models::FlagValues()).integers("hidden"),
            (std::vector<int64_t>{256, 256}));
}

TEST(ModelRegistry, RefusalsNameTheFlags) {
  const models::ModelEntry& e = models::findModel("llama");
  models::ModelArgs args;
  models::FlagValues given;
  given.set("kv-heads", 3);
  args.flags = models::flagValues("llama", e, given);
  args.context = 16;
  EXPECT_EQ(e.refuse(args), "--kv-heads 3 does not divide --heads 4");
  given.set("kv-heads", 1);
  args.flags = models::flagValues("llama", e, given);
  EXPECT_EQ(e.refuse(args), "");
  // bf16 runs where the flash kernels have the head dim (the default 128 / 4 = 32); another head dim is
  // refused before any work, naming the flags, as GPT's.
  args.compute = DType::BF16;
  args.device = Device::CUDA;
  EXPECT_EQ(e.refuse(args), "");
  given.set("embd", 120);
  given.set("heads", 2);
  args.flags = models::flagValues("llama", e, given);
  EXPECT_NE(e.refuse(args).find("(--embd 120 / --heads 2) has no bf16 attention kernel"), std::string::npos)
      << e.refuse(args);
  EXPECT_NE(e.refuse(args).find("--dtype fp32"), std::string::npos);
  // GPT: a head dim without a bf16 attention kernel, before any work.
  const models::ModelEntry& g = models::findModel("gpt");
  models::FlagValues gptGiven;
  gptGiven.set("embd", 120);
  gptGiven.set("heads", 2);
  args.flags = models::flagValues("gpt", g, gptGiven);
  EXPECT_NE(g.refuse(args).find("(--embd 120 / --heads 2)"), std::string::npos);
}

// A registered model gets the defaults of every function it leaves empty: refusals (none), memory (the
// built model's parameters), FLOPs (6 x parameters), scoring by its evaluation and sampling by forward.
TEST(ModelRegistry, RegisteredModelIsFoundAndListed) {
  models::ModelEntry e;
  e.make = [](const models::ModelArgs& a) {
    return std::make_unique<models::MLP>(std::vector<int64_t>{a.inputs, 2}, 1);
  };
  models::registerModel("registry-test-linear", e);
  EXPECT_TRUE(models::hasModel("registry-test-linear"));
  const models::ModelEntry& found = models::findModel("registry-test-linear");
  models::ModelArgs args;
  args.inputs = 3;
  const auto model = found.make(args);
  EXPECT_EQ(model->numParameters(), 3 * 2 + 2);
  EXPECT_EQ(found.refuse(args), "");
  EXPECT_EQ(found.memory(args, 8).parameters, 3 * 2 + 2);
  EXPECT_EQ(found.flopsPerItem(args, *model), 6.0 * (3 * 2 + 2));
  const models::EvalSums sums = found.score(*model, Tensor::fromVector<float>({1, 0, 0, 0, 1, 0}, {2, 3}),
                                            Tensor::fromVector<int32_t>({0, 1}, {2}));
  EXPECT_EQ(sums.count, 2);
  EXPECT_GT(sums.loss, 0);
  const std::vector<std::string> names = models::registeredModels();
  EXPECT_NE(std::find(names.begin(), names.end(), "registry-test-linear"), names.end());
  EXPECT_THROW(models::registerModel("no-factory", models::ModelEntry{}), Error);
  // A token model must say how long its windows are.
  models::ModelEntry tokens = e;
  tokens.data = models::DataKind::Tokens;
  EXPECT_THROW(models::registerModel("no-context", tokens), Error);
  tokens.flags = {models::ModelFlag{"context", models::FlagKind::Integer, "16", "window"}};
  EXPECT_NO_THROW(models::registerModel("with-context", tokens));
  models::ModelEntry twice = e;
  twice.flags = {models::ModelFlag{"w", models::FlagKind::Integer, "1", ""},
                 models::ModelFlag{"w", models::FlagKind::Integer, "2", ""}};
  EXPECT_THROW(models::registerModel("flag-twice", twice), Error);
}

TEST(ModelRegistry, UnknownNameListsRegisteredModels) {
  EXPECT_FALSE(models::hasModel("no-such-model"));
  try {
    models::findModel("no-such-model");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown model 'no-such-model'"), std::string::npos) << what;
    EXPECT_NE(what.find(" gpt"), std::string::npos) << what;
    EXPECT_NE(what.find(" mlp"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace minidp
