// Composable ops (framework/ops/composite.h): forward against std:: math in float64, every backward against
// float64 finite differences, RMSNorm, SwiGLU and RoPE composed from them (RoPE against the fused rotary op),
// the shape and dtype errors, an op with a CPU kernel only (OpKernels), CUDA against the CPU twin in float32
// and float64, and bf16 on CUDA against the fp32 run: each composable op, the elementwise, slice and rotary
// ops, RoPE composed, and a block composed from them.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "framework/ops/op_kernels.h"
#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "kernels/composite_kernels.h"
#include "tests/ops/bf16_compare.h"
#include "tests/ops/composed_ops.h"
#include "tests/support/cuda_skip.h"

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
using testing::randomIndices;
using testing::randomTensor;
using testing::relativeError;
using testing::relativeL2;
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
      {"square", [](const Variable& x) { return ops::square(x); }, [](double x) { return x * x; }},
      {"mul(x, x)", [](const Variable& x) { return ops::mul(x, x); }, [](double x) { return x * x; }},
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

TEST(CompositeOps, MulOfAVariableByItselfMatchesMulOfTwoCopies) {
  // mul(x, x) runs square's one backward kernel (g 2 x); mul of two leaves holding the same values gives
  // g x to each. Doubling is exact, so x's gradient is the sum of theirs bit for bit, output too.
  for (DType dtype : {DType::F32, DType::F64}) {
    const Tensor values = randomTensor({5, 9}, 31).toDType(dtype), g = randomTensor({5, 9}, 32).toDType(dtype);
    Variable x(values.clone(), true), a(values.clone(), true), b(values.clone(), true);
    Variable self = ops::mul(x, x), pair = ops::mul(a, b);
    self.backward(g);
    pair.backward(g);
    const auto values64 = [](const Tensor& t) { return t.toDType(DType::F64).toVector<double>(); };
    EXPECT_EQ(values64(self.data()), values64(pair.data()));
    const std::vector<double> ga = values64(a.grad()), gb = values64(b.grad());
    std::vector<double> sum(ga.size());
    for (size_t i = 0; i < ga.size(); ++i) sum[i] = ga[i] + gb[i];
    EXPECT_EQ(values64(x.grad()), sum) << dtypeName(dtype);
  }
}

TEST(CompositeOps, ConstantOperandsTakeNoGradientAndChangeNoOther) {
  // An operand that requires no gradient (a RoPE table, a mask): the op skips its gradient, and the other
  // operand's is the same bits as when both require one. A skipped gradient the engine still expected (the
  // flags swapped) would throw "an op returned no gradient for an input that requires it".
  const Tensor x = randomTensor({2, 3, 4}, 33), g = randomTensor({2, 3, 4}, 34);
  const std::vector<std::pair<std::string, Fn>> ops2 = {
      {"mul", [](const std::vector<Variable>& in) { return ops::mul(in[0], in[1]); }},
      {"sub", [](const std::vector<Variable>& in) { return ops::sub(in[0], in[1]); }},
      {"addBroadcast", [](const std::vector<Variable>& in) { return ops::addBroadcast(in[0], in[1]); }},
      {"mulBroadcast", [](const std::vector<Variable>& in) { return ops::mulBroadcast(in[0], in[1]); }},
  };
  for (const auto& [name, f] : ops2) {
    SCOPED_TRACE(name);
    const Tensor y =
        name.rfind("Broadcast") != std::string::npos ? randomTensor({3, 4}, 35) : randomTensor({2, 3, 4}, 35);
    Variable xBoth(x.clone(), true), yBoth(y.clone(), true), xOnly(x.clone(), true), yConst(y.clone());
    f({xBoth, yBoth}).backward(g);
    f({xOnly, yConst}).backward(g);
    EXPECT_EQ(xOnly.grad().toVector<double>(), xBoth.grad().toVector<double>());
    if (name == "mul") {  // the constant first
      Variable xConst(x.clone()), yOnly(y.clone(), true);
      f({xConst, yOnly}).backward(g);
      EXPECT_EQ(yOnly.grad().toVector<double>(), yBoth.grad().toVector<double>());
    }
  }
}

