// Composable ops (framework/ops/composite.h): forward against std:: math in float64, every backward against
// float64 finite differences, RMSNorm and SwiGLU composed from them, the shape errors, an op with a CPU
// kernel only (OpKernels), and CUDA against the CPU twin in float32 and float64.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "framework/ops/op_kernels.h"
#include "framework/ops/ops.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"

namespace minidp {
namespace {

using testing::compareDevices;
using testing::gradcheckPasses;
using testing::randomIndices;
using testing::randomTensor;
using testing::roundingEps;
using testing::sumTolerance;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

Variable leaf(const Tensor& t) { return Variable(t, true); }

// (op, reference) of every unary op; inputs in [0.5, 2) keep sqrt, rsqrt and pow defined.
struct Unary {
  const char* name;
  std::function<Variable(const Variable&)> op;
  std::function<double(double)> reference;
};

std::vector<Unary> unaryOps() {
  return {
      {"neg", [](const Variable& x) { return ops::neg(x); }, [](double x) { return -x; }},
      {"exp", [](const Variable& x) { return ops::exp(x); }, [](double x) { return std::exp(x); }},
      {"sqrt", [](const Variable& x) { return ops::sqrt(x); }, [](double x) { return std::sqrt(x); }},
      {"rsqrt", [](const Variable& x) { return ops::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }},
      {"pow", [](const Variable& x) { return ops::pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }},
      {"addScalar", [](const Variable& x) { return ops::addScalar(x, 0.25); }, [](double x) { return x + 0.25; }},
      {"sigmoid", [](const Variable& x) { return ops::sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"silu", [](const Variable& x) { return ops::silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }},
  };
}

TEST(CompositeOps, UnaryForwardMatchesStdMath) {
  Tensor x = randomTensor({3, 7}, 1, 0.5, 2.0);
  const std::vector<double> v = x.toVector<double>();
  for (const Unary& u : unaryOps()) {
    const std::vector<double> y = u.op(Variable(x)).data().toVector<double>();
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(y[i], u.reference(v[i]), 1e-15 * (1 + std::abs(y[i]))) << u.name;
  }
}

TEST(CompositeOps, UnaryGradcheck) {
  for (const Unary& u : unaryOps()) {
    SCOPED_TRACE(u.name);
    EXPECT_TRUE(gradcheckPasses([&u](const std::vector<Variable>& in) { return u.op(in[0]); },
                                {leaf(randomTensor({3, 7}, 2, 0.5, 2.0))}));
  }
}

TEST(CompositeOps, SubAndDiv) {
  Tensor a = randomTensor({4, 5}, 3), b = randomTensor({4, 5}, 4, 0.5, 2.0);
  const std::vector<double> x = a.toVector<double>(), y = b.toVector<double>();
  const std::vector<double> d = ops::sub(Variable(a), Variable(b)).data().toVector<double>();
  const std::vector<double> q = ops::div(Variable(a), Variable(b)).data().toVector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(d[i], x[i] - y[i]);  // one rounding each: exact
    EXPECT_EQ(q[i], x[i] / y[i]);
  }
  EXPECT_TRUE(
      gradcheckPasses([](const std::vector<Variable>& in) { return ops::sub(in[0], in[1]); }, {leaf(a), leaf(b)}));
  EXPECT_TRUE(
      gradcheckPasses([](const std::vector<Variable>& in) { return ops::div(in[0], in[1]); }, {leaf(a), leaf(b)}));
}

TEST(CompositeOps, BroadcastForward) {
  Tensor x = randomTensor({2, 3, 4}, 5), col = randomTensor({4}, 6), row = randomTensor({2, 3, 1}, 7);
  const std::vector<double> v = x.toVector<double>(), c = col.toVector<double>(), r = row.toVector<double>();
  const std::vector<double> addCol = ops::addBroadcast(Variable(x), Variable(col)).data().toVector<double>();
  const std::vector<double> mulCol = ops::mulBroadcast(Variable(x), Variable(col)).data().toVector<double>();
  const std::vector<double> addRow = ops::addBroadcast(Variable(x), Variable(row)).data().toVector<double>();
  const std::vector<double> mulRow = ops::mulBroadcast(Variable(x), Variable(row)).data().toVector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(addCol[i], v[i] + c[i % 4]);
    EXPECT_EQ(mulCol[i], v[i] * c[i % 4]);
    EXPECT_EQ(addRow[i], v[i] + r[i / 4]);
    EXPECT_EQ(mulRow[i], v[i] * r[i / 4]);
  }
}

TEST(CompositeOps, BroadcastGradcheck) {
  Tensor x = randomTensor({2, 3, 4}, 8), col = randomTensor({4}, 9), row = randomTensor({2, 3, 1}, 10);
  for (const Tensor& y : {col, row}) {
    SCOPED_TRACE(shapeString(y.shape()));
    EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::addBroadcast(in[0], in[1]); },
                                {leaf(x), leaf(y)}));
    EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::mulBroadcast(in[0], in[1]); },
                                {leaf(x), leaf(y)}));
  }
}

