// The fused kernels' contracts: parameter gradients added straight into installed gradients (LayerNorm,
// embedding, bias column sums), the in-place cross-entropy backward, GPT-2-sized shapes (V = 50257, many
// row slices) on CUDA against the CPU twin, and bf16 activations against a float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "kernels/bias.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

using testing::gradcheck;
using testing::randomIndices;
using testing::randomTensor;
using testing::relativeError;
using testing::roundingEps;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

// A float64 CPU copy of a float tensor of any dtype (BF16 included) on any device.
Tensor asF64(const Tensor& t) {
  if (t.dtype() != DType::BF16) return t.toDType(DType::F64).to(Device::CPU);
  Tensor host = t.to(Device::CPU);
  std::vector<double> v(host.numel());
  for (int64_t i = 0; i < host.numel(); ++i) v[i] = bf16ToFloat(host.data<bf16>()[i]);
  return Tensor::fromVector(v, t.shape());
}

// `t` (float64 CPU) rounded to bf16, as a BF16 tensor on `device`.
Tensor toBf16(const Tensor& t, Device device) {
  std::vector<bf16> v;
  for (double x : t.toVector<double>()) v.push_back(floatToBf16(static_cast<float>(x)));
  return Tensor::fromVector(v, t.shape(), device);
}

// Runs f on `device` in `dtype` with every input a leaf whose gradient is already installed (random
// values, as a bucket view would hold), backward with `upstream`; returns the output and the gradients,
// and checks that each gradient stayed the installed tensor.
std::vector<Tensor> intoInstalledGradients(const Fn& f, const std::vector<Tensor>& inputs, const Tensor& upstream,
                                           Device device, DType dtype) {
  std::vector<Variable> leaves;
  std::vector<Tensor> installed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    leaves.emplace_back(inputs[i].toDType(dtype).to(device), true);
    installed.push_back(randomTensor(inputs[i].shape(), 100 + i, -1.0, 1.0, dtype).to(device));
    leaves.back().setGrad(installed.back());
  }
  Variable y = f(leaves);
  y.backward(upstream.toDType(dtype).to(device));
  std::vector<Tensor> out{y.data()};
  for (size_t i = 0; i < leaves.size(); ++i) {
    EXPECT_TRUE(leaves[i].grad().sharesStorage(installed[i])) << "input " << i;
    out.push_back(leaves[i].grad());
  }
  return out;
}

// The gradients f gives its inputs without installed gradients (float64, CPU).
std::vector<Tensor> freshGradients(const Fn& f, const std::vector<Tensor>& inputs, const Tensor& upstream) {
  std::vector<Variable> leaves;
  for (const Tensor& t : inputs) leaves.emplace_back(t.clone(), true);
  f(leaves).backward(upstream);
  std::vector<Tensor> out;
  for (const Variable& v : leaves) out.push_back(v.grad());
  return out;
}

// On the CPU in float64, gradients added into installed ones equal installed + fresh gradients.
void expectAddsIntoInstalled(const Fn& f, const std::vector<Tensor>& inputs, const Shape& outShape) {
  const Tensor upstream = randomTensor(outShape, 99);
  std::vector<Tensor> fresh = freshGradients(f, inputs, upstream);
  std::vector<Tensor> added = intoInstalledGradients(f, inputs, upstream, Device::CPU, DType::F64);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<double> a = added[i + 1].toVector<double>(), g = fresh[i].toVector<double>();
    std::vector<double> start = randomTensor(inputs[i].shape(), 100 + i).toVector<double>();
    for (size_t j = 0; j < a.size(); ++j)
      EXPECT_NEAR(a[j], start[j] + g[j], 1e-12) << "input " << i << " element " << j;
  }
}

TEST(FusedOps, LayerNormAddsIntoInstalledGradients) {
  const Fn f = [](const std::vector<Variable>& in) { return ops::layerNorm(in[0], in[1], in[2]); };
  expectAddsIntoInstalled(f, {randomTensor({5, 7}, 1), randomTensor({7}, 2, 0.5, 1.5), randomTensor({7}, 3)}, {5, 7});
}

