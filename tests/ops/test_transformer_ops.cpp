// embedding, layerNorm and causalSelfAttention: forward against naive float64 loops, backward against
// float64 finite differences, causality, token-range errors, and CUDA against the CPU twin in float32
// and float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "tests/ops/composed_ops.h"

namespace minidp {
namespace {

using testing::compareDevices;
using testing::gradcheckPasses;
using testing::randomIndices;
using testing::randomTensor;
using testing::sumTolerance;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

Variable leaf(const Tensor& t) { return Variable(t, true); }

// Forward against naive loops in float64: only summation order differs.
constexpr double kForwardTolerance = 1e-12;

void expectNear(const std::vector<double>& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

// ---- embedding ----

// (B, T) = (2, 4) with repeated ids (1 and 3 three times each), id 2 unused, T < Tmax = 6.
Tensor repeatedTokens() { return Tensor::fromVector<int32_t>({1, 3, 1, 0, 3, 3, 4, 1}, {2, 4}); }

TEST(Embedding, ForwardAddsTokenAndPositionRows) {
  const int64_t V = 5, Tmax = 6, C = 3;
  Tensor wte = randomTensor({V, C}, 1), wpe = randomTensor({Tmax, C}, 2), tokens = repeatedTokens();
  Variable y = ops::embedding(Variable(wte), Variable(wpe), tokens);
  ASSERT_EQ(y.shape(), (Shape{2, 4, C}));
  std::vector<double> e = wte.toVector<double>(), p = wpe.toVector<double>(), expected;
  std::vector<int32_t> ids = tokens.toVector<int32_t>();
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t c = 0; c < C; ++c) expected.push_back(e[ids[i] * C + c] + p[(i % 4) * C + c]);
  EXPECT_EQ(y.data().toVector<double>(), expected);  // one addition each: exact
}

TEST(Embedding, Gradcheck) {
  Tensor tokens = repeatedTokens();
  EXPECT_TRUE(
      gradcheckPasses([tokens](const std::vector<Variable>& in) { return ops::embedding(in[0], in[1], tokens); },
                      {leaf(randomTensor({5, 3}, 3)), leaf(randomTensor({6, 3}, 4))}));
}

TEST(Embedding, BackwardGathersRepeatedTokens) {
  // dy = 1 everywhere: dwte[v] counts v's occurrences, dwpe[t] = B for t < T and 0 beyond.
  Variable wte = leaf(randomTensor({5, 2}, 5)), wpe = leaf(randomTensor({6, 2}, 6));
  ops::sum(ops::embedding(wte, wpe, repeatedTokens())).backward();
  EXPECT_EQ(wte.grad().toVector<double>(), (std::vector<double>{1, 1, 3, 3, 0, 0, 3, 3, 1, 1}));
  EXPECT_EQ(wpe.grad().toVector<double>(), (std::vector<double>{2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0}));
}

TEST(Embedding, RejectsBadTokensAndShapes) {
  Variable wte(randomTensor({5, 3}, 7)), wpe(randomTensor({6, 3}, 8));
  try {
    ops::embedding(wte, wpe, Tensor::fromVector<int32_t>({0, 5}, {1, 2}));
    FAIL() << "token id 5 of a 5-row vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary [0, 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::embedding(wte, wpe, Tensor::fromVector<int32_t>({-1, 0}, {1, 2})), Error);
  EXPECT_THROW(ops::embedding(wte, wpe, randomIndices({1, 7}, 5, 9)), Error);                      // T = 7 > Tmax = 6
  EXPECT_THROW(ops::embedding(wte, wpe, randomTensor({1, 2}, 10)), Error);                         // float tokens
  EXPECT_THROW(ops::embedding(wte, Variable(randomTensor({6, 4}, 11)), repeatedTokens()), Error);  // C differs
}

// ---- layerNorm ----

std::vector<double> naiveLayerNorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const int64_t C = x.size(-1), N = x.numel() / C;
  std::vector<double> xv = x.toVector<double>(), wv = w.toVector<double>(), bv = b.toVector<double>(), y;
  for (int64_t n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += xv[n * C + c] / C;
    for (int64_t c = 0; c < C; ++c) var += (xv[n * C + c] - mean) * (xv[n * C + c] - mean) / C;
    for (int64_t c = 0; c < C; ++c) y.push_back((xv[n * C + c] - mean) / std::sqrt(var + eps) * wv[c] + bv[c]);
  }
  return y;
}

TEST(LayerNorm, ForwardMatchesNaiveLoops) {
  // Offset rows (x in [2, 5)) check the mean is subtracted; eps = 0.1 checks where eps enters.
  Tensor x = randomTensor({2, 3, 7}, 12, 2.0, 5.0), w = randomTensor({7}, 13, 0.5, 1.5), b = randomTensor({7}, 14);
  for (double eps : {1e-5, 0.1}) {
    Variable y = ops::layerNorm(Variable(x), Variable(w), Variable(b), eps);
    ASSERT_EQ(y.shape(), x.shape());
    expectNear(y.data().toVector<double>(), naiveLayerNorm(x, w, b, eps), kForwardTolerance);
  }
}

TEST(LayerNorm, Gradcheck) {
  EXPECT_TRUE(gradcheckPasses(
      [](const std::vector<Variable>& in) { return ops::layerNorm(in[0], in[1], in[2]); },
      {leaf(randomTensor({2, 3, 6}, 15)), leaf(randomTensor({6}, 16, 0.5, 1.5)), leaf(randomTensor({6}, 17))}));
}

TEST(LayerNorm, RejectsMismatchedParameters) {
  Variable x(randomTensor({4, 6}, 18));
  EXPECT_THROW(ops::layerNorm(x, Variable(randomTensor({5}, 19)), Variable(randomTensor({6}, 20))), Error);
  Variable f32Weight(randomTensor({6}, 21, -1, 1, DType::F32));
  EXPECT_THROW(ops::layerNorm(x, f32Weight, Variable(randomTensor({6}, 22))), Error);
}

// ---- rmsNorm ----

TEST(RmsNorm, ForwardMatchesNaiveLoops) {
  // Offset rows (x in [2, 5)): no mean may be subtracted; eps = 0.1 checks where eps enters.
  const int64_t C = 7;
  Tensor x = randomTensor({2, 3, C}, 50, 2.0, 5.0), w = randomTensor({C}, 51, 0.5, 1.5);
  const std::vector<double> xv = x.toVector<double>(), wv = w.toVector<double>();
  for (double eps : {1e-5, 0.1}) {
    Variable y = ops::rmsNorm(Variable(x), Variable(w), eps);
    ASSERT_EQ(y.shape(), x.shape());
    std::vector<double> want;
    for (int64_t n = 0; n < 6; ++n) {
      double ms = 0;
      for (int64_t c = 0; c < C; ++c) ms += xv[n * C + c] * xv[n * C + c] / C;
      for (int64_t c = 0; c < C; ++c) want.push_back(xv[n * C + c] / std::sqrt(ms + eps) * wv[c]);
    }
    expectNear(y.data().toVector<double>(), want, kForwardTolerance);
  }
}

TEST(RmsNorm, GradcheckAndTheComposedOps) {
  // The fused op against finite differences, and against RMSNorm composed of ops (docs/extending.md) in
  // float64: the same values and gradients up to rounding.
  const Tensor x = randomTensor({2, 3, 6}, 52), w = randomTensor({6}, 53, 0.5, 1.5);
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::rmsNorm(in[0], in[1], 1e-5); },
                              {leaf(x), leaf(w)}));
  Variable xf = leaf(x), wf = leaf(w), xc = leaf(x), wc = leaf(w);
  Variable fused = ops::rmsNorm(xf, wf, 1e-5);
  Variable fromOps = composed::rmsNorm(xc, wc, 1e-5);
  expectNear(fused.data().toVector<double>(), fromOps.data().toVector<double>(), 1e-14);
  const Tensor g = randomTensor({2, 3, 6}, 54);
  fused.backward(g);
  fromOps.backward(g);
  expectNear(xf.grad().toVector<double>(), xc.grad().toVector<double>(), 1e-13);
  expectNear(wf.grad().toVector<double>(), wc.grad().toVector<double>(), 1e-13);
}

