// linear, matmul, transpose and crossEntropy: forward against naive loops, backward against float64
// finite differences, hand-computable losses, and CUDA against the CPU twin in float32 and float64.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/tensor/dispatch.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "kernels/matmul.h"
#include "kernels/softmax_xent.h"
#include "kernels/tiled_gemm.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

using testing::compareDevices;
using testing::DeviceComparison;
using testing::gradcheckPasses;
using testing::randomIndices;
using testing::randomTensor;
using testing::sumTolerance;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

Variable leaf(const Shape& shape, uint64_t seed) { return Variable(randomTensor(shape, seed), true); }

// Naive reference: y[r, o] = sum_i x[r, i] w[o, i] + b[o].
std::vector<double> naiveLinear(const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  std::vector<double> xv = x.toVector<double>(), wv = w.toVector<double>(), y(rows * out);
  std::vector<double> bv = b ? b->toVector<double>() : std::vector<double>(out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bv[o];
      for (int64_t i = 0; i < in; ++i) s += xv[r * in + i] * wv[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

void expectNear(const std::vector<double>& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

TEST(Linear, ForwardMatchesNaiveLoops) {
  Tensor x = randomTensor({2, 3, 4}, 1), w = randomTensor({5, 4}, 2), b = randomTensor({5}, 3);
  Variable y = ops::linear(Variable(x), Variable(w), Variable(b));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  expectNear(y.data().toVector<double>(), naiveLinear(x, w, &b), 1e-12);
  Variable noBias = ops::linear(Variable(x), Variable(w), Variable());
  expectNear(noBias.data().toVector<double>(), naiveLinear(x, w, nullptr), 1e-12);
}

TEST(Linear, GradcheckWithAndWithoutBias) {
  for (const Shape& xShape : {Shape{4, 3}, Shape{2, 3, 3}}) {
    SCOPED_TRACE(shapeString(xShape));
    EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::linear(in[0], in[1], in[2]); },
                                {leaf(xShape, 4), leaf({5, 3}, 5), leaf({5}, 6)}));
    EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::linear(in[0], in[1], Variable()); },
                                {leaf(xShape, 7), leaf({5, 3}, 8)}));
  }
}

// On the CPU (and for fp32/fp64 anywhere) geluMlp is linear, gelu, linear: its gradients pass gradcheck and
// its output is the three ops' to the bit.
TEST(GeluMlp, GradcheckAndEqualsTheThreeOps) {
  EXPECT_TRUE(
      gradcheckPasses([](const std::vector<Variable>& in) { return ops::geluMlp(in[0], in[1], in[2], in[3], in[4]); },
                      {leaf({2, 3, 4}, 20), leaf({8, 4}, 21), leaf({8}, 22), leaf({3, 8}, 23), leaf({3}, 24)}));
  const Variable x(randomTensor({5, 4}, 25)), w1(randomTensor({8, 4}, 26)), b1(randomTensor({8}, 27)),
      w2(randomTensor({3, 8}, 28)), b2(randomTensor({3}, 29));
  EXPECT_EQ(ops::geluMlp(x, w1, b1, w2, b2).data().toVector<double>(),
            ops::linear(ops::gelu(ops::linear(x, w1, b1)), w2, b2).data().toVector<double>());
}

