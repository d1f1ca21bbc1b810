// The model registry: the built-in factories build the same models as the constructors (names, shapes and
// values from the same seed), a registered model is found by name, and errors list what is registered.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/gpt.h"
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
  args.hidden = {7, 6};
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
  args.layers = 2;
  args.heads = 2;
  args.embd = 16;
  expectSameParameters(*e.make(args), models::GPT(models::GptConfig{32, 8, 2, 2, 16}, 6));
}

TEST(ModelRegistry, RegisteredModelIsFoundAndListed) {
  models::ModelEntry e;
  e.make = [](const models::ModelArgs& a) {
    return std::make_unique<models::MLP>(std::vector<int64_t>{a.inputs, 2}, 1);
  };
  models::registerModel("registry-test-linear", e);
  EXPECT_TRUE(models::hasModel("registry-test-linear"));
  models::ModelArgs args;
  args.inputs = 3;
  EXPECT_EQ(models::findModel("registry-test-linear").make(args)->numParameters(), 3 * 2 + 2);
  const std::vector<std::string> names = models::registeredModels();
  EXPECT_NE(std::find(names.begin(), names.end(), "registry-test-linear"), names.end());
  EXPECT_THROW(models::registerModel("no-factory", models::ModelEntry{}), Error);
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