TEST(RmsNorm, RejectsMismatchedWeight) {
  Variable x(randomTensor({4, 6}, 55));
  EXPECT_THROW(ops::rmsNorm(x, Variable(randomTensor({5}, 56))), Error);
  EXPECT_THROW(ops::rmsNorm(x, Variable(randomTensor({6}, 57, -1, 1, DType::F32))), Error);
}

// ---- causalSelfAttention ----

// y[b, i, h*d + c] = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d)) v[b, j, h*d + c], q | k | v along 3C.
std::vector<double> naiveAttention(const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, d = C / H;
  std::vector<double> x = qkv.toVector<double>(), y(B * T * C, 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t c) {
    return x[(b * T + t) * 3 * C + part * C + h * d + c];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> score(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < d; ++c) score[j] += at(b, i, 0, h, c) * at(b, j, 1, h, c);
          score[j] /= std::sqrt(static_cast<double>(d));
        }
        const double top = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double& s : score) total += (s = std::exp(s - top));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < d; ++c) y[(b * T + i) * C + h * d + c] += score[j] / total * at(b, j, 2, h, c);
      }
  return y;
}

// B = 2, T = 5, H = 2, C = 8 (d = 4); values in [-2, 2] make the softmax far from uniform.
Tensor smallQkv(uint64_t seed) { return randomTensor({2, 5, 24}, seed, -2.0, 2.0); }

