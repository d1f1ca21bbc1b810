// The fused classifier ops::linearCrossEntropy (logits in rows padded to 64, in-place dlogits, dweight into
// the installed gradient) against linear + crossEntropy, float64 finite differences, CUDA against the CPU
// and bf16 against float64; and the leading dimensions it rests on (kernels::GemmLd, the strided
// cross-entropy), whose padding columns stay untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "kernels/matmul.h"
#include "kernels/softmax_xent.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

using testing::randomIndices;
using testing::randomTensor;
using testing::relativeError;
using testing::sumTolerance;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

// A classifier problem: x (N, C), weight (V, C), targets (N) in [0, V). Logits of order 1..4.
struct Problem {
  Tensor x, w, targets;
};

Problem problem(int64_t N, int64_t C, int64_t V, uint64_t seed) {
  const double bound = 2.0 / std::sqrt(static_cast<double>(C));
  return {randomTensor({N, C}, seed, -1.0, 1.0), randomTensor({V, C}, seed + 1, -bound, bound),
          randomIndices({N}, static_cast<int32_t>(V), seed + 2)};
}

// Loss, dx and dweight of `loss(x, w)` on `device` in `dtype`, from leaves holding the problem's values.
std::vector<Tensor> lossAndGradients(const std::function<Variable(const Variable&, const Variable&)>& loss,
                                     const Problem& p, DType dtype, Device device = Device::CPU) {
  Variable x(p.x.toDType(dtype).to(device), true), w(p.w.toDType(dtype).to(device), true);
  Variable l = loss(x, w);
  l.backward();
  return {l.data(), x.grad(), w.grad()};
}

Variable fused(const Variable& x, const Variable& w, const Tensor& targets) {
  return ops::linearCrossEntropy(x, w, targets.to(x.device()));
}
Variable unfused(const Variable& x, const Variable& w, const Tensor& targets) {
  return ops::crossEntropy(ops::linear(x, w, Variable()), targets.to(x.device()));
}

const char* const kNames[] = {"loss", "dx", "dweight"};

// V odd (the GPT-2 vocabulary among them), and V a multiple of 64 (no padding).
const std::vector<int64_t> kVocabs = {257, 320, 50257};

TEST(LinearCrossEntropy, EqualsLinearThenCrossEntropy) {
  // The same GEMMs and kernels over a padded buffer: float64 agrees to 1e-12, float32 to the rounding of
  // the longest sum (the vocabulary's logsumexp and dx, the rows' dweight).
  for (int64_t V : kVocabs) {
    const int64_t N = V > 1000 ? 5 : 33, C = V > 1000 ? 16 : 24;
    const Problem p = problem(N, C, V, 1);
    for (DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE("V = " + std::to_string(V) + ", " + dtypeName(dtype));
      const double tolerance = dtype == DType::F64 ? 1e-12 : sumTolerance(dtype, std::max({N, C, V}));
      const auto a =
          lossAndGradients([&](const Variable& x, const Variable& w) { return fused(x, w, p.targets); }, p, dtype);
      const auto b =
          lossAndGradients([&](const Variable& x, const Variable& w) { return unfused(x, w, p.targets); }, p, dtype);
      ASSERT_EQ(a[0].dtype(), dtype);
      for (int i = 0; i < 3; ++i) EXPECT_LE(relativeError(a[i], b[i]), tolerance) << kNames[i];
    }
  }
}

TEST(LinearCrossEntropy, TakesLeadingDimensions) {
  // x (B, T, C) is N = B * T rows, as the GPT's final LayerNorm gives it.
  const Problem p = problem(12, 8, 67, 4);
  Tensor x3 = p.x.clone().view({3, 4, 8});
  Variable a(x3, true), b(p.x.clone(), true), w1(p.w.clone(), true), w2(p.w.clone(), true);
  Variable la = ops::linearCrossEntropy(a, w1, p.targets), lb = ops::linearCrossEntropy(b, w2, p.targets);
  la.backward();
  lb.backward();
  EXPECT_EQ(la.data().toVector<double>(), lb.data().toVector<double>());
  EXPECT_EQ(a.grad().shape(), (Shape{3, 4, 8}));
  EXPECT_EQ(a.grad().toVector<double>(), b.grad().toVector<double>());
  EXPECT_EQ(w1.grad().toVector<double>(), w2.grad().toVector<double>());
}

