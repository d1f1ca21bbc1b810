// The ops a user reaches for beside the layers: softmax and log-softmax over the last dimension, max, min and
// argmax along a dimension, permute, expand and transpose. Forward against float64 references computed here,
// every backward against float64 finite differences, the errors, CUDA against the CPU twin in float32 and
// float64, and bf16 on CUDA against the fp32 run (tests/ops/bf16_compare.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "tests/ops/bf16_compare.h"

namespace minidp {
namespace {

using testing::bf16Exact;
using testing::compareBf16;
using testing::compareDevices;
using testing::expectWithin;
using testing::gradcheckPasses;
using testing::kBf16Round;
using testing::kExact;
using testing::kOneRounding;
using testing::randomTensor;
using testing::roundingEps;
using testing::sumTolerance;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

Variable leaf(const Tensor& t) { return Variable(t, true); }

// The one-line error `f` throws ("no error" when it throws none).
std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void expectMentions(const std::string& what, const std::vector<std::string>& words) {
  for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

// ---- softmax ----

// softmax (or log-softmax) of each row of a (rows, C) float64 vector, straight from the definition.
std::vector<double> softmaxReference(const std::vector<double>& x, int64_t C, bool log) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / C; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(x[r * C + c]);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = log ? x[r * C + c] - std::log(sum) : std::exp(x[r * C + c]) / sum;
  }
  return y;
}

TEST(PublicOps, SoftmaxAndLogSoftmaxMatchTheDefinition) {
  const Tensor x = randomTensor({2, 3, 7}, 1, -3.0, 3.0);
  const std::vector<double> v = x.toVector<double>();
  for (bool log : {false, true}) {
    const Variable y = log ? ops::logSoftmax(Variable(x)) : ops::softmax(Variable(x));
    EXPECT_EQ(y.shape(), x.shape());
    const std::vector<double> got = y.data().toVector<double>(), want = softmaxReference(v, 7, log);
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-14) << (log ? "logSoftmax " : "softmax ") << i;
  }
}

TEST(PublicOps, SoftmaxSubtractsTheMaximum) {
  // exp(1000) overflows even double: only a max-subtracted softmax of x + 1000 is finite. Softmax and
  // log-softmax do not change under a shift, so the reference is the definition on the input less 1000
  // (exact in double for the dtype's rounded x + 1000).
  for (DType dtype : {DType::F32, DType::F64}) {
    std::vector<double> big = randomTensor({4, 9}, 2, -3.0, 3.0).toVector<double>();
    for (double& b : big) b += 1000;
    const Tensor x = Tensor::fromVector(big, {4, 9}).toDType(dtype);
    std::vector<double> small = x.toDType(DType::F64).toVector<double>();
    for (double& b : small) b -= 1000;
    for (bool log : {false, true}) {
      const Variable y = log ? ops::logSoftmax(Variable(x)) : ops::softmax(Variable(x));
      const std::vector<double> got = y.data().toDType(DType::F64).toVector<double>();
      const std::vector<double> want = softmaxReference(small, 9, log);
      // Softmax: a few roundings of values at most 1. Log-softmax: x - (max + log(sum)) rounds a number near
      // 1000 once.
      const double tolerance = (log ? 1e3 : 1.0) * 16 * roundingEps(dtype);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << dtypeName(dtype);
        EXPECT_NEAR(got[i], want[i], tolerance) << dtypeName(dtype) << (log ? " logSoftmax" : " softmax");
      }
    }
  }
}

TEST(PublicOps, SoftmaxGradcheck) {
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::softmax(in[0]); },
                              {leaf(randomTensor({3, 4, 7}, 3, -2.0, 2.0))}));
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::logSoftmax(in[0]); },
                              {leaf(randomTensor({3, 4, 7}, 4, -2.0, 2.0))}));
  // One column: softmax is the constant 1, its gradient zero.
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::softmax(in[0]); },
                              {leaf(randomTensor({5, 1}, 5))}));
}

// ---- max, min, argmax ----

// The extreme of x (outer, D, inner) along D, and its first position, straight from the definition.
struct Extreme {
  std::vector<double> values;
  std::vector<int32_t> indices;
};
Extreme extremeReference(const std::vector<double>& x, int64_t outer, int64_t D, int64_t inner, bool largest) {
  Extreme e;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int32_t best = 0;
      for (int64_t d = 0; d < D; ++d) {
        const double v = x[(o * D + d) * inner + i], b = x[(o * D + best) * inner + i];
        if (largest ? v > b : v < b) best = static_cast<int32_t>(d);
      }
      e.indices.push_back(best);
      e.values.push_back(x[(o * D + best) * inner + i]);
    }
  }
  return e;
}