TEST(CausalSelfAttention, ForwardMatchesNaiveLoops) {
  Tensor qkv = smallQkv(23);
  Variable y = ops::causalSelfAttention(Variable(qkv), 2);
  ASSERT_EQ(y.shape(), (Shape{2, 5, 8}));
  expectNear(y.data().toVector<double>(), naiveAttention(qkv, 2), kForwardTolerance);
  // One head: a different split of the same channels, so a head-layout error cannot cancel out.
  expectNear(ops::causalSelfAttention(Variable(qkv), 1).data().toVector<double>(), naiveAttention(qkv, 1),
             kForwardTolerance);
}

TEST(CausalSelfAttention, Gradcheck) {
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::causalSelfAttention(in[0], 2); },
                              {leaf(smallQkv(24))}));
}

TEST(CausalSelfAttention, OutputDoesNotDependOnLaterPositions) {
  const int64_t T = 5, C = 8, later = 3;
  Tensor qkv = smallQkv(25);
  std::vector<double> before = ops::causalSelfAttention(Variable(qkv), 2).data().toVector<double>();
  Tensor changed = qkv.clone();
  double* p = changed.data<double>();
  for (int64_t c = 0; c < 3 * C; ++c) p[later * 3 * C + c] += 0.75;  // all of q, k, v at (b = 0, t = 3)
  std::vector<double> after = ops::causalSelfAttention(Variable(changed), 2).data().toVector<double>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = (b * T + t) * C + c;
        if (b == 0 && t >= later) {
          EXPECT_NE(after[i], before[i]) << "t = " << t << " c = " << c << " ignores position " << later;
        } else {
          EXPECT_EQ(after[i], before[i]) << "b = " << b << " t = " << t << " c = " << c;
        }
      }
}

TEST(CausalSelfAttention, RejectsBadShapes) {
  EXPECT_THROW(ops::causalSelfAttention(Variable(randomTensor({2, 5, 24}, 26)), 3), Error);  // 8 % 3 != 0
  EXPECT_THROW(ops::causalSelfAttention(Variable(randomTensor({2, 5, 25}, 27)), 1), Error);  // not 3C
  EXPECT_THROW(ops::causalSelfAttention(Variable(randomTensor({10, 24}, 28)), 2), Error);    // not 3-D
}

// ---- CUDA against the CPU twin ----

using TransformerCudaVsCpu = testing::CudaVsCpuTest;

TEST_P(TransformerCudaVsCpu, EmbeddingIsExact) {
  // Both devices add the same numbers in the same order (dwte in position order, dwpe in batch order), so
  // the results are bitwise equal. V = 97 forces repeats (segments of several positions after the GPU's
  // sort); C = 40 is not a multiple of 32; T = 70 < Tmax = 80 leaves dwpe rows that must be zero.
  Tensor tokens = randomIndices({4, 70}, 97, 32);
  const Fn f = [tokens](const std::vector<Variable>& in) {
    return ops::embedding(in[0], in[1], tokens.to(in[0].device()));
  };
  expectClose(compareDevices(f, {randomTensor({97, 40}, 33), randomTensor({80, 40}, 34)}, GetParam()), 0.0);
}