// residual + linear in one op (the GEMM adds the residual): float64 gradcheck over all four inputs, and the
// output and every gradient within rounding of add(residual, linear(...)), for linear, geluMlp and
// swigluLinear (the residual's gradient is the output's, exactly).
TEST(Linear, ResidualFormsMatchAnAddAfterTheOp) {
  const std::vector<std::pair<std::string, std::pair<Fn, Fn>>> forms = {
      {"linear",
       {[](const std::vector<Variable>& in) { return ops::linear(in[0], in[1], in[2], in[3]); },
        [](const std::vector<Variable>& in) { return ops::add(in[3], ops::linear(in[0], in[1], in[2])); }}},
      {"geluMlp",
       {[](const std::vector<Variable>& in) { return ops::geluMlp(in[0], in[1], in[2], in[4], in[5], in[3]); },
        [](const std::vector<Variable>& in) {
          return ops::add(in[3], ops::geluMlp(in[0], in[1], in[2], in[4], in[5]));
        }}},
      {"swigluLinear",
       {[](const std::vector<Variable>& in) { return ops::swigluLinear(in[0], in[6], in[4], in[3]); },
        [](const std::vector<Variable>& in) { return ops::add(in[3], ops::swigluLinear(in[0], in[6], in[4])); }}},
  };
  for (const auto& [name, fns] : forms) {
    SCOPED_TRACE(name);
    // x (2, 3, 8), w (8, 8), b (8), residual (2, 3, 5), w2 (5, 8), b2 (5), up (2, 3, 8); each form uses its own.
    const bool mlp = name == "geluMlp", swiglu = name == "swigluLinear";
    const std::vector<bool> used = swiglu ? std::vector<bool>{true, false, false, true, true, false, true}
                                   : mlp  ? std::vector<bool>{true, true, true, true, true, true, false}
                                          : std::vector<bool>{true, true, true, true, false, false, false};
    const auto inputs = [&] {
      const std::vector<Shape> shapes = {{2, 3, 8}, {8, 8}, {8}, {2, 3, mlp || swiglu ? 5 : 8}, {5, 8}, {5}, {2, 3, 8}};
      std::vector<Variable> v;
      for (size_t i = 0; i < shapes.size(); ++i) v.emplace_back(randomTensor(shapes[i], 40 + i), used[i]);
      return v;
    };
    std::vector<Variable> fused = inputs(), added = inputs();
    const Fn& f = fns.first;
    Variable y1 = f(fused), y2 = fns.second(added);
    const Tensor g = randomTensor(y1.shape(), 47);
    y1.backward(g);
    y2.backward(g);
    expectNear(y1.data().toVector<double>(), y2.data().toVector<double>(), 1e-14);
    for (size_t i = 0; i < fused.size(); ++i) {
      SCOPED_TRACE("input " + std::to_string(i));
      ASSERT_EQ(fused[i].grad().defined(), added[i].grad().defined());
      if (fused[i].grad().defined())
        expectNear(fused[i].grad().toVector<double>(), added[i].grad().toVector<double>(), 1e-14);
    }
    EXPECT_EQ(fused[3].grad().toVector<double>(), g.toVector<double>());  // the residual's: the output's
    EXPECT_TRUE(gradcheckPasses(f, inputs()));
  }
  // A residual of another shape or dtype is an error naming the op.
  Variable x = leaf({3, 4}, 48), w = leaf({5, 4}, 49);
  EXPECT_THROW(ops::linear(x, w, Variable(), leaf({3, 4}, 50)), Error);
  EXPECT_THROW(ops::linear(x, w, Variable(), Variable(randomTensor({3, 5}, 51).toDType(DType::F32))), Error);
}

TEST(Linear, SkipsGradientsNobodyWants) {
  Variable x(randomTensor({3, 2}, 9)), w = leaf({4, 2}, 10), b(randomTensor({4}, 11));
  ops::sum(ops::linear(x, w, b)).backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  EXPECT_EQ(w.grad().shape(), (Shape{4, 2}));
}

TEST(Linear, RejectsMismatchedShapes) {
  Variable x(randomTensor({3, 2}, 12)), w(randomTensor({4, 3}, 13)), b(randomTensor({5}, 14));
  EXPECT_THROW(ops::linear(x, w, Variable()), Error);
  EXPECT_THROW(ops::linear(x, Variable(randomTensor({4, 2}, 15)), b), Error);
}