TEST(PublicOps, MaxMinAndArgmaxAlongEachDimension) {
  const Shape shape{3, 4, 5};
  const Tensor x = randomTensor(shape, 6);
  const std::vector<double> v = x.toVector<double>();
  for (int dim : {0, 1, 2, -1}) {
    const int d = dim < 0 ? dim + 3 : dim;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; ++i) outer *= shape[i];
    for (int i = d + 1; i < 3; ++i) inner *= shape[i];
    for (bool keepdim : {false, true}) {
      Shape reduced = shape;
      if (keepdim) {
        reduced[d] = 1;
      } else {
        reduced.erase(reduced.begin() + d);
      }
      for (bool largest : {true, false}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + (largest ? " max" : " min") + (keepdim ? " keepdim" : ""));
        const Variable y = largest ? ops::max(Variable(x), dim, keepdim) : ops::min(Variable(x), dim, keepdim);
        const Extreme want = extremeReference(v, outer, shape[d], inner, largest);
        EXPECT_EQ(y.shape(), reduced);
        EXPECT_EQ(y.data().toVector<double>(), want.values);
        if (largest) {
          const Tensor at = ops::argmax(x, dim, keepdim);
          EXPECT_EQ(at.dtype(), DType::I32);
          EXPECT_EQ(at.shape(), reduced);
          EXPECT_EQ(at.toVector<int32_t>(), want.indices);
        }
      }
    }
  }
}

TEST(PublicOps, MaxTakesTheFirstOfEqualEntriesAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = Tensor::fromVector<double>({1, 3, 3, 2, /**/ 5, nan, 7, nan, /**/ -1, -1, -1, -1}, {3, 4});
  EXPECT_EQ(ops::argmax(x, 1).toVector<int32_t>(), (std::vector<int32_t>{1, 1, 0}));
  const std::vector<double> mins = ops::min(Variable(x), 1).data().toVector<double>();
  EXPECT_EQ(mins[0], 1);
  EXPECT_TRUE(std::isnan(mins[1]));
  EXPECT_EQ(mins[2], -1);
  // The gradient goes to the chosen entry only: the first 3 of row 0, the first -1 of row 2.
  Variable leafX(x, true);
  ops::max(leafX, 1).backward(Tensor::fromVector<double>({10, 20, 30}, {3}));
  EXPECT_EQ(leafX.grad().toVector<double>(), (std::vector<double>{0, 10, 0, 0, 0, 20, 0, 0, 30, 0, 0, 0}));
}

TEST(PublicOps, MaxMinGradcheck) {
  // Random values are distinct, so a step of 1e-6 never changes which entry is the extreme.
  for (int dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim));
      EXPECT_TRUE(gradcheckPasses([=](const std::vector<Variable>& in) { return ops::max(in[0], dim, keepdim); },
                                  {leaf(randomTensor({3, 4, 5}, 7))}));
      EXPECT_TRUE(gradcheckPasses([=](const std::vector<Variable>& in) { return ops::min(in[0], dim, keepdim); },
                                  {leaf(randomTensor({3, 4, 5}, 8))}));
    }
  }
}

// ---- permute, expand, transpose ----

TEST(PublicOps, PermuteMovesEachEntry) {
  const Shape shape{2, 3, 4, 5};
  const Tensor x = randomTensor(shape, 9);
  const std::vector<double> v = x.toVector<double>();
  const std::vector<int> dims{2, 0, 3, 1};
  const Variable y = ops::permute(Variable(x), dims);
  EXPECT_EQ(y.shape(), (Shape{4, 2, 5, 3}));
  const std::vector<double> got = y.data().toVector<double>();
  size_t k = 0;
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t d = 0; d < 5; ++d)
        for (int64_t b = 0; b < 3; ++b) EXPECT_EQ(got[k++], v[((a * 3 + b) * 4 + c) * 5 + d]);
  // Swapping the last two dimensions is transpose.
  EXPECT_EQ(ops::permute(Variable(x), {0, 1, 3, 2}).data().toVector<double>(),
            ops::transpose(Variable(x)).data().toVector<double>());
  EXPECT_TRUE(
      gradcheckPasses([&dims](const std::vector<Variable>& in) { return ops::permute(in[0], dims); }, {leaf(x)}));
}