TEST(FusedOps, RmsNormAddsIntoInstalledGradients) {
  const Fn f = [](const std::vector<Variable>& in) { return ops::rmsNorm(in[0], in[1]); };
  expectAddsIntoInstalled(f, {randomTensor({5, 7}, 7), randomTensor({7}, 8, 0.5, 1.5)}, {5, 7});
}

// A residual stream x (a non-leaf) normalised and projected, the residual added by the projection's
// GEMM: x's gradient arrives from the residual first, and the norm's backward adds its dx into it
// (heldGradTarget: Autograd.OpsAddIntoTheGradientHeldForANonLeaf checks when the engine offers it) instead
// of returning dx for the engine to add. The bits must be those of that add: the residual's gradient (the
// upstream, through scale 1) plus the dx the norm returns in a graph without the residual, added by the
// engine's op in `dtype`; compared through the cast or scale that made x. A norm that ignored the offer
// would pass (the engine's add gives these bits); one that took it and added wrongly, or with the product
// fused into the add (an FMA), fails. C = 24 takes the packed kernels, C = 25 the one-element ones.
void expectNormAddsIntoTheResidualGradient(bool rms, int64_t C, Device device, DType dtype) {
  SCOPED_TRACE(::testing::Message() << (rms ? "rmsNorm " : "layerNorm ") << deviceName(device) << " "
                                    << dtypeName(dtype) << " C " << C);
  const int64_t N = 33;
  const DType param = dtype == DType::BF16 ? DType::F32 : dtype;
  const Tensor xv = randomTensor({N, C}, 211, -2.0, 2.0, param).to(device);
  const Tensor wv = randomTensor({C}, 212, 0.5, 1.5, param).to(device),
               bv = randomTensor({C}, 213, -1.0, 1.0, param).to(device);
  const Tensor pwv = randomTensor({C, C}, 214, -0.3, 0.3, param).to(device),
               pbv = randomTensor({C}, 215, -1.0, 1.0, param).to(device);
  const auto as = [](const Tensor& t, DType d) { return t.dtype() == d ? t : ops::cast(t, d); };
  const Tensor upstream = as(randomTensor({N, C}, 216, -1.0, 1.0, param).to(device), dtype);
  // x's gradient (in `param`) from out = scale(proj(norm(x)) [+ x in the GEMM], 1).
  const auto run = [&](bool residual) {
    Variable leaf(xv.clone(), true), w(wv, false), b(bv, false), pw(pwv, false), pb(pbv, false);
    const Variable x = dtype == DType::BF16 ? ops::cast(leaf, DType::BF16) : ops::scale(leaf, 1.0);
    const Variable normed = rms ? ops::rmsNorm(x, w) : ops::layerNorm(x, w, b);
    const Variable y = residual ? ops::linear(normed, pw, pb, x) : ops::linear(normed, pw, pb);
    ops::scale(y, 1.0).backward(upstream);
    return leaf.grad();
  };
  const Tensor held = run(true), normOnly = run(false);
  const Tensor expected = as(ops::add(upstream, as(normOnly, dtype)), param);
  const Tensor a = held.to(Device::CPU), e = expected.to(Device::CPU);
  ASSERT_EQ(a.shape(), e.shape());
  EXPECT_EQ(std::memcmp(a.raw(), e.raw(), a.nbytes()), 0)
      << "largest difference " << relativeError(a, e) << " of the largest element";
}

TEST(FusedOps, NormsAddIntoTheResidualGradient) {
  for (bool rms : {false, true}) {
    for (int64_t C : {24, 25}) {
      for (DType dtype : {DType::F64, DType::F32}) expectNormAddsIntoTheResidualGradient(rms, C, Device::CPU, dtype);
      if (!runtime::cudaAvailable()) continue;
      for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
        expectNormAddsIntoTheResidualGradient(rms, C, Device::CUDA, dtype);
      }
    }
  }
}