TEST(Matmul, ForwardMatchesNaiveLoops) {
  const int64_t B = 3, M = 2, K = 4, N = 5;
  Tensor a = randomTensor({B, M, K}, 16), b = randomTensor({B, K, N}, 17);
  std::vector<double> av = a.toVector<double>(), bv = b.toVector<double>(), expected(B * M * N, 0.0);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          expected[(i * M + m) * N + n] += av[(i * M + m) * K + k] * bv[(i * K + k) * N + n];
  Variable c = ops::matmul(Variable(a), Variable(b));
  EXPECT_EQ(c.shape(), (Shape{B, M, N}));
  expectNear(c.data().toVector<double>(), expected, 1e-12);
}

TEST(Matmul, GradcheckBatchedAndPlain) {
  const Fn f = [](const std::vector<Variable>& in) { return ops::matmul(in[0], in[1]); };
  EXPECT_TRUE(gradcheckPasses(f, {leaf({2, 3, 4, 5}, 18), leaf({2, 3, 5, 2}, 19)}));
  EXPECT_TRUE(gradcheckPasses(f, {leaf({3, 4}, 20), leaf({4, 6}, 21)}));
}

TEST(Matmul, RejectsMismatchedShapes) {
  Variable a(randomTensor({2, 3, 4}, 22));
  EXPECT_THROW(ops::matmul(a, Variable(randomTensor({2, 5, 2}, 23))), Error);  // K differs
  EXPECT_THROW(ops::matmul(a, Variable(randomTensor({3, 4, 2}, 24))), Error);  // batch differs
}

TEST(Transpose, SwapsTheLastTwoDimensions) {
  const int64_t B = 2, M = 3, N = 4;
  Tensor x = randomTensor({B, M, N}, 25);
  Variable y = ops::transpose(Variable(x));
  EXPECT_EQ(y.shape(), (Shape{B, N, M}));
  std::vector<double> xv = x.toVector<double>(), yv = y.data().toVector<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) EXPECT_EQ(yv[(b * N + n) * M + m], xv[(b * M + m) * N + n]);
  EXPECT_TRUE(
      gradcheckPasses([](const std::vector<Variable>& in) { return ops::transpose(in[0]); }, {leaf({B, M, N}, 26)}));
}

TEST(CrossEntropy, UniformLogitsGiveLogV) {
  const int64_t N = 3, V = 7;
  Variable logits(Tensor::fromVector(std::vector<double>(N * V, 2.5), {N, V}), true);
  Variable loss = ops::crossEntropy(logits, Tensor::fromVector<int32_t>({0, 6, 3}, {N}));
  EXPECT_EQ(loss.shape(), (Shape{1}));
  EXPECT_NEAR(loss.data().toVector<double>()[0], std::log(double(V)), 1e-14);
}

TEST(CrossEntropy, HandComputedValueAndGradient) {
  // Row 0: logits [0, ln 3], target 0: softmax [1/4, 3/4], loss ln 4. Row 1: [ln 3, 0], target 0: loss
  // ln(4/3). Mean ln(4) / 2 + ln(4/3) / 2; dlogits = (softmax - onehot) / N.
  const double l3 = std::log(3.0);
  Variable logits(Tensor::fromVector<double>({0, l3, l3, 0}, {2, 2}), true);
  Variable loss = ops::crossEntropy(logits, Tensor::fromVector<int32_t>({0, 0}, {2}));
  EXPECT_NEAR(loss.data().toVector<double>()[0], 0.5 * (std::log(4.0) + std::log(4.0 / 3.0)), 1e-14);
  loss.backward();
  expectNear(logits.grad().toVector<double>(), {(0.25 - 1) / 2, 0.75 / 2, (0.75 - 1) / 2, 0.25 / 2}, 1e-14);
}

TEST(CrossEntropy, LargeLogitsStayFinite) {
  // Without subtracting the row maximum, exp(1e4) overflows. Loss = 1 + ln(1 + e^-1 + e^-2).
  const double expected = 1 + std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  for (DType dtype : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtypeName(dtype));
    Tensor values = Tensor::fromVector<double>({1e4, 1e4 - 1, 1e4 - 2}, {1, 3}).toDType(dtype);
    Variable logits(values, true);
    Variable loss = ops::crossEntropy(logits, Tensor::fromVector<int32_t>({1}, {1}));
    // float32 stores the row's logsumexp near 1e4, whose spacing is about 1e-3.
    EXPECT_NEAR(loss.data().toDType(DType::F64).toVector<double>()[0], expected, dtype == DType::F32 ? 2e-3 : 1e-10);
    loss.backward();
    for (double g : logits.grad().toDType(DType::F64).toVector<double>()) EXPECT_TRUE(std::isfinite(g));
  }
}