TEST(PublicOps, ExpandRepeatsAndItsGradientSums) {
  // (3, 1, 4) -> (2, 3, 5, 4): a new leading dimension and a repeated one; -1 keeps an extent.
  const Tensor x = randomTensor({3, 1, 4}, 10);
  const std::vector<double> v = x.toVector<double>();
  const Variable y = ops::expand(Variable(x), {2, -1, 5, 4});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5, 4}));
  const std::vector<double> got = y.data().toVector<double>();
  size_t k = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t r = 0; r < 5; ++r)
        for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(got[k++], v[a * 4 + c]);
  // The gradient of a ones upstream counts the copies: 2 * 5 per entry.
  Variable leafX(x, true);
  ops::expand(leafX, {2, 3, 5, 4}).backward(Tensor::fromVector(std::vector<double>(120, 1.0), {2, 3, 5, 4}));
  EXPECT_EQ(leafX.grad().toVector<double>(), std::vector<double>(12, 10.0));
  for (const Shape& target : {Shape{2, 3, 5, 4}, Shape{3, 6, 4}, Shape{3, 1, 4}}) {
    EXPECT_TRUE(
        gradcheckPasses([&target](const std::vector<Variable>& in) { return ops::expand(in[0], target); }, {leaf(x)}))
        << shapeString(target);
  }
}

TEST(PublicOps, ErrorsNameTheOpAndTheCause) {
  const Variable x(randomTensor({2, 3}, 11));
  expectMentions(errorOf([&] { ops::permute(x, {0, 0}); }), {"permute", "permutation"});
  expectMentions(errorOf([&] { ops::permute(x, {1, 0, 2}); }), {"permute", "permutation"});
  expectMentions(errorOf([&] { ops::permute(x, {}); }), {"permute", "permutation"});
  expectMentions(errorOf([&] { ops::permute(x, {0, 2}); }), {"permute", "permutation"});
  expectMentions(errorOf([&] { ops::expand(x, {2, 4}); }), {"expand", "[2, 3]", "[2, 4]"});
  expectMentions(errorOf([&] { ops::expand(x, {3}); }), {"expand", "fewer dimensions"});
  expectMentions(errorOf([&] { ops::max(x, 2); }), {"max", "dim 2"});
  expectMentions(errorOf([&] {
                   ops::softmax(Variable(Tensor::zeros({3, 0}, DType::F64, Device::CPU)));
                 }),
                 {"softmax", "last dimension"});
  // bf16 runs on CUDA only; integers nowhere.
  const Variable bf16Cpu(randomTensor({2, 2}, 12).toDType(DType::BF16));
  for (const auto& [name, run] :
       std::vector<std::pair<std::string, std::function<void()>>>{{"transpose", [&] { ops::transpose(bf16Cpu); }},
                                                                  {"permute",
                                                                   [&] {
                                                                     ops::permute(bf16Cpu, {1, 0});
                                                                   }},
                                                                  {"expand",
                                                                   [&] {
                                                                     ops::expand(bf16Cpu, {3, 2, 2});
                                                                   }},
                                                                  {"softmax", [&] { ops::softmax(bf16Cpu); }},
                                                                  {"max", [&] { ops::max(bf16Cpu, 0); }}}) {
    expectMentions(errorOf(run), {name, "BF16"});
  }
  expectMentions(errorOf([] { ops::argmax(Tensor::fromVector<int32_t>({1, 2}, {2}), 0); }), {"argmax", "I32"});
}

// ---- CUDA against the CPU twin ----

using PublicOpsCudaVsCpu = testing::CudaVsCpuTest;

TEST_P(PublicOpsCudaVsCpu, Softmax) {
  // C = 1000: more columns than the block's 256 threads; C = 13: fewer. The sums add in a tree on CUDA and in
  // order on the CPU (sumTolerance of C terms), expf is within 2 ulp, and the backward multiplies a sum into a
  // difference (y (dy - dot)) that may be smaller than the largest entry: 8 times the sum's bound.
  const DType dtype = GetParam();
  for (const Shape& shape : {Shape{3, 37, 1000}, Shape{5, 13}}) {
    const int64_t C = shape.back();
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(log ? "logSoftmax " : "softmax ") + shapeString(shape));
      const Fn f = [log](const std::vector<Variable>& in) {
        return log ? ops::logSoftmax(in[0]) : ops::softmax(in[0]);
      };
      expectClose(compareDevices(f, {randomTensor(shape, 20, -4.0, 4.0)}, dtype), 8 * sumTolerance(dtype, C));
    }
  }
}