TEST(CompositeOps, BroadcastForward) {
  Tensor x = randomTensor({2, 3, 4}, 5), col = randomTensor({4}, 6), row = randomTensor({2, 3, 1}, 7);
  const std::vector<double> v = x.toVector<double>(), c = col.toVector<double>(), r = row.toVector<double>();
  // y of x's trailing dimensions: (3, 4), repeated over the first.
  const Tensor trailing = randomTensor({3, 4}, 14);
  const std::vector<double> t = trailing.toVector<double>();
  const std::vector<double> addTrail = ops::addBroadcast(Variable(x), Variable(trailing)).data().toVector<double>();
  const std::vector<double> mulTrail = ops::mulBroadcast(Variable(x), Variable(trailing)).data().toVector<double>();
  const std::vector<double> addCol = ops::addBroadcast(Variable(x), Variable(col)).data().toVector<double>();
  const std::vector<double> mulCol = ops::mulBroadcast(Variable(x), Variable(col)).data().toVector<double>();
  const std::vector<double> addRow = ops::addBroadcast(Variable(x), Variable(row)).data().toVector<double>();
  const std::vector<double> mulRow = ops::mulBroadcast(Variable(x), Variable(row)).data().toVector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(addCol[i], v[i] + c[i % 4]);
    EXPECT_EQ(mulCol[i], v[i] * c[i % 4]);
    EXPECT_EQ(addRow[i], v[i] + r[i / 4]);
    EXPECT_EQ(mulRow[i], v[i] * r[i / 4]);
    EXPECT_EQ(addTrail[i], v[i] + t[i % 12]);
    EXPECT_EQ(mulTrail[i], v[i] * t[i % 12]);
  }
}

TEST(CompositeOps, BroadcastGradcheck) {
  Tensor x = randomTensor({2, 3, 4}, 8), col = randomTensor({4}, 9), row = randomTensor({2, 3, 1}, 10);
  for (const Tensor& y : {col, row, randomTensor({3, 4}, 15), randomTensor({2, 3, 4}, 30)}) {
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

// A dtype an op cannot run is one line naming the op and the dtype: integers anywhere, BF16 on the CPU
// (its kernels are CUDA-only), and a broadcast operand in another float dtype.
TEST(CompositeOps, DtypeErrorsNameTheOpAndDtype) {
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto expectNames = [](const std::string& what, const char* op, const char* dtype) {
    EXPECT_NE(what.find(op), std::string::npos) << what;
    EXPECT_NE(what.find(dtype), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  };
  const Variable ints(Tensor::fromVector<int32_t>({1, 2, 3, 4}, {2, 2}));
  const Variable bf16Cpu(randomTensor({2, 2}, 14).toDType(DType::BF16));
  const Variable f64(randomTensor({2, 2}, 15)), f32Col(randomTensor({2}, 16, -1, 1, DType::F32));
  expectNames(message([&] { ops::silu(ints); }), "silu", "I32");
  expectNames(message([&] { ops::sumLastDim(ints); }), "sumLastDim", "I32");
  expectNames(message([&] { ops::mul(ints, ints); }), "mul", "I32");
  expectNames(message([&] { ops::rsqrt(bf16Cpu); }), "rsqrt", "BF16");
  expectNames(message([&] { ops::meanLastDim(bf16Cpu); }), "meanLastDim", "BF16");
  expectNames(message([&] { ops::gatherRows(bf16Cpu, Tensor::fromVector<int32_t>({0}, {1})); }), "gatherRows", "BF16");
  expectNames(message([&] {
                ops::rotary(Variable(randomTensor({1, 2, 1, 2}, 17).toDType(DType::BF16)), 1e4);
              }),
              "rotary", "BF16");
  expectNames(message([&] { ops::narrow(bf16Cpu, 0, 0, 1); }), "narrow", "BF16");
  expectNames(message([&] { ops::mulBroadcast(f64, f32Col); }), "mulBroadcast", "F32");
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

using composed::rmsNorm;
using composed::rope;
using composed::ropeTable;

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

TEST(CompositeOps, RopeFromOpsMatchesRotary) {
  // (B, T, H, d) = (2, 5, 3, 8): forward and the gradient of a weighted sum, against the fused op in float64.
  const int64_t T = 5, H = 3, d = 8;
  const Tensor x = randomTensor({2, T, H, d}, 31), w = randomTensor({2, T, H, d}, 32);
  const Variable cos(ropeTable(T, H, d, 1e4, false)), sin(ropeTable(T, H, d, 1e4, true));
  Variable a = leaf(x), b = leaf(x);
  const Variable composed = rope(a, cos, sin), fused = ops::rotary(b, 1e4);
  const std::vector<double> c = composed.data().toVector<double>(), f = fused.data().toVector<double>();
  for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(c[i], f[i], 1e-14) << i;
  ops::sum(ops::mul(composed, Variable(w))).backward();
  ops::sum(ops::mul(fused, Variable(w))).backward();
  const std::vector<double> ga = a.grad().toVector<double>(), gb = b.grad().toVector<double>();
  for (size_t i = 0; i < gb.size(); ++i) ASSERT_NEAR(ga[i], gb[i], 1e-14) << i;
  EXPECT_TRUE(gradcheckPasses([&](const std::vector<Variable>& in) { return rope(in[0], cos, sin); }, {leaf(x)}));
}

TEST(CompositeOps, SwiGluFromOps) {
  // silu(a) * b: the gated unit of SwiGLU between its projections.
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::mul(ops::silu(in[0]), in[1]); },
                              {leaf(randomTensor({3, 8}, 18, -3.0, 3.0)), leaf(randomTensor({3, 8}, 19))}));
}

TEST(CompositeOps, SwigluFusedEqualsTheComposedOps) {
  // ops::swiglu against mul(silu(a), b) in float64 (forward and both gradients), and by finite differences.
  const Tensor a = randomTensor({3, 50}, 34, -4.0, 4.0), b = randomTensor({3, 50}, 35), g = randomTensor({3, 50}, 36);
  Variable af = leaf(a), bf = leaf(b), ac = leaf(a), bc = leaf(b);
  Variable fused = ops::swiglu(af, bf), composed = ops::mul(ops::silu(ac), bc);
  EXPECT_LE(relativeError(fused.data(), composed.data()), 1e-15);
  fused.backward(g);
  composed.backward(g);
  EXPECT_LE(relativeError(af.grad(), ac.grad()), 1e-15);
  EXPECT_LE(relativeError(bf.grad(), bc.grad()), 1e-15);
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::swiglu(in[0], in[1]); },
                              {leaf(randomTensor({3, 8}, 37, -3.0, 3.0)), leaf(randomTensor({3, 8}, 38))}));
  EXPECT_THROW(ops::swiglu(Variable(a), Variable(randomTensor({3, 49}, 39))), Error);
}