TEST(FusedOps, EmbeddingAddsIntoInstalledGradients) {
  // Token 2 never occurs: its installed row must stay as it was; positions 4, 5 of wpe likewise.
  Tensor tokens = Tensor::fromVector<int32_t>({1, 3, 1, 0, 3, 3, 4, 1}, {2, 4});
  const Fn f = [tokens](const std::vector<Variable>& in) { return ops::embedding(in[0], in[1], tokens); };
  expectAddsIntoInstalled(f, {randomTensor({5, 3}, 4), randomTensor({6, 3}, 5)}, {2, 4, 3});
}

TEST(FusedOps, SumColumnsOverwritesOrAdds) {
  const int64_t N = 9, C = 4;
  std::vector<double> x = randomTensor({N, C}, 6).toVector<double>(), out(C, 5.0), sums(C, 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < C; ++c) sums[c] += x[r * C + c];
  kernels::cpu::sumColumns<double>(x.data(), out.data(), nullptr, N, C, true);
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(out[c], 5.0 + sums[c], 1e-14);
  kernels::cpu::sumColumns<double>(x.data(), out.data(), nullptr, N, C, false);
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(out[c], sums[c], 1e-14);
}

// (softmax(row) - onehot) / N, in float64.
std::vector<double> expectedXentGradient(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                         int64_t V) {
  const int64_t N = static_cast<int64_t>(targets.size());
  std::vector<double> g(logits.size());
  for (int64_t r = 0; r < N; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, logits[r * V + j]);
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[r * V + j] - m);
    for (int64_t j = 0; j < V; ++j)
      g[r * V + j] = (std::exp(logits[r * V + j] - m) / s - (j == targets[r] ? 1.0 : 0.0)) / double(N);
  }
  return g;
}

TEST(FusedOps, CrossEntropyWritesTheGradientIntoAnOpsLogits) {
  // logits = 1 * x is an op's output: its buffer takes the gradient (no second (N, V) buffer), which then
  // flows on to x. A leaf's logits keep their values.
  const int64_t N = 3, V = 5;
  Tensor x = randomTensor({N, V}, 7, -2.0, 2.0);
  Tensor targets = Tensor::fromVector<int32_t>({4, 0, 2}, {N});
  const std::vector<double> expected = expectedXentGradient(x.toVector<double>(), targets.toVector<int32_t>(), V);
  Variable xv(x.clone(), true);
  Variable logits = ops::scale(xv, 1.0);
  ops::crossEntropy(logits, targets).backward();
  std::vector<double> buffer = logits.data().toVector<double>(), grad = xv.grad().toVector<double>();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(buffer[i], expected[i], 1e-14) << "logits buffer, element " << i;
    EXPECT_NEAR(grad[i], expected[i], 1e-14) << "gradient, element " << i;
  }
  Variable leafLogits(x.clone(), true);
  ops::crossEntropy(leafLogits, targets).backward();
  EXPECT_EQ(leafLogits.data().toVector<double>(), x.toVector<double>());
}

TEST(FusedOps, CrossEntropyThroughAnOpGradcheck) {
  Tensor targets = randomIndices({4}, 6, 8);
  std::string report;
  EXPECT_LT(
      gradcheck(
          [targets](const std::vector<Variable>& in) { return ops::crossEntropy(ops::scale(in[0], 1.5), targets); },
          {Variable(randomTensor({4, 6}, 9, -3.0, 3.0), true)}, &report),
      1e-6)
      << report;
}

TEST(FusedOps, EmbeddingRejectsAnOutputDTypeItCannotGive) {
  Variable wte(randomTensor({5, 3}, 10)), wpe(randomTensor({4, 3}, 11));  // F64 tables
  EXPECT_THROW(ops::embedding(wte, wpe, Tensor::fromVector<int32_t>({1, 2}, {1, 2}), DType::BF16), Error);
  EXPECT_THROW(ops::embedding(wte, wpe, Tensor::fromVector<int32_t>({1, 2}, {1, 2}), DType::F32), Error);
}

// f throws the error that bf16 is CUDA-only.
void expectCudaOnly(const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA-only"), std::string::npos) << e.what();
  }
}