TEST_P(PublicOpsCudaVsCpu, MaxMinArgmaxAreExact) {
  const DType dtype = GetParam();
  const Tensor x = randomTensor({6, 70, 33}, 21);
  for (int dim : {0, 1, 2}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    expectClose(compareDevices([dim](const std::vector<Variable>& in) { return ops::max(in[0], dim); }, {x}, dtype), 0);
    expectClose(
        compareDevices([dim](const std::vector<Variable>& in) { return ops::min(in[0], dim, true); }, {x}, dtype), 0);
    const Tensor t = x.toDType(dtype);
    EXPECT_EQ(ops::argmax(t.to(Device::CUDA), dim).to(Device::CPU).toVector<int32_t>(),
              ops::argmax(t, dim).toVector<int32_t>());
  }
}

TEST_P(PublicOpsCudaVsCpu, PermuteExpandTransposeAreExact) {
  // Copies; expand's backward adds each entry's copies in the same order on both devices.
  const DType dtype = GetParam();
  expectClose(compareDevices(
                  [](const std::vector<Variable>& in) {
                    return ops::permute(in[0], {3, 1, 0, 2});
                  },
                  {randomTensor({3, 5, 7, 40}, 22)}, dtype),
              0);
  expectClose(compareDevices(
                  [](const std::vector<Variable>& in) {
                    return ops::expand(in[0], {4, 3, 70, 33});
                  },
                  {randomTensor({3, 1, 33}, 23)}, dtype),
              0);
  expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::transpose(in[0]); },
                             {randomTensor({3, 70, 45}, 24)}, dtype),
              0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PublicOpsCudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

// ---- bf16 on CUDA against the fp32 run ----

using PublicOpsBf16 = testing::Bf16OnCudaTest;

TEST_F(PublicOpsBf16, SoftmaxRoundsOnceForwardAndReadsTheRoundedOutputBackward) {
  // Forward: the fp32 statistics of the same inputs, the output rounded once. Backward reads the output,
  // which the bf16 run holds rounded (up to 2^-9 relative): the dot product and y (dy - dot) move by about
  // that twice, and the result is rounded once more, so up to about 3 half-steps against the largest entry.
  for (const Shape& shape : {Shape{8, 125}, Shape{3, 37, 1000}}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(log ? "logSoftmax " : "softmax ") + shapeString(shape));
      const Fn f = [log](const std::vector<Variable>& in) {
        return log ? ops::logSoftmax(in[0]) : ops::softmax(in[0]);
      };
      expectWithin(compareBf16(f, {bf16Exact(shape, 30, -4.0, 4.0)}, {false}), kOneRounding, {4 * kBf16Round});
    }
  }
}

TEST_F(PublicOpsBf16, MaxMinPermuteTransposeAreExactExpandSumsOnce) {
  const Tensor x = bf16Exact({6, 70, 33}, 31);
  const std::vector<std::pair<std::string, Fn>> exact = {
      {"max", [](const std::vector<Variable>& in) { return ops::max(in[0], 1); }},
      {"min", [](const std::vector<Variable>& in) { return ops::min(in[0], -1, true); }},
      {"permute",
       [](const std::vector<Variable>& in) {
         return ops::permute(in[0], {2, 0, 1});
       }},
      {"transpose", [](const std::vector<Variable>& in) { return ops::transpose(in[0]); }},
  };
  for (const auto& [name, f] : exact) {
    SCOPED_TRACE(name);
    expectWithin(compareBf16(f, {x}, {false}), kExact, {kExact});
  }
  // expand's gradient sums 4 * 70 copies in fp32 in the fp32 run's order, rounded once.
  expectWithin(compareBf16(
                   [](const std::vector<Variable>& in) {
                     return ops::expand(in[0], {4, 6, 70, 33});
                   },
                   {bf16Exact({6, 1, 33}, 32)}, {false}),
               kExact, {kOneRounding});
  const Tensor t = x.toDType(DType::BF16).to(Device::CUDA);
  EXPECT_EQ(ops::argmax(t, 1).to(Device::CPU).toVector<int32_t>(),
            ops::argmax(x.toDType(DType::F32).to(Device::CUDA), 1).to(Device::CPU).toVector<int32_t>());
}

}  // namespace
}  // namespace minidp