TEST_P(TransformerCudaVsCpu, LayerNorm) {
  // N = 3 * 37 rows (not a multiple of the 8 rows per GPU block), C = 80 (not a multiple of a warp).
  // The row sums run over C terms, the weight and bias gradients over N.
  const Fn f = [](const std::vector<Variable>& in) { return ops::layerNorm(in[0], in[1], in[2]); };
  expectClose(
      compareDevices(
          f, {randomTensor({3, 37, 80}, 35, -2.0, 3.0), randomTensor({80}, 36, 0.5, 1.5), randomTensor({80}, 37)},
          GetParam()),
      sumTolerance(GetParam(), 3 * 37));
}

TEST_P(TransformerCudaVsCpu, RmsNorm) {
  // As LayerNorm's: N = 111 rows, C = 80 (the scalar path is FusedCudaVsCpu's).
  const Fn f = [](const std::vector<Variable>& in) { return ops::rmsNorm(in[0], in[1]); };
  expectClose(compareDevices(f, {randomTensor({3, 37, 80}, 58, -2.0, 3.0), randomTensor({80}, 59, 0.5, 1.5)},
                             GetParam()),
              sumTolerance(GetParam(), 3 * 37));
}

TEST_P(TransformerCudaVsCpu, CausalSelfAttention) {
  // T = 67 rows of up to 67 scores: more than one pass of a warp; H = 3 heads of d = 16. The longest sums
  // are over T terms (att @ v, dS^T @ q) and the softmax rows.
  const Fn f = [](const std::vector<Variable>& in) { return ops::causalSelfAttention(in[0], 3); };
  expectClose(compareDevices(f, {randomTensor({2, 67, 144}, 38)}, GetParam()), sumTolerance(GetParam(), 67));
}

TEST_P(TransformerCudaVsCpu, BitwiseReproducible) {
  // Same inputs, same bits: reductions in a fixed order, no floating-point atomics. The chain
  // embedding -> layerNorm -> projection -> attention runs every backward kernel of this file.
  const DType dtype = GetParam();
  auto onCuda = [dtype](const Shape& shape, uint64_t seed, double lo, double hi) {
    return randomTensor(shape, seed, lo, hi, dtype).to(Device::CUDA);
  };
  Tensor tokens = randomIndices({4, 70}, 50, 39).to(Device::CUDA);
  const std::vector<Tensor> params{onCuda({50, 48}, 40, -1, 1), onCuda({70, 48}, 41, -1, 1), onCuda({48}, 42, 0.5, 1.5),
                                   onCuda({48}, 43, -1, 1)};
  Tensor proj = onCuda({1, 48, 144}, 44, -0.3, 0.3), upstream = onCuda({4, 70, 48}, 45, -1, 1);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    std::vector<Variable> p;
    for (const Tensor& t : params) p.emplace_back(t.clone(), true);
    Variable x = ops::layerNorm(ops::embedding(p[0], p[1], tokens), p[2], p[3]);  // (4, 70, 48)
    Variable qkv = ops::reshape(ops::matmul(ops::reshape(x, {1, 280, 48}), Variable(proj)), {4, 70, 144});
    Variable y = ops::causalSelfAttention(qkv, 3);
    y.backward(upstream);
    std::vector<double> bits = y.data().toDType(DType::F64).toVector<double>();
    for (const Variable& v : p) {
      std::vector<double> g = v.grad().toDType(DType::F64).toVector<double>();
      bits.insert(bits.end(), g.begin(), g.end());
    }
    runs.push_back(bits);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_P(TransformerCudaVsCpu, OutOfRangeTokenGivesNaNRow) {
  Variable wte(randomTensor({5, 3}, 45, -1.0, 1.0, GetParam()).to(Device::CUDA));
  Variable wpe(randomTensor({2, 3}, 46, -1.0, 1.0, GetParam()).to(Device::CUDA));
  Variable y = ops::embedding(wte, wpe, Tensor::fromVector<int32_t>({1, 5}, {1, 2}, Device::CUDA));
  std::vector<double> v = y.data().toDType(DType::F64).toVector<double>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_FALSE(std::isnan(v[c])) << "valid token 1, channel " << c;
    EXPECT_TRUE(std::isnan(v[3 + c])) << "token 5 of a 5-row vocabulary, channel " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TransformerCudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

}  // namespace
}  // namespace minidp