TEST(LinearCrossEntropy, Gradcheck) {
  for (int64_t V : {67, 64}) {
    SCOPED_TRACE("V = " + std::to_string(V));
    const Problem p = problem(6, 5, V, 7);
    Tensor targets = p.targets;
    EXPECT_TRUE(testing::gradcheckPasses(
        [targets](const std::vector<Variable>& in) { return ops::linearCrossEntropy(in[0], in[1], targets); },
        {Variable(p.x, true), Variable(p.w, true)}));
  }
}

TEST(LinearCrossEntropy, AddsIntoTheInstalledWeightGradient) {
  // As under DDP: dweight goes into the installed tensor (a bucket view), added to what it held.
  const Problem p = problem(9, 6, 131, 10);
  const auto fresh =
      lossAndGradients([&](const Variable& x, const Variable& w) { return fused(x, w, p.targets); }, p, DType::F64);
  Variable x(p.x.clone(), true), w(p.w.clone(), true);
  Tensor start = randomTensor(p.w.shape(), 13), installed = start.clone();
  w.setGrad(installed);
  ops::linearCrossEntropy(x, w, p.targets).backward();
  EXPECT_TRUE(w.grad().sharesStorage(installed));
  std::vector<double> got = w.grad().toVector<double>(), s = start.toVector<double>(), g = fresh[2].toVector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], s[i] + g[i], 1e-12) << "element " << i;
  EXPECT_LE(relativeError(x.grad(), fresh[1]), 1e-12);
}

TEST(LinearCrossEntropy, RejectsBadArguments) {
  const Problem p = problem(4, 3, 10, 14);
  Variable x(p.x), w(p.w);
  EXPECT_THROW(ops::linearCrossEntropy(x, w, Tensor::fromVector<int32_t>({0, 1, 10, 2}, {4})), Error);  // target >= V
  EXPECT_THROW(ops::linearCrossEntropy(x, w, Tensor::fromVector<int32_t>({0, 1, 2}, {3})), Error);      // N mismatch
  EXPECT_THROW(ops::linearCrossEntropy(x, Variable(randomTensor({10, 4}, 15)), p.targets), Error);      // C mismatch
  EXPECT_THROW(ops::linearCrossEntropy(x, Variable(p.w.toDType(DType::F32)), p.targets), Error);        // dtypes
}

// The forward writes the gradient of the mean loss for an upstream 1 over the logits, and the backward
// applies the upstream gradient: seeded with 0.375 (exact in every dtype), the gradients are 0.375 times
// backward()'s, up to one more rounding of each dlogit (2^-53, 2^-24, 2^-8 relative) carried through the
// GEMMs' sums, and the loss is the same. A forward without the graph (no gradient written) gives the same
// loss bits. On the CPU in fp64 and fp32; on CUDA in fp32 and bf16 (fp32 weight).
TEST(LinearCrossEntropy, AppliesTheUpstreamGradient) {
  struct Run {
    Device device;
    DType x, w;
    double tolerance;
  };
  std::vector<Run> runs{{Device::CPU, DType::F64, DType::F64, 1e-13}, {Device::CPU, DType::F32, DType::F32, 1e-5}};
  if (runtime::cudaAvailable()) {
    runs.push_back({Device::CUDA, DType::F32, DType::F32, 1e-5});
    runs.push_back({Device::CUDA, DType::BF16, DType::F32, 1.0 / 64});
  }
  const auto host = [](const Tensor& t) { return t.toDType(DType::F64).to(Device::CPU).toVector<double>(); };
  for (const Run& r : runs) {
    for (int64_t V : {257, 50257}) {
      SCOPED_TRACE(std::string(deviceName(r.device)) + " " + dtypeName(r.x) + " V = " + std::to_string(V));
      const Problem p = problem(V > 1000 ? 6 : 40, 32, V, 60);
      const auto leaves = [&] {
        return std::vector<Variable>{Variable(p.x.toDType(r.x).to(r.device), true),
                                     Variable(p.w.toDType(r.w).to(r.device), true)};
      };
      const auto run = [&](double g) {  // g = 0: backward()
        std::vector<Variable> in = leaves();
        Variable loss = fused(in[0], in[1], p.targets);
        if (g == 0) {
          loss.backward();
        } else {
          loss.backward(ops::full({1}, g, loss.dtype(), r.device));
        }
        return std::vector<std::vector<double>>{host(loss.data()), host(in[0].grad()), host(in[1].grad())};
      };
      const auto plain = run(0), scaled = run(0.375);
      EXPECT_EQ(scaled[0], plain[0]) << "loss";
      for (int i = 1; i < 3; ++i) {
        std::vector<double> expected = plain[i];
        for (double& v : expected) v *= 0.375;
        EXPECT_LE(relativeError(Tensor::fromVector(scaled[i], {static_cast<int64_t>(scaled[i].size())}),
                                Tensor::fromVector(expected, {static_cast<int64_t>(expected.size())})),
                  r.tolerance)
            << kNames[i];
      }
      NoGradGuard noGrad;
      std::vector<Variable> in = leaves();
      EXPECT_EQ(host(fused(in[0], in[1], p.targets).data()), plain[0]) << "the loss without the graph";
    }
  }
}