// ops::swigluLinear(gate, up, w) and linear(swiglu(gate, up), w, {}) on the same leaves: output, then the
// gradients of gate, up and w after backward with g (empty where not wanted). Activations in `dtype` on
// `device`, w in `wType`; `wantActivations` and `wantWeight` say which gradients are asked for.
std::vector<std::vector<double>> swigluLinearBothWays(DType dtype, DType wType, Device device,
                                                      bool wantActivations = true, bool wantWeight = true) {
  const Shape shape{3, 5, 40};
  const Tensor a = randomTensor(shape, 44, -4.0, 4.0), b = randomTensor(shape, 45);
  const Tensor w = randomTensor({24, 40}, 46, -0.3, 0.3), g = randomTensor({3, 5, 24}, 47);
  std::vector<std::vector<double>> out;
  for (bool fused : {true, false}) {
    Variable av(a.toDType(dtype).to(device), wantActivations), bv(b.toDType(dtype).to(device), wantActivations);
    Variable wv(w.toDType(wType).to(device), wantWeight);
    Variable y = fused ? ops::swigluLinear(av, bv, wv) : ops::linear(ops::swiglu(av, bv), wv, {});
    y.backward(g.toDType(dtype).to(device));
    for (const Tensor& t : {y.data(), av.grad(), bv.grad(), wv.grad()})
      out.push_back(t.defined() ? t.toDType(DType::F64).to(Device::CPU).toVector<double>() : std::vector<double>{});
  }
  return out;
}