TEST(FusedOps, Bf16IsCudaOnly) {
  // The CPU keeps fp32/fp64 twins only: bf16 activations there (with valid fp32 parameters) are an error
  // naming the kernel.
  Tensor x = toBf16(randomTensor({2, 4}, 12), Device::CPU);
  Variable w(randomTensor({4}, 13).toDType(DType::F32)), b(randomTensor({4}, 14).toDType(DType::F32));
  expectCudaOnly([&] { ops::layerNorm(Variable(x), w, b); });
  expectCudaOnly([&] { ops::crossEntropy(Variable(x), Tensor::fromVector<int32_t>({0, 3}, {2})); });
  Variable wte(randomTensor({5, 4}, 15).toDType(DType::F32)), wpe(randomTensor({3, 4}, 16).toDType(DType::F32));
  expectCudaOnly([&] { ops::embedding(wte, wpe, Tensor::fromVector<int32_t>({1, 2}, {1, 2}), DType::BF16); });
}

// ---- CUDA against the CPU twin, at the shapes that exercise the scalable paths ----

// As in test_transformer_ops.cpp: a sum of `terms` products in two orders differs by up to about
// terms * eps; twice that plus a few ulp. A wrong index or a missed slice is off by O(1).
double sumTolerance(DType dtype, int64_t terms) { return 2.0 * static_cast<double>(terms + 4) * roundingEps(dtype); }

using FusedCudaVsCpu = testing::CudaVsCpuTest;

void expectAllClose(const std::vector<Tensor>& cuda, const std::vector<Tensor>& cpu, double tolerance) {
  ASSERT_EQ(cuda.size(), cpu.size());
  for (size_t i = 0; i < cuda.size(); ++i) EXPECT_LE(relativeError(cuda[i], cpu[i]), tolerance) << "result " << i;
}

TEST_P(FusedCudaVsCpu, LayerNormManySlicesAndInstalledGradients) {
  // N = 1500 rows split into row slices; C = 96 takes 16-byte loads, C = 77 the scalar path.
  const Fn f = [](const std::vector<Variable>& in) { return ops::layerNorm(in[0], in[1], in[2]); };
  for (int64_t C : {96, 77}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const int64_t N = 1500;
    const std::vector<Tensor> inputs{randomTensor({N, C}, 12, -2.0, 3.0), randomTensor({C}, 13, 0.5, 1.5),
                                     randomTensor({C}, 14)};
    expectClose(testing::compareDevices(f, inputs, GetParam()), sumTolerance(GetParam(), N));
    const Tensor upstream = randomTensor({N, C}, 15);
    expectAllClose(intoInstalledGradients(f, inputs, upstream, Device::CUDA, GetParam()),
                   intoInstalledGradients(f, inputs, upstream, Device::CPU, GetParam()), sumTolerance(GetParam(), N));
  }
}

TEST_P(FusedCudaVsCpu, RmsNormManySlicesAndInstalledGradients) {
  // As LayerNorm's: N = 1500 rows in row slices; C = 96 takes 16-byte loads, C = 77 the scalar path.
  const Fn f = [](const std::vector<Variable>& in) { return ops::rmsNorm(in[0], in[1]); };
  for (int64_t C : {96, 77}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const int64_t N = 1500;
    const std::vector<Tensor> inputs{randomTensor({N, C}, 16, -2.0, 3.0), randomTensor({C}, 17, 0.5, 1.5)};
    expectClose(testing::compareDevices(f, inputs, GetParam()), sumTolerance(GetParam(), N));
    const Tensor upstream = randomTensor({N, C}, 18);
    expectAllClose(intoInstalledGradients(f, inputs, upstream, Device::CUDA, GetParam()),
                   intoInstalledGradients(f, inputs, upstream, Device::CPU, GetParam()), sumTolerance(GetParam(), N));
  }
}