TEST(CrossEntropy, Gradcheck) {
  Tensor targets = randomIndices({5}, 7, 27);
  EXPECT_TRUE(gradcheckPasses([targets](const std::vector<Variable>& in) { return ops::crossEntropy(in[0], targets); },
                              {Variable(randomTensor({5, 7}, 28, -3.0, 3.0), true)}));
}

TEST(CrossEntropy, RejectsOutOfRangeTargetsAndBadShapes) {
  Variable logits(randomTensor({2, 4}, 29), true);
  EXPECT_THROW(ops::crossEntropy(logits, Tensor::fromVector<int32_t>({0, 4}, {2})), Error);
  EXPECT_THROW(ops::crossEntropy(logits, Tensor::fromVector<int32_t>({-1, 0}, {2})), Error);
  EXPECT_THROW(ops::crossEntropy(logits, Tensor::fromVector<int32_t>({0}, {1})), Error);
  EXPECT_THROW(ops::crossEntropy(logits, randomTensor({2}, 30)), Error);  // float targets
}

// ---- CUDA against the CPU twin ----

// The upstream gradients of this file's device comparisons lie in [0.5, 1.5).
constexpr double kUpstreamLo = 0.5, kUpstreamHi = 1.5;

// cuBLAS and Eigen block a sum of K products differently (split-K, panels), with errors near sqrt(K) eps in
// practice; the bounds below count every product twice, sumTolerance(dtype, 2 K) = 4 (K + 2) eps, a wide
// margin, while a real defect (wrong transpose, stride or batch) is off by O(1).
using CudaVsCpu = testing::CudaVsCpuTest;

TEST_P(CudaVsCpu, Linear) {
  const DType dtype = GetParam();
  // rows = 6 * 20, in = 48, out = 33: dx sums over out, dW over rows, y over in.
  const Fn withBias = [](const std::vector<Variable>& in) { return ops::linear(in[0], in[1], in[2]); };
  expectClose(
      compareDevices(withBias, {randomTensor({6, 20, 48}, 32), randomTensor({33, 48}, 33), randomTensor({33}, 34)},
                     dtype, kUpstreamLo, kUpstreamHi),
      sumTolerance(dtype, 2 * 6 * 20));
  const Fn noBias = [](const std::vector<Variable>& in) { return ops::linear(in[0], in[1], Variable()); };
  expectClose(
      compareDevices(noBias, {randomTensor({37, 48}, 35), randomTensor({33, 48}, 36)}, dtype, kUpstreamLo, kUpstreamHi),
      sumTolerance(dtype, 2 * 48));
}

TEST_P(CudaVsCpu, LinearWithResidual) {
  // The residual copied into the output and added by the GEMM (beta = 1) on both devices.
  const DType dtype = GetParam();
  const Fn f = [](const std::vector<Variable>& in) { return ops::linear(in[0], in[1], in[2], in[3]); };
  expectClose(compareDevices(f,
                             {randomTensor({6, 20, 48}, 37), randomTensor({33, 48}, 38), randomTensor({33}, 39),
                              randomTensor({6, 20, 33}, 40)},
                             dtype, kUpstreamLo, kUpstreamHi),
              sumTolerance(dtype, 2 * 6 * 20));
}

TEST_P(CudaVsCpu, MatmulBatched) {
  const Fn f = [](const std::vector<Variable>& in) { return ops::matmul(in[0], in[1]); };
  expectClose(compareDevices(f, {randomTensor({3, 4, 17, 65}, 37), randomTensor({3, 4, 65, 23}, 38)}, GetParam(),
                             kUpstreamLo, kUpstreamHi),
              sumTolerance(GetParam(), 2 * 65));
}