// ---- the leading dimensions underneath ----

constexpr double kSentinel = 12345.0;  // what the padding columns hold before and after

// A (rows, ld) buffer holding m (rows, cols) in its first columns and kSentinel elsewhere.
std::vector<double> padded(const std::vector<double>& m, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<double> out(rows * ld, kSentinel);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(m.begin() + r * cols, cols, out.begin() + r * ld);
  return out;
}

// The first `cols` columns of each row of a (rows, ld) buffer; every other column must still be kSentinel.
std::vector<double> unpadded(const std::vector<double>& buffer, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    out.insert(out.end(), buffer.begin() + r * ld, buffer.begin() + r * ld + cols);
    for (int64_t j = cols; j < ld; ++j) EXPECT_EQ(buffer[r * ld + j], kSentinel) << "row " << r << " column " << j;
  }
  return out;
}

TEST(GemmLeadingDimensions, CpuEqualsPackedAndLeavesPaddingAlone) {
  // Every transpose combination with all three matrices padded, beta 0 and beta 1: the same bits as the
  // packed product (Eigen blocks by size, not by stride), and no write outside the (M, N) block.
  const int64_t M = 7, N = 9, K = 5, pad = 3;
  for (bool transA : {false, true})
    for (bool transB : {false, true})
      for (double beta : {0.0, 1.0}) {
        SCOPED_TRACE(::testing::Message() << "transA " << transA << " transB " << transB << " beta " << beta);
        const int64_t rowsA = transA ? K : M, colsA = transA ? M : K, rowsB = transB ? N : K, colsB = transB ? K : N;
        std::vector<double> a = randomTensor({rowsA, colsA}, 20).toVector<double>(),
                            b = randomTensor({rowsB, colsB}, 21).toVector<double>(),
                            c = randomTensor({M, N}, 22).toVector<double>();
        std::vector<double> pa = padded(a, rowsA, colsA, colsA + pad), pb = padded(b, rowsB, colsB, colsB + pad),
                            pc = padded(c, M, N, N + pad);
        kernels::cpu::gemm<double>(transA, transB, M, N, K, 1.0, a.data(), 0, b.data(), 0, beta, c.data(), 0, 1);
        kernels::cpu::gemm<double>(transA, transB, M, N, K, 1.0, pa.data(), 0, pb.data(), 0, beta, pc.data(), 0, 1,
                                   kernels::GemmLd{colsA + pad, colsB + pad, N + pad});
        EXPECT_EQ(unpadded(pc, M, N, N + pad), c);
        unpadded(pa, rowsA, colsA, colsA + pad);
        unpadded(pb, rowsB, colsB, colsB + pad);
      }
  std::vector<double> a(M * K), b(K * N), c(M * N);
  EXPECT_THROW(kernels::cpu::gemm<double>(false, false, M, N, K, 1.0, a.data(), 0, b.data(), 0, 0.0, c.data(), 0, 1,
                                          kernels::GemmLd{0, 0, N - 1}),
               Error);
}

TEST(StridedCrossEntropy, CpuEqualsPackedAndLeavesPaddingAlone) {
  const int64_t N = 4, V = 13, ld = 64;
  std::vector<double> logits = randomTensor({N, V}, 30, -3.0, 3.0).toVector<double>();
  std::vector<int32_t> targets = randomIndices({N}, V, 31).toVector<int32_t>();
  std::vector<double> loss(N), lse(N), ploss(N), plse(N), g{0.75};
  std::vector<double> buffer = padded(logits, N, V, ld);
  kernels::cpu::softmaxXentForward<double>(logits.data(), targets.data(), loss.data(), lse.data(), N, V, V);
  kernels::cpu::softmaxXentForward<double>(buffer.data(), targets.data(), ploss.data(), plse.data(), N, V, ld);
  EXPECT_EQ(ploss, loss);
  EXPECT_EQ(plse, lse);
  // In place, as the classifier runs it.
  kernels::cpu::softmaxXentBackward<double>(logits.data(), targets.data(), lse.data(), g.data(), logits.data(), N, V,
                                            V);
  kernels::cpu::softmaxXentBackward<double>(buffer.data(), targets.data(), lse.data(), g.data(), buffer.data(), N, V,
                                            ld);
  EXPECT_EQ(unpadded(buffer, N, V, ld), logits);
  EXPECT_THROW(
      kernels::cpu::softmaxXentForward<double>(buffer.data(), targets.data(), ploss.data(), plse.data(), N, V, V - 1),
      Error);
}