TEST_P(FusedCudaVsCpu, EmbeddingAtGpt2VocabularyIsExact) {
  // V = 50257 (GPT-2); 1024 random ids plus a run of one id (a long segment). Both devices add the same
  // numbers in position order onto the same start, so the bits agree, installed gradients or not.
  std::vector<int32_t> ids = randomIndices({4, 256}, 50257, 16).toVector<int32_t>();
  for (int i = 300; i < 400; ++i) ids[i] = 50256;
  Tensor tokens = Tensor::fromVector(ids, {4, 256});
  const Fn f = [tokens](const std::vector<Variable>& in) {
    return ops::embedding(in[0], in[1], tokens.to(in[0].device()));
  };
  const std::vector<Tensor> inputs{randomTensor({50257, 64}, 17), randomTensor({300, 64}, 18)};
  expectClose(testing::compareDevices(f, inputs, GetParam()), 0.0);
  const Tensor upstream = randomTensor({4, 256, 64}, 19);
  expectAllClose(intoInstalledGradients(f, inputs, upstream, Device::CUDA, GetParam()),
                 intoInstalledGradients(f, inputs, upstream, Device::CPU, GetParam()), 0.0);
}

TEST_P(FusedCudaVsCpu, CrossEntropyAtGpt2Vocabulary) {
  // V = 50257 is odd: every row starts at a different offset from a 16-byte boundary (head, packs, tail).
  // The logits come from an op, so the CUDA backward runs in place too.
  const int64_t N = 9, V = 50257;
  Tensor targets = randomIndices({N}, V, 20);
  const Fn f = [targets](const std::vector<Variable>& in) {
    return ops::crossEntropy(ops::scale(in[0], 1.0), targets.to(in[0].device()));
  };
  expectClose(testing::compareDevices(f, {randomTensor({N, V}, 21, -8.0, 8.0)}, GetParam(), 0.5, 1.5),
              sumTolerance(GetParam(), V));
}