TEST(CompositeOps, SwigluLinearEqualsSwigluThenLinear) {
  // The product recomputed in backward has the forward's bits, so everything matches bit for bit; and
  // against float64 finite differences.
  for (DType dtype : {DType::F64, DType::F32}) {
    // Every gradient, then the activations' alone and the weight's alone (backward's two partial paths).
    for (const auto [activations, weight] : {std::pair{true, true}, {true, false}, {false, true}}) {
      const auto r = swigluLinearBothWays(dtype, dtype, Device::CPU, activations, weight);
      const char* names[4] = {"y", "dgate", "dup", "dweight"};
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(r[i], r[i + 4]) << names[i] << " " << dtypeName(dtype);
        const bool wanted = i == 0 || (i == 3 ? weight : activations);
        EXPECT_EQ(r[i].empty(), !wanted) << names[i] << " " << dtypeName(dtype);
      }
    }
  }
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::swigluLinear(in[0], in[1], in[2]); },
                              {leaf(randomTensor({2, 3, 8}, 48, -3.0, 3.0)), leaf(randomTensor({2, 3, 8}, 49)),
                               leaf(randomTensor({5, 8}, 50))}));
  EXPECT_THROW(ops::swigluLinear(Variable(randomTensor({3, 8}, 51)), Variable(randomTensor({3, 7}, 52)),
                                 Variable(randomTensor({5, 8}, 53))),
               Error);
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
  // n = 1000 elements: several blocks, not a multiple of the block size; n = 917: whole 16-byte packs and a
  // tail of single elements. CUDA's expf and powf are within 2 and 4 ulp, the host's within 1; a derivative
  // adds a few roundings. 16 eps leaves a margin; a wrong formula is off by O(1).
  for (const Unary& u : unaryOps()) {
    SCOPED_TRACE(u.name);
    const Fn f = [&u](const std::vector<Variable>& in) { return u.op(in[0]); };
    for (const Shape& shape : {Shape{8, 125}, Shape{7, 131}}) {
      expectClose(compareDevices(f, {randomTensor(shape, 20, 0.5, 2.0)}, GetParam()), 16 * roundingEps(GetParam()));
    }
  }
}

TEST_P(CompositeCudaVsCpu, Swiglu) {
  // 3 * 37 * 80 elements: 16-byte packs and a tail; a second call on offset views takes the scalar path.
  const Fn f = [](const std::vector<Variable>& in) { return ops::swiglu(in[0], in[1]); };
  expectClose(compareDevices(f, {randomTensor({3, 37, 80}, 40, -4.0, 4.0), randomTensor({3, 37, 80}, 41)}, GetParam()),
              16 * roundingEps(GetParam()));
  expectClose(compareDevices(f, {randomTensor({7, 13}, 42, -4.0, 4.0), randomTensor({7, 13}, 43)}, GetParam()),
              16 * roundingEps(GetParam()));
}

TEST_P(CompositeCudaVsCpu, BinaryAndBroadcast) {
  // 80 columns: 16-byte packs (a Columns or Rows pack never straddles two rows); 81 columns: one element per
  // thread for the broadcasts, and packs with a tail of single elements for same-shape operands.
  const DType dtype = GetParam();
  for (int64_t C : {80, 81}) {
    SCOPED_TRACE("C " + std::to_string(C));
    Tensor a = randomTensor({3, 37, C}, 21), b = randomTensor({3, 37, C}, 22, 0.5, 2.0);
    Tensor col = randomTensor({C}, 23), row = randomTensor({3, 37, 1}, 24), trailing = randomTensor({37, C}, 33);
    // The broadcast operand's gradient sums 111 (column) or C (row) products in a fixed but device-specific
    // order; the rest are one or two roundings (sub and div are correctly rounded on both devices).
    const double tol = sumTolerance(dtype, 111);
    expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::sub(in[0], in[1]); }, {a, b}, dtype),
                4 * roundingEps(dtype));
    expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::div(in[0], in[1]); }, {a, b}, dtype),
                4 * roundingEps(dtype));
    for (const Tensor& y : {col, row, trailing}) {
      expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::addBroadcast(in[0], in[1]); },
                                 {a, y}, dtype),
                  tol);
      expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::mulBroadcast(in[0], in[1]); },
                                 {a, y}, dtype),
                  tol);
    }
  }
}