// ---- CUDA ----

using ClassifierCudaVsCpu = testing::CudaVsCpuTest;

TEST_P(ClassifierCudaVsCpu, LossAndGradients) {
  // The padded ld reaches cuBLAS (C, then A and A^T of the two backward GEMMs) and the strided kernels.
  for (int64_t V : kVocabs) {
    SCOPED_TRACE("V = " + std::to_string(V));
    const int64_t N = V > 1000 ? 9 : 40, C = V > 1000 ? 32 : 48;
    const Problem p = problem(N, C, V, 40);
    Tensor targets = p.targets;
    const Fn f = [targets](const std::vector<Variable>& in) { return fused(in[0], in[1], targets); };
    expectClose(testing::compareDevices(f, {p.x, p.w}, GetParam(), 0.5, 1.5),
                sumTolerance(GetParam(), std::max({N, C, V})));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ClassifierCudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

// x and the weight rounded to bf16 / fp32 (the values the bf16 op computes with), as float64 CPU tensors.
Tensor roundedToBf16(const Tensor& t) {
  std::vector<double> v;
  for (double x : t.toVector<double>()) v.push_back(bf16ToFloat(floatToBf16(static_cast<float>(x))));
  return Tensor::fromVector(v, t.shape());
}

TEST(ClassifierBf16, MatchesFloat64) {
  // bf16 x and the bf16 copy of the fp32 weight; float64 reference on the same rounded values. Each logit
  // (standard deviation 2/3 here, a few at most) is rounded to bf16 once (2^-9 relative), which moves the
  // loss (about log V >= 5.5) by well under 1e-2 relative. dlogits carry that error through exp plus their
  // own bf16 rounding, a few 2^-9 of each softmax term; dx and dweight sum them against order-1 values:
  // within 2^-5 of their largest element. A wrong stride, row or scale is off by O(1).
  MINIDP_SKIP_WITHOUT_CUDA();
  for (int64_t V : kVocabs) {
    SCOPED_TRACE("V = " + std::to_string(V));
    const int64_t N = V > 1000 ? 6 : 64, C = 64;
    Problem p = problem(N, C, V, 50);
    p.x = roundedToBf16(p.x);
    p.w = roundedToBf16(p.w);
    Variable xr(p.x, true), wr(p.w, true);
    Variable lossR = unfused(xr, wr, p.targets);
    lossR.backward();

    std::vector<bf16> xb;
    for (double v : p.x.toVector<double>()) xb.push_back(floatToBf16(static_cast<float>(v)));
    Variable x(Tensor::fromVector(xb, p.x.shape(), Device::CUDA), true);
    Variable w(p.w.toDType(DType::F32).to(Device::CUDA), true);
    Tensor start = randomTensor(p.w.shape(), 51, -1.0, 1.0, DType::F32);
    w.setGrad(start.to(Device::CUDA));  // dweight adds into an installed fp32 gradient
    Variable loss = ops::linearCrossEntropy(x, w, p.targets.to(Device::CUDA));
    ASSERT_EQ(loss.dtype(), DType::F32);
    loss.backward();
    EXPECT_LE(relativeError(loss.data(), lossR.data()), 1e-2) << "loss";
    ASSERT_EQ(x.grad().dtype(), DType::BF16);
    std::vector<double> dx;
    const Tensor dxHost = x.grad().to(Device::CPU);
    for (int64_t i = 0; i < dxHost.numel(); ++i) dx.push_back(bf16ToFloat(dxHost.data<bf16>()[i]));
    EXPECT_LE(relativeError(Tensor::fromVector(dx, p.x.shape()), xr.grad()), 1.0 / 32) << "dx";
    ASSERT_EQ(w.grad().dtype(), DType::F32);
    Tensor dw = w.grad().toDType(DType::F64).to(Device::CPU);
    std::vector<double> added = dw.toVector<double>(), s = start.toDType(DType::F64).toVector<double>();
    for (size_t i = 0; i < added.size(); ++i) added[i] -= s[i];
    EXPECT_LE(relativeError(Tensor::fromVector(added, p.w.shape()), wr.grad()), 1.0 / 32) << "dweight";
  }
}

}  // namespace
}  // namespace minidp