TEST_P(CudaVsCpu, TransposeIsExact) {
  const Fn f = [](const std::vector<Variable>& in) { return ops::transpose(in[0]); };
  const DeviceComparison c = compareDevices(f, {randomTensor({3, 45, 70}, 39)}, GetParam(), kUpstreamLo, kUpstreamHi);
  EXPECT_EQ(c.output, 0.0);
  EXPECT_EQ(c.grads[0], 0.0);
}

TEST_P(CudaVsCpu, CrossEntropy) {
  // V = 1000 spans several block-strides; logits in [-8, 8] make the softmax far from uniform.
  const int64_t N = 37, V = 1000;
  Tensor targets = randomIndices({N}, V, 40);
  const Fn f = [targets](const std::vector<Variable>& in) {
    return ops::crossEntropy(in[0], targets.to(in[0].device()));
  };
  expectClose(compareDevices(f, {randomTensor({N, V}, 41, -8.0, 8.0)}, GetParam(), kUpstreamLo, kUpstreamHi),
              sumTolerance(GetParam(), 2 * V));
}

TEST_P(CudaVsCpu, OutOfRangeTargetGivesNaN) {
  Variable logits(randomTensor({2, 5}, 42, -1.0, 1.0, GetParam()).to(Device::CUDA));
  Variable loss = ops::crossEntropy(logits, Tensor::fromVector<int32_t>({1, 5}, {2}, Device::CUDA));
  EXPECT_TRUE(std::isnan(loss.data().toDType(DType::F64).toVector<double>()[0]));
}

TEST_P(CudaVsCpu, BitwiseReproducible) {
  // Same inputs, same bits: reductions in a fixed order, no floating-point atomics.
  Tensor targets = randomIndices({64}, 300, 43).to(Device::CUDA);
  Tensor x = randomTensor({64, 96}, 44, -1.0, 1.0, GetParam()).to(Device::CUDA);
  Tensor w = randomTensor({300, 96}, 45, -1.0, 1.0, GetParam()).to(Device::CUDA);
  Tensor b = randomTensor({300}, 46, -1.0, 1.0, GetParam()).to(Device::CUDA);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    Variable wv(w.clone(), true), bv(b.clone(), true);
    Variable loss = ops::crossEntropy(ops::linear(Variable(x), wv, bv), targets);
    loss.backward();
    std::vector<double> bits = loss.data().toDType(DType::F64).toVector<double>();
    for (const Tensor& t : {wv.grad(), bv.grad()}) {
      std::vector<double> v = t.toDType(DType::F64).toVector<double>();
      bits.insert(bits.end(), v.begin(), v.end());
    }
    runs.push_back(bits);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(TiledGemm, MatchesCpuTwin) {
  MINIDP_SKIP_WITHOUT_CUDA();
  // Edges of the 128 x 128 x 16 tiling, K = 0, and both copy widths (4-byte when K or N % 4 != 0).
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1},      {5, 3, 0},       {128, 128, 16}, {129, 130, 17},
                                                     {200, 72, 300}, {64, 256, 1000}, {257, 131, 64}};
  for (const auto& [M, N, K] : sizes) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
    Tensor a = randomTensor({M, K}, 47, -1.0, 1.0, DType::F32), b = randomTensor({K, N}, 48, -1.0, 1.0, DType::F32);
    Tensor expected = Tensor::empty({M, N}, DType::F32, Device::CPU);
    kernels::cpu::gemm<float>(false, false, M, N, K, 1.0f, a.data<float>(), 0, b.data<float>(), 0, 0.0f,
                              expected.data<float>(), 0, 1);
    Tensor ad = a.to(Device::CUDA), bd = b.to(Device::CUDA);
    Tensor c = Tensor::empty({M, N}, DType::F32, Device::CUDA);
    MINIDP_ON_CUDA(kernels::cuda::tiledGemm(M, N, K, ad.data<float>(), bd.data<float>(), c.data<float>(),
                                            runtime::computeStream()));
    std::vector<float> got = c.toVector<float>(), want = expected.toVector<float>();
    // Each output sums K products of magnitude <= 1; two summation orders differ in practice by about
    // K eps (sqrt(K) steps of sqrt(K)-sized partial sums). A wrong tile or missed bound is off by O(1).
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 4.0 * (K + 1) * 6e-8) << "element " << i;
  }
}