TEST_P(CompositeCudaVsCpu, PackedAndScalarColumnSumsAgreeBitForBit) {
  // mulBroadcast's column gradient sums g * x over the rows. x 16-byte aligned takes the packed stage-one
  // kernel; the same values one element into a larger block take the scalar one. Both add each column's
  // rows in the same order: the same bits.
  const DType dtype = GetParam();
  const Shape shape{4, 300, 80};
  const Tensor x = randomTensor(shape, 28).toDType(dtype).to(Device::CUDA), g = randomTensor(shape, 29);
  const Tensor w = randomTensor({80}, 30).toDType(dtype).to(Device::CUDA);
  Tensor block = Tensor::empty({x.numel() + 1}, dtype, Device::CUDA);
  Tensor shifted = Tensor::alias(block, 1, shape);
  shifted.copyFrom(x);
  std::vector<std::vector<double>> grads;
  for (const Tensor& input : {x, shifted}) {
    Variable xv(input, false), wv(w.clone(), true);
    ops::mulBroadcast(xv, wv).backward(g.toDType(dtype).to(Device::CUDA));
    grads.push_back(wv.grad().to(Device::CPU).toDType(DType::F64).toVector<double>());
  }
  EXPECT_EQ(grads[0], grads[1]);
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

// ---- bf16 on CUDA against the fp32 run (tests/ops/bf16_compare.h) ----

using CompositeBf16 = testing::Bf16OnCudaTest;

TEST_F(CompositeBf16, UnaryOpsRoundOnce) {
  // 1000 elements in [0.5, 2) (sqrt, rsqrt and pow defined): forward f(x) and backward dy * f'(x), each
  // computed in fp32 from the same values and rounded once.
  for (const Unary& u : unaryOps()) {
    SCOPED_TRACE(u.name);
    const Fn f = [&u](const std::vector<Variable>& in) { return u.op(in[0]); };
    expectWithin(compareBf16(f, {bf16Exact({8, 125}, 40, 0.5, 2.0)}, {false}), kOneRounding, {kOneRounding});
  }
}

TEST_F(CompositeBf16, SwigluRoundsOnce) {
  // The product and both gradients computed in fp32 from the same values and rounded once (where
  // mul(silu(a), b) rounds silu(a) too). 3 * 37 * 80 elements, and 7 * 13 (not a whole pack).
  const Fn f = [](const std::vector<Variable>& in) { return ops::swiglu(in[0], in[1]); };
  for (const Shape& shape : {Shape{3, 37, 80}, Shape{7, 13}}) {
    expectWithin(compareBf16(f, {bf16Exact(shape, 58, -4.0, 4.0), bf16Exact(shape, 59)}, {false, false}),
                 kOneRounding, {kOneRounding, kOneRounding});
  }
}

TEST_F(CompositeBf16, SwigluBackwardWritesTheForwardProduct) {
  // swigluBackward's optional output: the product again, every element (the output starts as NaN), with
  // swigluForward's bits; n = 1003 takes 16-byte packs and a tail.
  const int64_t n = 1003;
  const Tensor a = bf16Exact({n}, 60, -4.0, 4.0).toDType(DType::BF16).to(Device::CUDA);
  const Tensor b = bf16Exact({n}, 61).toDType(DType::BF16).to(Device::CUDA);
  const Tensor g = bf16Exact({n}, 62).toDType(DType::BF16).to(Device::CUDA);
  Tensor y = Tensor::fromVector(std::vector<double>(n, NAN), {n}).toDType(DType::BF16).to(Device::CUDA);
  Tensor forward = Tensor::empty({n}, DType::BF16, Device::CUDA), da = Tensor::empty({n}, DType::BF16, Device::CUDA),
         db = Tensor::empty({n}, DType::BF16, Device::CUDA);
  MINIDP_ON_CUDA(
      kernels::cuda::swigluForward(a.data<bf16>(), b.data<bf16>(), forward.data<bf16>(), n, runtime::computeStream()));
  MINIDP_ON_CUDA(kernels::cuda::swigluBackward(a.data<bf16>(), b.data<bf16>(), g.data<bf16>(), da.data<bf16>(),
                                               db.data<bf16>(), y.data<bf16>(), n, runtime::computeStream()));
  EXPECT_EQ(y.toDType(DType::F64).to(Device::CPU).toVector<double>(),
            forward.toDType(DType::F64).to(Device::CPU).toVector<double>());
}

TEST_F(CompositeBf16, SwigluLinearEqualsSwigluThenLinear) {
  // On the GPU, bf16 activations with an fp32 weight (as the llama MLP) and fp32 throughout: the fused op
  // and swiglu then linear give the same bits, output and all three gradients.
  for (DType dtype : {DType::BF16, DType::F32}) {
    const auto r = swigluLinearBothWays(dtype, DType::F32, Device::CUDA);
    const char* names[4] = {"y", "dgate", "dup", "dweight"};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r[i], r[i + 4]) << names[i] << " " << dtypeName(dtype);
  }
}