TEST(CompositeOps, BroadcastShapeErrorsNameTheOp) {
  Variable x(randomTensor({2, 3, 4}, 11));
  for (const Shape& bad : {Shape{3}, Shape{2, 4}, Shape{2, 1, 1}, Shape{1, 3, 1}}) {
    try {
      ops::mulBroadcast(x, Variable(randomTensor(bad, 12)));
      ADD_FAILURE() << "no error for y " << shapeString(bad);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mulBroadcast"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ops::sub(x, Variable(randomTensor({2, 3}, 13))), Error);
}

TEST(CompositeOps, LastDimSumAndMean) {
  Tensor x = randomTensor({2, 3, 5}, 14);
  const std::vector<double> v = x.toVector<double>();
  Variable s = ops::sumLastDim(Variable(x)), m = ops::meanLastDim(Variable(x), false);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  const std::vector<double> sv = s.data().toVector<double>(), mv = m.data().toVector<double>();
  for (size_t r = 0; r < 6; ++r) {
    double expected = 0;
    for (size_t c = 0; c < 5; ++c) expected += v[r * 5 + c];  // the kernel's order: exact
    EXPECT_EQ(sv[r], expected);
    EXPECT_NEAR(mv[r], expected / 5, 1e-16);
  }
  for (bool keepdim : {true, false}) {
    const Fn sum = [keepdim](const std::vector<Variable>& in) { return ops::sumLastDim(in[0], keepdim); };
    const Fn mean = [keepdim](const std::vector<Variable>& in) { return ops::meanLastDim(in[0], keepdim); };
    EXPECT_TRUE(gradcheckPasses(sum, {leaf(x)}));
    EXPECT_TRUE(gradcheckPasses(mean, {leaf(x)}));
  }
}

TEST(CompositeOps, GatherRows) {
  Tensor table = randomTensor({5, 3}, 15), index = Tensor::fromVector<int32_t>({4, 1, 4, 0, 1, 4}, {2, 3});
  Variable y = ops::gatherRows(Variable(table), index);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  const std::vector<double> t = table.toVector<double>(), out = y.data().toVector<double>();
  const std::vector<int32_t> ids = index.toVector<int32_t>();
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t c = 0; c < 3; ++c) EXPECT_EQ(out[i * 3 + c], t[ids[i] * 3 + c]);
  // Row 4 three times, row 1 twice, rows 2 and 3 never: their gradient must be zero.
  EXPECT_TRUE(gradcheckPasses([index](const std::vector<Variable>& in) { return ops::gatherRows(in[0], index); },
                              {leaf(table)}));
  EXPECT_THROW(ops::gatherRows(Variable(table), Tensor::fromVector<int32_t>({5}, {1})), Error);
}

// RMSNorm as docs/extending.md writes it: x * rsqrt(mean(x^2) + eps) * weight.
Variable rmsNorm(const Variable& x, const Variable& weight, double eps) {
  Variable inv = ops::rsqrt(ops::addScalar(ops::meanLastDim(ops::mul(x, x)), eps));  // (..., 1)
  return ops::mulBroadcast(ops::mulBroadcast(x, inv), weight);
}

TEST(CompositeOps, RmsNormFromOps) {
  const int64_t C = 6;
  Tensor x = randomTensor({2, 4, C}, 16, -2.0, 2.0), w = randomTensor({C}, 17, 0.5, 1.5);
  const std::vector<double> xv = x.toVector<double>(), wv = w.toVector<double>();
  const std::vector<double> y = rmsNorm(Variable(x), Variable(w), 1e-5).data().toVector<double>();
  for (int64_t r = 0; r < 8; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += xv[r * C + c] * xv[r * C + c] / C;
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(y[r * C + c], xv[r * C + c] / std::sqrt(ms + 1e-5) * wv[c], 1e-14);
  }
  EXPECT_TRUE(
      gradcheckPasses([](const std::vector<Variable>& in) { return rmsNorm(in[0], in[1], 1e-5); }, {leaf(x), leaf(w)}));
}

TEST(CompositeOps, SwiGluFromOps) {
  // silu(a) * b: the gated unit of SwiGLU between its projections.
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::mul(ops::silu(in[0]), in[1]); },
                              {leaf(randomTensor({3, 8}, 18, -3.0, 3.0)), leaf(randomTensor({3, 8}, 19))}));
}