// The forward that writes the gradient over the logits (softmaxXentForwardGradient) against the forward, then
// the backward with an upstream gradient of 1, on the same logits: the loss, the logsumexp and the gradient
// equal to the bit (every thread of the forward holds the logsumexp thread 0 stores, the one the backward
// reads), and the padding past V left as it was. Rows of up to 53248 bf16 (26624 fp32) classes are held in
// shared memory between the kernel's two phases; 60000 bf16 and 30000 fp32 classes are read twice. Packed odd
// rows (ld = V) start at every offset from a 16-byte boundary. A defect both kernels shared is caught against
// float64: each row sums to 0, its absolute values to 2 (1 - p_target) / N, and the target's element is
// (p_target - 1) / N.
template <typename T>
void expectForwardGradientEqualsForwardThenBackward(DType dtype, int64_t N, int64_t V, int64_t ld) {
  SCOPED_TRACE(::testing::Message() << dtypeName(dtype) << " N=" << N << " V=" << V << " ld=" << ld);
  using A = AccumOf<T>;
  const DType accum = dtype == DType::F64 ? DType::F64 : DType::F32;
  const auto f64 = [](const Tensor& t) { return t.to(Device::CPU).toDType(DType::F64).toVector<double>(); };
  const Tensor logits = randomTensor({N, ld}, 60 + V, -8.0, 8.0, dtype).to(Device::CUDA);
  const Tensor targets = randomIndices({N}, int32_t(V), 61);
  const Tensor deviceTargets = targets.to(Device::CUDA);
  const Tensor one = Tensor::fromVector<A>({A(1)}, {1}, Device::CUDA);
  Tensor loss = Tensor::empty({N}, accum, Device::CUDA), lse = Tensor::empty({N}, accum, Device::CUDA);
  Tensor dlogits = logits.clone();  // columns past V keep the logits' values
  MINIDP_ON_CUDA(kernels::cuda::softmaxXentForward<T>(logits.data<T>(), deviceTargets.data<int32_t>(), loss.data<A>(),
                                                      lse.data<A>(), N, V, ld, runtime::computeStream()));
  MINIDP_ON_CUDA(kernels::cuda::softmaxXentBackward<T>(logits.data<T>(), deviceTargets.data<int32_t>(), lse.data<A>(),
                                                       one.data<A>(), dlogits.data<T>(), N, V, ld,
                                                       runtime::computeStream()));
  Tensor fused = logits.clone();
  Tensor fusedLoss = Tensor::empty({N}, accum, Device::CUDA), fusedLse = Tensor::empty({N}, accum, Device::CUDA);
  MINIDP_ON_CUDA(kernels::cuda::softmaxXentForwardGradient<T>(fused.data<T>(), deviceTargets.data<int32_t>(),
                                                              fusedLoss.data<A>(), fusedLse.data<A>(), N, V, ld,
                                                              runtime::computeStream()));
  EXPECT_EQ(f64(fusedLoss), f64(loss));
  EXPECT_EQ(f64(fusedLse), f64(lse));
  const std::vector<double> got = f64(fused), want = f64(dlogits), x = f64(logits), l = f64(lse);
  int64_t differing = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      ++differing;
      if (first < 0) first = int64_t(i);
    }
  }
  if (differing > 0) {
    ADD_FAILURE() << differing << " gradient elements differ; the first at row " << first / ld << ", column "
                  << first % ld << ": " << std::hexfloat << got[first] << " against " << want[first] << " (logit "
                  << x[first] << ", logsumexp " << l[first / ld] << ")" << std::defaultfloat;
  }
  // Tolerances: each stored element rounds (epsT), exp and the sums add a few units of the accumulator
  // (epsA), and a logsumexp off by half a unit of itself scales every probability by that much.
  const double epsT = dtype == DType::BF16 ? 0.0078125 : dtype == DType::F32 ? 1.2e-7 : 2.3e-16;
  const double epsA = dtype == DType::F64 ? 2.3e-16 : 1.2e-7;
  const std::vector<int32_t> t = targets.toVector<int32_t>();
  for (int64_t r = 0; r < N; ++r) {
    const double pt = std::exp(x[r * ld + t[r]] - l[r]), relative = epsT + epsA * (8.0 + std::fabs(l[r]));
    double sum = 0.0, mass = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      sum += got[r * ld + j];
      mass += std::fabs(got[r * ld + j]);
    }
    ASSERT_NEAR(sum * double(N), 0.0, 4.0 * relative * mass * double(N)) << "row " << r;
    ASSERT_NEAR(mass * double(N), 2.0 * (1.0 - pt), 4.0 * relative * 2.0) << "row " << r;
    ASSERT_NEAR(got[r * ld + t[r]] * double(N), pt - 1.0, 4.0 * relative) << "row " << r << ", target " << t[r];
  }
}

