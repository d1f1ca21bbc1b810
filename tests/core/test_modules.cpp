// Containers and the Embedding module: PyTorch-style parameter names in registration order, forward
// equal to the layers applied by hand, and typed access.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/nn/embedding.h"
#include "framework/nn/init.h"
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

// The initialisers' documented draw, written out sequentially: chunk c of kInitChunk elements from a generator
// seeded by the c-th draw of the caller's; Box-Muller pairs (cos, sin) from two 53-bit uniforms. The library fills
// the chunks on all threads, so equal bits here say the values depend on the seed alone.
TEST(Init, NormalAndUniformAreTheSeededChunkDrawsWhateverTheThreads) {
  const int64_t n = 3 * nn::kInitChunk + 12345;  // several chunks and a short odd last one
  const auto unit = [](nn::Rng& r) { return (r() >> 11) * (1.0 / 9007199254740992.0); };
  nn::Rng rng(7), reference(7);
  const std::vector<float> normal = nn::normal({n}, 0.02, rng).toVector<float>();
  const std::vector<float> uniform = nn::uniform({n}, 0.5, rng).toVector<float>();
  std::vector<uint64_t> normalSeeds, uniformSeeds;
  for (int64_t c = 0; c * nn::kInitChunk < n; ++c) normalSeeds.push_back(reference());
  for (int64_t c = 0; c * nn::kInitChunk < n; ++c) uniformSeeds.push_back(reference());
  EXPECT_EQ(rng(), reference()) << "the caller's generator advances by one draw per chunk";
  double sum = 0, squares = 0;
  for (size_t c = 0; c < normalSeeds.size(); ++c) {
    nn::Rng a(normalSeeds[c]), b(uniformSeeds[c]);
    const int64_t begin = static_cast<int64_t>(c) * nn::kInitChunk, end = std::min(n, begin + nn::kInitChunk);
    for (int64_t i = begin; i < end; i += 2) {
      const double u1 = 1.0 - unit(a), u2 = unit(a);
      const double radius = 0.02 * std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * M_PI * u2;
      ASSERT_EQ(normal[i], static_cast<float>(radius * std::cos(angle))) << i;
      if (i + 1 < end) ASSERT_EQ(normal[i + 1], static_cast<float>(radius * std::sin(angle))) << i + 1;
    }
    for (int64_t i = begin; i < end; ++i) ASSERT_EQ(uniform[i], static_cast<float>((2.0 * unit(b) - 1.0) * 0.5)) << i;
  }
  for (const float v : normal) sum += v, squares += static_cast<double>(v) * v;
  EXPECT_NEAR(sum / n, 0.0, 5 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(squares / n), 0.02, 0.02 * 0.01);
  EXPECT_LE(*std::max_element(uniform.begin(), uniform.end()), 0.5f);
  EXPECT_GE(*std::min_element(uniform.begin(), uniform.end()), -0.5f);
}

}  // namespace
}  // namespace minidp