TEST_F(CompositeBf16, ElementwiseSubDivRoundOnce) {
  // add and mul (framework/ops/elementwise.cpp), sub, div: a rounded result, gradients g, -g, g * b, g / b and
  // -(g / b)(a / b) each rounded once (div's backward in one kernel, not a bf16 g / b times a bf16 a / b).
  const Tensor a = bf16Exact({3, 37, 80}, 41), b = bf16Exact({3, 37, 80}, 42, 0.5, 2.0);
  using V = std::vector<Variable>;
  for (const Fn& f :
       {Fn([](const V& in) { return ops::add(in[0], in[1]); }), Fn([](const V& in) { return ops::mul(in[0], in[1]); }),
        Fn([](const V& in) { return ops::sub(in[0], in[1]); }),
        Fn([](const V& in) { return ops::div(in[0], in[1]); })}) {
    expectWithin(compareBf16(f, {a, b}, {false, false}), kOneRounding, {kOneRounding, kOneRounding});
  }
}

TEST_F(CompositeBf16, BroadcastsWithBf16AndFp32Operands) {
  // x (3, 37, 80) with y (80) or (37, 80) (its trailing dimensions) or (3, 37, 1) per row, y in BF16 (an
  // activation) or F32 (a parameter). Forward and dx = g (or g * y): one rounding. dy sums 111, 3 or 80 terms
  // of g (g * x) in fp32 in the same order as the fp32 run: a BF16 y gets one rounding of that sum; an F32 y
  // gets the fp32 run's sum itself, up to the FMA contraction of its terms (sumTolerance).
  const Tensor x = bf16Exact({3, 37, 80}, 43), col = bf16Exact({80}, 44), row = bf16Exact({3, 37, 1}, 45);
  const Tensor trailing = bf16Exact({37, 80}, 56);
  using V = std::vector<Variable>;
  const Fn add = [](const V& in) { return ops::addBroadcast(in[0], in[1]); };
  const Fn mul = [](const V& in) { return ops::mulBroadcast(in[0], in[1]); };
  for (const Tensor& y : {col, row, trailing}) {
    SCOPED_TRACE(shapeString(y.shape()));
    const double f32Sum = testing::sumTolerance(DType::F32, 111);
    for (const Fn& f : {add, mul}) {
      expectWithin(compareBf16(f, {x, y}, {false, false}), kOneRounding, {kOneRounding, kOneRounding});
      expectWithin(compareBf16(f, {x, y}, {false, true}), kOneRounding, {kOneRounding, f32Sum});
    }
  }
}

TEST_F(CompositeBf16, LastDimSumsAndGatherRows) {
  // C = 1000 > a row block's 256 threads. The sums of 1000 bf16 values are the fp32 run's sums rounded once;
  // sumLastDim's backward copies g, meanLastDim's rounds g / C once.
  const Tensor x = bf16Exact({3, 37, 1000}, 46);
  for (bool keepdim : {true, false}) {
    const Fn sum = [keepdim](const std::vector<Variable>& in) { return ops::sumLastDim(in[0], keepdim); };
    const Fn mean = [keepdim](const std::vector<Variable>& in) { return ops::meanLastDim(in[0], keepdim); };
    expectWithin(compareBf16(sum, {x}, {false}), kOneRounding, {kExact});
    expectWithin(compareBf16(mean, {x}, {false}), kOneRounding, {kOneRounding});
  }
  // A BF16 table (97, 40), 280 lookups with repeats: the rows copied; each table row's gradient the fp32
  // sum of its lookups' rows (in position order, as the fp32 run's) rounded once.
  Tensor index = randomIndices({4, 70}, 97, 47).to(Device::CUDA);
  expectWithin(compareBf16([index](const std::vector<Variable>& in) { return ops::gatherRows(in[0], index); },
                           {bf16Exact({97, 40}, 48)}, {false}),
               kExact, {kOneRounding});
}