TEST(CrossEntropyCuda, ForwardWithGradientEqualsForwardThenBackward) {
  MINIDP_SKIP_WITHOUT_CUDA();
  expectForwardGradientEqualsForwardThenBackward<bf16>(DType::BF16, 37, 50304, 50304);  // held, GPT-2's padded V
  expectForwardGradientEqualsForwardThenBackward<bf16>(DType::BF16, 19, 50257, 50257);  // held, rows at all offsets
  expectForwardGradientEqualsForwardThenBackward<bf16>(DType::BF16, 11, 60000, 60000);  // read twice
  expectForwardGradientEqualsForwardThenBackward<bf16>(DType::BF16, 9, 1000, 1024);     // held, padded rows
  expectForwardGradientEqualsForwardThenBackward<float>(DType::F32, 23, 1001, 1003);
  expectForwardGradientEqualsForwardThenBackward<float>(DType::F32, 7, 26624, 26624);  // the largest held row
  expectForwardGradientEqualsForwardThenBackward<float>(DType::F32, 5, 30000, 30000);  // read twice
  expectForwardGradientEqualsForwardThenBackward<double>(DType::F64, 13, 777, 777);
}

TEST(CrossEntropyCuda, ForwardWithGradientOutOfRangeTargetGivesNaN) {
  MINIDP_SKIP_WITHOUT_CUDA();
  // Row 1's target is V: its loss and gradient are NaN; rows 0 and 2 are not touched by it.
  const int64_t N = 3, V = 100;
  Tensor logits = randomTensor({N, V}, 62, -1.0, 1.0, DType::F32).to(Device::CUDA);
  const Tensor targets = Tensor::fromVector<int32_t>({5, int32_t(V), 7}, {N}, Device::CUDA);
  Tensor loss = Tensor::empty({N}, DType::F32, Device::CUDA), lse = Tensor::empty({N}, DType::F32, Device::CUDA);
  MINIDP_ON_CUDA(kernels::cuda::softmaxXentForwardGradient<float>(logits.data<float>(), targets.data<int32_t>(),
                                                                  loss.data<float>(), lse.data<float>(), N, V, V,
                                                                  runtime::computeStream()));
  const std::vector<float> l = loss.toVector<float>(), g = logits.to(Device::CPU).toVector<float>();
  EXPECT_FALSE(std::isnan(l[0]));
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_FALSE(std::isnan(l[2]));
  for (int64_t j = 0; j < V; ++j) {
    EXPECT_TRUE(std::isnan(g[V + j])) << "column " << j;
    EXPECT_FALSE(std::isnan(g[j]) || std::isnan(g[2 * V + j])) << "column " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

}  // namespace
}  // namespace minidp
