// Containers and the Embedding module: PyTorch-style parameter names in registration order, forward
// equal to the layers applied by hand, and typed access.
#include <gtest/gtest.h>

#include "framework/nn/embedding.h"
#include "framework/nn/layer_norm.h"
#include "framework/nn/linear.h"
#include "framework/nn/module_list.h"
#include "framework/nn/sequential.h"
#include "framework/ops/ops.h"

namespace minidp {
namespace {

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.namedParameters()) out.push_back(name);
  return out;
}

TEST(Sequential, NamesAndForwardMatchPyTorchSequential) {
  nn::Rng rng(1);
  nn::Sequential seq;
  auto first = seq.add(std::make_shared<nn::Linear>(4, 5, true, rng));
  seq.add([](const Variable& x) { return ops::relu(x); });
  auto last = seq.add(std::make_shared<nn::Linear>(5, 2, false, rng));
  EXPECT_EQ(names(seq), (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  Variable x(Tensor::fromVector<float>({0.5f, -1.f, 2.f, 0.25f, -0.5f, 1.f, 1.5f, -2.f}, {2, 4}));
  EXPECT_EQ(seq.forward(x).data().toVector<float>(),
            last->forward(ops::relu(first->forward(x))).data().toVector<float>());
}

TEST(ModuleList, IndexedNamesAndTypedAccess) {
  nn::Rng rng(2);
  nn::ModuleList list;
  list.append(std::make_shared<nn::Linear>(3, 3, true, rng));
  list.append(std::make_shared<nn::LayerNorm>(3));
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(names(list), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  EXPECT_EQ(list.at<nn::LayerNorm>(1).weight.id(), list.parameters()[2].id());
  EXPECT_THROW(list.at<nn::Linear>(1), Error);
  EXPECT_THROW(list.at<nn::Linear>(2), Error);
}

TEST(Embedding, LooksUpRowsAndAccumulatesRepeats) {
  nn::Rng rng(3);
  nn::Embedding emb(4, 2, rng);
  EXPECT_EQ(names(emb), (std::vector<std::string>{"weight"}));
  const std::vector<float> w = emb.weight.data().toVector<float>();
  Variable y = emb.forward(Tensor::fromVector<int32_t>({3, 0, 3}, {3}));
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.data().toVector<float>(), (std::vector<float>{w[6], w[7], w[0], w[1], w[6], w[7]}));
  ops::sum(y).backward();
  EXPECT_EQ(emb.weight.grad().toVector<float>(), (std::vector<float>{1, 1, 0, 0, 0, 0, 2, 2}));
}

}  // namespace
}  // namespace minidp