// An op with a CPU kernel only, as a user adds one (docs/extending.md).
void cubeCpu(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i] * x[i];
}

TEST(OpKernels, CpuOnlyOpRunsOnCpuAndNamesItselfOnCuda) {
  const ops::OpKernels<const double*, double*, int64_t> cube{"cube", &cubeCpu};
  const std::vector<double> x{1.0, -2.0, 0.5};
  std::vector<double> y(3);
  cube.launch(Device::CPU, x.data(), y.data(), 3);
  EXPECT_EQ(y, (std::vector<double>{1.0, -8.0, 0.125}));
  // The check comes before any CUDA call, so it holds with and without a GPU.
  try {
    cube.launch(Device::CUDA, x.data(), y.data(), 3);
    ADD_FAILURE() << "no error on CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'cube' has no CUDA kernel"), std::string::npos) << e.what();
  }
}

// ---- CUDA against the CPU twin ----

using CompositeCudaVsCpu = testing::CudaVsCpuTest;

TEST_P(CompositeCudaVsCpu, Unary) {
  // n = 1000 elements: several blocks, not a multiple of the block size. CUDA's expf and powf are within 2
  // and 4 ulp, the host's within 1; a derivative adds a few roundings. 16 eps leaves a margin; a wrong
  // formula is off by O(1).
  for (const Unary& u : unaryOps()) {
    SCOPED_TRACE(u.name);
    const Fn f = [&u](const std::vector<Variable>& in) { return u.op(in[0]); };
    expectClose(compareDevices(f, {randomTensor({8, 125}, 20, 0.5, 2.0)}, GetParam()), 16 * roundingEps(GetParam()));
  }
}

TEST_P(CompositeCudaVsCpu, BinaryAndBroadcast) {
  const DType dtype = GetParam();
  Tensor a = randomTensor({3, 37, 80}, 21), b = randomTensor({3, 37, 80}, 22, 0.5, 2.0);
  Tensor col = randomTensor({80}, 23), row = randomTensor({3, 37, 1}, 24);
  // The broadcast operand's gradient sums 111 (column) or 80 (row) products in a fixed but device-specific
  // order; the rest are one or two roundings (sub and div are correctly rounded on both devices).
  const double tol = sumTolerance(dtype, 111);
  expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::sub(in[0], in[1]); }, {a, b}, dtype),
              4 * roundingEps(dtype));
  expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::div(in[0], in[1]); }, {a, b}, dtype),
              4 * roundingEps(dtype));
  for (const Tensor& y : {col, row}) {
    expectClose(
        compareDevices([](const std::vector<Variable>& in) { return ops::addBroadcast(in[0], in[1]); }, {a, y}, dtype),
        tol);
    expectClose(
        compareDevices([](const std::vector<Variable>& in) { return ops::mulBroadcast(in[0], in[1]); }, {a, y}, dtype),
        tol);
  }
}

TEST_P(CompositeCudaVsCpu, LastDimSumsRmsNormAndGather) {
  const DType dtype = GetParam();
  // C = 1000 > the 256 threads of a row's block; 111 rows.
  expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::meanLastDim(in[0]); },
                             {randomTensor({3, 37, 1000}, 25)}, dtype),
              sumTolerance(dtype, 1000));
  expectClose(compareDevices([](const std::vector<Variable>& in) { return rmsNorm(in[0], in[1], 1e-5); },
                             {randomTensor({3, 37, 80}, 26, -2.0, 2.0), randomTensor({80}, 27, 0.5, 1.5)}, dtype),
              sumTolerance(dtype, 111 + 80));
  Tensor index = randomIndices({4, 70}, 97, 28);
  expectClose(compareDevices(
                  [index](const std::vector<Variable>& in) { return ops::gatherRows(in[0], index.to(in[0].device())); },
                  {randomTensor({97, 40}, 29)}, dtype),
              0.0);  // copies, and the backward adds rows in the same order on both devices
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CompositeCudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

}  // namespace
}  // namespace minidp