TEST_F(CompositeBf16, SlicesAreExactAndRotaryRoundsOnce) {
  // narrow, split and cat copy bits both ways. rotary turns each pair in fp32 (the angle in double) and rounds
  // each output once; its backward turns the gradient back the same way.
  const Tensor x = bf16Exact({2, 6, 3, 16}, 49), y = bf16Exact({2, 6, 5, 16}, 50);
  using V = std::vector<Variable>;
  expectWithin(compareBf16([](const V& in) { return ops::narrow(in[0], 1, 2, 3); }, {x}, {false}), kExact, {kExact});
  expectWithin(compareBf16(
                   [](const V& in) {
                     const std::vector<Variable> p = ops::split(in[0], 2, {2, 1, 2});
                     return ops::cat({p[2], p[0], p[1]}, 2);
                   },
                   {y}, {false}),
               kExact, {kExact});
  expectWithin(compareBf16(
                   [](const V& in) {
                     return ops::cat({in[0], in[1]}, 2);
                   },
                   {x, y}, {false, false}),
               kExact, {kExact, kExact});
  expectWithin(compareBf16([](const V& in) { return ops::rotary(in[0], 1e4); }, {x}, {false}), kOneRounding,
               {kOneRounding});
}

TEST_F(CompositeBf16, RopeFromOpsRoundsThrice) {
  // rope() on a bf16 x with fp32 tables (as a model holds them): x * cos and swapped * sin each rounded once,
  // their sum once more. A pair keeps its norm under the turn, so the largest output is at least the largest
  // |x| / sqrt(2), and the three roundings stay within 3 of kOneRounding against it. Backward: g * cos and
  // g * sin rounded, then added into x's gradient in bf16: three again. The tables' gradients sum B = 2
  // products in fp32, in the fp32 run's order.
  const int64_t T = 7, H = 3, d = 64;
  const std::vector<Tensor> inputs{bf16Exact({2, T, H, d}, 57), ropeTable(T, H, d, 1e4, false),
                                   ropeTable(T, H, d, 1e4, true)};
  const Fn f = [](const std::vector<Variable>& in) { return rope(in[0], in[1], in[2]); };
  const double f32Sum = testing::sumTolerance(DType::F32, 2);
  expectWithin(compareBf16(f, inputs, {false, true, true}), 3 * kOneRounding, {3 * kOneRounding, f32Sum, f32Sum});
}

// A LLaMA-style block a user composes: RMSNorm with an fp32 weight (x * rsqrt(mean(x^2) + eps) * w), a
// projection turned by rotary (as q and k are before attention), and SwiGLU with gate and up split from one
// projection, both added to the residual. x (B, T, C) = (2, 8, 64), 4 heads of 16, hidden F = 96.
Variable userBlock(const std::vector<Variable>& in) {
  const Variable &x = in[0], &norm = in[1], &wq = in[2], &w13 = in[3], &w2 = in[4];
  const Variable h = rmsNorm(x, norm, 1e-5);
  const Variable q = ops::reshape(ops::rotary(ops::reshape(ops::linear(h, wq, {}), {2, 8, 4, 16}), 1e4), {2, 8, 64});
  const std::vector<Variable> gateUp = ops::split(ops::linear(h, w13, {}), -1, {96, 96});
  const Variable mlp = ops::linear(ops::mul(ops::silu(gateUp[0]), gateUp[1]), w2, {});
  return ops::add(ops::add(x, q), mlp);
}

TEST_F(CompositeBf16, UserBlockMatchesF32) {
  // Here roundings compound: about ten bf16 intermediates on the way forward and as many back (the GEMMs'
  // outputs included), each at most 2^-8 and independent of the others, so the typical error grows as the
  // square root of their number. Emulated on the CPU (this block in fp32 with every intermediate and every
  // gradient between ops rounded to bf16, 20 seeds), the worst relativeL2 (the norm of the difference against
  // the fp32 result's) was 6.9e-3 and the worst element 1.0e-2 of the largest. Bounds: 2e-2 and 4e-2, room
  // for what the emulation leaves out (the backward engine adds a value's several bf16 gradients in bf16).
  // A wrong kernel (a missed row, a wrong index, fp32 read as bf16) is off by O(1).
  const std::vector<Tensor> inputs{bf16Exact({2, 8, 64}, 51, -2.0, 2.0), bf16Exact({64}, 52, 0.5, 1.5),
                                   bf16Exact({64, 64}, 53, -0.125, 0.125), bf16Exact({192, 64}, 54, -0.125, 0.125),
                                   bf16Exact({64, 96}, 55, -0.1, 0.1)};
  const std::vector<bool> params{false, true, true, true, true};
  expectWithin(compareBf16(userBlock, inputs, params, relativeL2), 2e-2, std::vector<double>(5, 2e-2));
  expectWithin(compareBf16(userBlock, inputs, params), 4e-2, std::vector<double>(5, 4e-2));
}

}  // namespace
}  // namespace minidp