#if MINIDP_WITH_CUDA
TEST_P(FusedCudaVsCpu, SumColumnsManySlices) {
  // N = 3000 rows over C = 70 columns: many row slices and a partial column tile; both output modes.
  const int64_t N = 3000, C = 70;
  const DType dtype = GetParam();
  Tensor x = randomTensor({N, C}, 22, -1.0, 1.0, dtype), start = randomTensor({C}, 23, -1.0, 1.0, dtype);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    Tensor cpuOut = start.clone(), cudaOut = start.to(Device::CUDA), xc = x.to(Device::CUDA);
    Tensor scratch = Tensor::empty({kernels::sumColumnsScratchSize(N, C)}, dtype, Device::CUDA);
    MINIDP_DISPATCH_FLOAT(dtype, T, {
      kernels::cpu::sumColumns<T>(x.data<T>(), cpuOut.data<T>(), nullptr, N, C, accumulate);
      kernels::cuda::sumColumns<T>(xc.data<T>(), cudaOut.data<T>(), scratch.data<T>(), N, C, accumulate,
                                   runtime::computeStream());
    });
    EXPECT_LE(relativeError(cudaOut, cpuOut), sumTolerance(dtype, N));
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedCudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

// ---- bf16 activations against float64 ----
//
// The bf16 inputs are rounded once; the float64 reference runs on those rounded values, so what is
// measured is the kernel's own arithmetic: fp32 accumulation (relative error ~1e-6 here) and the final
// rounding of bf16 outputs (at most 2^-9 of each value, so at most 2^-9 of the largest). Tolerances:
// 2^-8 for bf16 results (twice that rounding), 1e-4 for fp32 results. A wrong index is off by O(1).
constexpr double kBf16Tolerance = 1.0 / 256, kFp32Tolerance = 1e-4;

class Bf16VsFloat64 : public ::testing::Test {
 protected:
  void SetUp() override {
    MINIDP_SKIP_WITHOUT_CUDA();
  }
};

TEST_F(Bf16VsFloat64, LayerNorm) {
  const int64_t N = 700, C = 192;
  Tensor x = asF64(toBf16(randomTensor({N, C}, 24, -2.0, 3.0), Device::CPU));
  Tensor w = randomTensor({C}, 25, 0.5, 1.5), b = randomTensor({C}, 26);
  Tensor g = asF64(toBf16(randomTensor({N, C}, 27), Device::CPU));
  Variable xr(x, true), wr(w, true), br(b, true);
  Variable yr = ops::layerNorm(xr, wr, br);
  yr.backward(g);
  Variable xb(toBf16(x, Device::CUDA), true), wb(w.toDType(DType::F32).to(Device::CUDA), true),
      bb(b.toDType(DType::F32).to(Device::CUDA), true);
  Variable yb = ops::layerNorm(xb, wb, bb);
  ASSERT_EQ(yb.dtype(), DType::BF16);
  yb.backward(toBf16(g, Device::CUDA));
  EXPECT_LE(relativeError(asF64(yb.data()), yr.data()), kBf16Tolerance) << "y";
  EXPECT_LE(relativeError(asF64(xb.grad()), xr.grad()), kBf16Tolerance) << "dx";
  ASSERT_EQ(wb.grad().dtype(), DType::F32);
  EXPECT_LE(relativeError(wb.grad(), wr.grad()), kFp32Tolerance) << "dweight";
  EXPECT_LE(relativeError(bb.grad(), br.grad()), kFp32Tolerance) << "dbias";
}

TEST_F(Bf16VsFloat64, RmsNorm) {
  const int64_t N = 700, C = 192;
  Tensor x = asF64(toBf16(randomTensor({N, C}, 28, -2.0, 3.0), Device::CPU));
  Tensor w = randomTensor({C}, 29, 0.5, 1.5);
  Tensor g = asF64(toBf16(randomTensor({N, C}, 30), Device::CPU));
  Variable xr(x, true), wr(w, true);
  Variable yr = ops::rmsNorm(xr, wr);
  yr.backward(g);
  Variable xb(toBf16(x, Device::CUDA), true), wb(w.toDType(DType::F32).to(Device::CUDA), true);
  Variable yb = ops::rmsNorm(xb, wb);
  ASSERT_EQ(yb.dtype(), DType::BF16);
  yb.backward(toBf16(g, Device::CUDA));
  EXPECT_LE(relativeError(asF64(yb.data()), yr.data()), kBf16Tolerance) << "y";
  EXPECT_LE(relativeError(asF64(xb.grad()), xr.grad()), kBf16Tolerance) << "dx";
  ASSERT_EQ(wb.grad().dtype(), DType::F32);
  EXPECT_LE(relativeError(wb.grad(), wr.grad()), kFp32Tolerance) << "dweight";
}

TEST_F(Bf16VsFloat64, Embedding) {
  const int64_t V = 1000, Tmax = 64, C = 96;
  Tensor wte = asF64(randomTensor({V, C}, 28).toDType(DType::F32)),
         wpe = asF64(randomTensor({Tmax, C}, 29).toDType(DType::F32));
  Tensor tokens = randomIndices({8, 48}, 50, 30);  // 50 distinct ids at most: long segments
  Tensor g = asF64(toBf16(randomTensor({8, 48, C}, 31), Device::CPU));
  Variable er(wte, true), pr(wpe, true);
  Variable yr = ops::embedding(er, pr, tokens);
  yr.backward(g);
  Variable eb(wte.toDType(DType::F32).to(Device::CUDA), true), pb(wpe.toDType(DType::F32).to(Device::CUDA), true);
  Variable yb = ops::embedding(eb, pb, tokens.to(Device::CUDA), DType::BF16);
  ASSERT_EQ(yb.dtype(), DType::BF16);
  yb.backward(toBf16(g, Device::CUDA));
  EXPECT_LE(relativeError(asF64(yb.data()), yr.data()), kBf16Tolerance) << "out";
  ASSERT_EQ(eb.grad().dtype(), DType::F32);
  EXPECT_LE(relativeError(eb.grad(), er.grad()), kFp32Tolerance) << "dwte";
  EXPECT_LE(relativeError(pb.grad(), pr.grad()), kFp32Tolerance) << "dwpe";
}

TEST_F(Bf16VsFloat64, CrossEntropyAtGpt2Vocabulary) {
  const int64_t N = 6, V = 50257;
  Tensor logits = asF64(toBf16(randomTensor({N, V}, 32, -8.0, 8.0), Device::CPU));
  Tensor targets = randomIndices({N}, V, 33);
  Variable lr(logits, true);
  Variable lossR = ops::crossEntropy(lr, targets);
  lossR.backward();
  Variable lb(toBf16(logits, Device::CUDA), true);
  Variable lossB = ops::crossEntropy(lb, targets.to(Device::CUDA));
  ASSERT_EQ(lossB.dtype(), DType::F32);
  lossB.backward();
  EXPECT_LE(relativeError(lossB.data(), lossR.data()), 1e-5) << "loss";
  EXPECT_LE(relativeError(asF64(lb.grad()), lr.grad()), kBf16Tolerance) << "dlogits";
}

TEST_F(Bf16VsFloat64, BitwiseReproducible) {
  // embedding -> layerNorm -> cross-entropy in bf16, twice: the same loss and parameter gradients bit for
  // bit (fixed-order reductions, no atomics).
  const int64_t V = 3000, C = 64;
  Tensor tokens = randomIndices({4, 32}, 40, 37).to(Device::CUDA),
         targets = randomIndices({128}, 64, 38).to(Device::CUDA);
  std::vector<Tensor> params{randomTensor({V, C}, 39), randomTensor({32, C}, 40), randomTensor({C}, 41, 0.5, 1.5),
                             randomTensor({C}, 42)};
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    std::vector<Variable> p;
    for (const Tensor& t : params) p.emplace_back(t.toDType(DType::F32).to(Device::CUDA), true);
    Variable x = ops::layerNorm(ops::embedding(p[0], p[1], tokens, DType::BF16), p[2], p[3]);  // (4, 32, 64)
    Variable loss = ops::crossEntropy(ops::reshape(x, {128, C}), targets);
    loss.backward();
    std::vector<double> bits = asF64(loss.data()).toVector<double>();
    for (const Variable& v : p) {
      std::vector<double> g = asF64(v.grad()).toVector<double>();
      bits.insert(bits.end(), g.begin(), g.end());
    }
    runs.push_back(bits);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

#if MINIDP_WITH_CUDA
TEST_F(Bf16VsFloat64, AddBiasAndSumColumns) {
  // y (bf16) += bias (fp32); dbias (fp32) = column sums of bf16 rows, added onto an installed gradient.
  const int64_t N = 2000, C = 136;
  Tensor y = asF64(toBf16(randomTensor({N, C}, 34), Device::CPU)),
         bias = asF64(randomTensor({C}, 35).toDType(DType::F32));
  Tensor start = asF64(randomTensor({C}, 36).toDType(DType::F32));
  std::vector<double> yv = y.toVector<double>(), bv = bias.toVector<double>(), sv = start.toVector<double>();
  std::vector<double> added(yv.size()), sums = sv;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < C; ++c) {
      added[r * C + c] = yv[r * C + c] + bv[c];
      sums[c] += yv[r * C + c];
    }
  Tensor yb = toBf16(y, Device::CUDA), bb = bias.toDType(DType::F32).to(Device::CUDA);
  Tensor out = start.toDType(DType::F32).to(Device::CUDA);
  Tensor scratch = Tensor::empty({kernels::sumColumnsScratchSize(N, C)}, DType::F32, Device::CUDA);
  kernels::cuda::sumColumns<bf16>(yb.data<bf16>(), out.data<float>(), scratch.data<float>(), N, C, true,
                                  runtime::computeStream());
  EXPECT_LE(relativeError(out, Tensor::fromVector(sums, {C})), kFp32Tolerance) << "sumColumns";
  kernels::cuda::addBias<bf16>(yb.data<bf16>(), bb.data<float>(), N, C, runtime::computeStream());
  EXPECT_LE(relativeError(asF64(yb), Tensor::fromVector(added, {N, C})), kBf16Tolerance) << "addBias";
}
#endif

}  // namespace
}  // namespace minidp
