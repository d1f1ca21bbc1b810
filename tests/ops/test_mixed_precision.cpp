// Mixed precision ops: the cast op and host bf16 rounding, bf16 GEMMs against a float64 reference, bf16
// linear and elementwise ops against their fp32 runs on CUDA, TF32, and gradients written straight into
// an installed gradient (a DDP bucket view) byte for byte as the returned-gradient path wrote them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "framework/distributed/gradient/ddp.h"
#include "framework/nn/linear.h"
#include "framework/ops/compute_copies.h"
#include "framework/ops/ops.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/tensor/dispatch.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "kernels/gelu_math.h"
#include "kernels/matmul.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

using testing::randomTensor;
using testing::relativeError;
using testing::relativeL2;

// Byte-for-byte equality of two tensors' host copies.
bool sameBytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::CPU), y = b.to(Device::CPU);
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

std::vector<uint16_t> bf16Bits(const Tensor& t) {
  std::vector<uint16_t> bits;
  for (bf16 v : t.toVector<bf16>()) bits.push_back(v.bits);
  return bits;
}

// ---- cast and host conversion ----

TEST(Cast, HostBf16RoundsToNearestEven) {
  // bf16 keeps 7 mantissa bits: the spacing above 1 is 2^-7. Ties go to the even mantissa.
  const double u = std::ldexp(1.0, -8);  // half a bf16 step at 1
  const std::vector<double> in{1.0, 1 + u, 1 + 3 * u, 1 + u + u / 16, -2.5, 0.0, -(1 + 5 * u)};
  const std::vector<double> expected{1.0, 1.0, 1 + 4 * u, 1 + 2 * u, -2.5, 0.0, -(1 + 4 * u)};
  const Tensor x = Tensor::fromVector(in, {7});
  const Tensor b = x.toDType(DType::F32).toDType(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(bf16Bits(b)[0], 0x3F80);  // 1.0: the upper half of 0x3F800000
  EXPECT_EQ(b.toDType(DType::F64).toVector<double>(), expected);
  // float64 -> bf16 rounds through float32, as the CUDA kernel does.
  EXPECT_EQ(bf16Bits(x.toDType(DType::BF16)), bf16Bits(b));
}

TEST(Cast, HostFp16RoundsToNearestEven) {
  // Every half value survives the round trip through float; a float halfway between two neighbouring halves
  // (normal or subnormal) goes to the even one, one ulp above it to the upper; 65520 and beyond overflow.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const fp16 h{static_cast<uint16_t>(bits)};
    const float f = fp16ToFloat(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToFp16(f).bits, bits);
  }
  for (uint32_t bits = 0; bits < 0x7bff; ++bits) {
    const double lo = fp16ToFloat(fp16{static_cast<uint16_t>(bits)});
    const double hi = fp16ToFloat(fp16{static_cast<uint16_t>(bits + 1)});
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: halves have 11 significant bits
    ASSERT_EQ(floatToFp16(mid).bits, bits % 2 == 0 ? bits : bits + 1) << lo;
    ASSERT_EQ(floatToFp16(std::nextafter(mid, 1e30f)).bits, bits + 1) << lo;
  }
  EXPECT_EQ(fp16ToFloat(floatToFp16(65519.0f)), 65504.0f);
  EXPECT_EQ(floatToFp16(65520.0f).bits, 0x7c00);                // +inf
  EXPECT_EQ(floatToFp16(-1e-8f).bits, 0x8000);                  // -0
  EXPECT_EQ(fp16ToFloat(fp16{0x0001}), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_TRUE(std::isnan(fp16ToFloat(floatToFp16(NAN))));
}

TEST(Cast, CpuFloatDoubleAndBackwardCastsTheGradientBack) {
  const Tensor x64 = randomTensor({3, 5}, 1);
  const Variable x(x64, true);
  const Variable y = ops::cast(x, DType::F32);
  ASSERT_EQ(y.dtype(), DType::F32);
  const std::vector<double> xv = x64.toVector<double>();
  const std::vector<float> yv = y.data().toVector<float>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(yv[i], static_cast<float>(xv[i])) << i;
  const Tensor g = randomTensor({3, 5}, 2, -1, 1, DType::F32);
  Variable(y).backward(g);
  ASSERT_EQ(x.grad().dtype(), DType::F64);
  EXPECT_TRUE(sameBytes(x.grad(), g.toDType(DType::F64)));  // float -> double is exact
  // Casting to its own dtype is the identity: the same variable, no new node.
  EXPECT_EQ(ops::cast(x, DType::F64).id(), x.id());
}

TEST(Cast, CudaMatchesHostConversion) {
  MINIDP_SKIP_WITHOUT_CUDA();
  for (DType from : {DType::F32, DType::F64}) {
    const Tensor host = randomTensor({1000}, 3, -100, 100, from);
    const Tensor b = ops::cast(host.to(Device::CUDA), DType::BF16);
    EXPECT_EQ(bf16Bits(b), bf16Bits(host.toDType(DType::BF16))) << dtypeName(from);
    // bf16 -> fp32/fp64 is exact on both.
    EXPECT_TRUE(sameBytes(ops::cast(b, from), host.toDType(DType::BF16).toDType(from))) << dtypeName(from);
  }
}

// ---- GEMMs ----

struct GemmCase {
  bool transA, transB;
  int64_t M, N, K, batch;
};

// Reference in float64 from the (bf16-exact) inputs: C[b] = beta C0[b] + op(A[b]) op(B[b]) (+ bias).
// The float64 reference, from the CPU backend's GEMM (Eigen): the GPT-2 weight-gradient shapes below are
// seconds there and minutes in a plain triple loop.
std::vector<double> referenceGemm(const GemmCase& c, const std::vector<double>& a, const std::vector<double>& b,
                                  double beta, const std::vector<double>& c0, const std::vector<double>* bias) {
  std::vector<double> out(c0.begin(), c0.begin() + c.batch * c.M * c.N);
  kernels::cpu::gemm<double>(c.transA, c.transB, c.M, c.N, c.K, 1.0, a.data(), c.M * c.K, b.data(), c.K * c.N, beta,
                             out.data(), c.M * c.N, c.batch);
  if (bias) {
    for (size_t i = 0; i < out.size(); ++i) out[i] += (*bias)[i % c.N];
  }
  return out;
}

// Tolerances: inputs are bf16-exact, so the error is fp32 accumulation (~1e-6 relative) plus the
// output's rounding: 2^-9 relative per element for bf16 outputs, fp32 rounding for fp32 outputs.
constexpr double kBf16OutTolerance = 1e-2;
constexpr double kF32OutTolerance = 1e-5;

void checkGemmsMatchFloat64() {
  const std::vector<GemmCase> cases{
      {false, false, 64, 96, 128, 1}, {false, true, 64, 96, 128, 1}, {true, false, 64, 96, 128, 1},
      {true, true, 64, 96, 128, 1},   {false, true, 37, 45, 29, 1},  {false, false, 16, 24, 32, 3},
      {true, false, 1, 40, 300, 1},   {false, true, 1, 10, 16, 1},   {false, true, 32, 10, 64, 1}};
  uint64_t seed = 10;
  for (const GemmCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "transA " << c.transA << " transB " << c.transB << " M " << c.M << " N " << c.N
                                      << " K " << c.K << " batch " << c.batch);
    // bf16-exact inputs: float64 values rounded to bf16 and back.
    const Tensor a = randomTensor({c.batch, c.M * c.K}, ++seed).toDType(DType::BF16);
    const Tensor b = randomTensor({c.batch, c.K * c.N}, ++seed).toDType(DType::BF16);
    const Tensor c0 = randomTensor({c.batch, c.M * c.N}, ++seed).toDType(DType::BF16);
    const Tensor bias = randomTensor({c.N}, ++seed).toDType(DType::BF16);
    const std::vector<double> av = a.toDType(DType::F64).toVector<double>(),
                              bv = b.toDType(DType::F64).toVector<double>(),
                              c0v = c0.toDType(DType::F64).toVector<double>(),
                              biasv = bias.toDType(DType::F64).toVector<double>();
    const Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA);
    const int64_t sA = c.M * c.K, sB = c.K * c.N, sC = c.M * c.N;
    const auto run = [&](DType outType, double beta, bool withBias) {
      Tensor out = c0.toDType(outType).to(Device::CUDA);
      const Tensor dbias = bias.toDType(outType).to(Device::CUDA);
      if (outType == DType::BF16) {
        MINIDP_ON_CUDA(kernels::cuda::gemmBf16<bf16>(
            c.transA, c.transB, c.M, c.N, c.K, 1.0f, da.data<bf16>(), sA, db.data<bf16>(), sB, static_cast<float>(beta),
            out.data<bf16>(), sC, c.batch, withBias ? dbias.data<bf16>() : nullptr, runtime::computeStream()));
      } else {
        MINIDP_ON_CUDA(kernels::cuda::gemmBf16<float>(
            c.transA, c.transB, c.M, c.N, c.K, 1.0f, da.data<bf16>(), sA, db.data<bf16>(), sB, static_cast<float>(beta),
            out.data<float>(), sC, c.batch, withBias ? dbias.data<float>() : nullptr, runtime::computeStream()));
      }
      return out;
    };
    for (DType outType : {DType::BF16, DType::F32}) {
      const double tolerance = outType == DType::BF16 ? kBf16OutTolerance : kF32OutTolerance;
      for (double beta : {0.0, 1.0}) {
        const Tensor expected = Tensor::fromVector(referenceGemm(c, av, bv, beta, c0v, nullptr), {c.batch, c.M * c.N});
        EXPECT_LT(relativeL2(run(outType, beta, false), expected), tolerance) << dtypeName(outType) << " beta " << beta;
      }
      if (c.batch == 1) {
        const Tensor expected = Tensor::fromVector(referenceGemm(c, av, bv, 0.0, c0v, &biasv), {1, c.M * c.N});
        EXPECT_LT(relativeL2(run(outType, 0.0, true), expected), tolerance) << dtypeName(outType) << " with bias";
      }
    }
  }
}

TEST(GemmBf16, MatchesFloat64Reference) {
  MINIDP_SKIP_WITHOUT_CUDA();
  checkGemmsMatchFloat64();
}

// gemmBf16Addend: C = op(A) op(B) + addend (+ bias) with the addend in a tensor of its own (a residual), bf16
// out, batch 1, against float64; the output starts as NaN (every element written from the addend, not
// from what C held) and the addend is left as it was. The one-row shapes take the general GEMM, whose path
// copies the addend into C first.
void checkAddendApartFromTheOutput() {
  const std::vector<GemmCase> cases{{false, true, 64, 96, 128, 1},
                                    {false, true, 37, 45, 29, 1},
                                    {true, false, 1, 40, 300, 1},
                                    {false, true, 1, 10, 16, 1}};
  uint64_t seed = 60;
  for (const GemmCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "M " << c.M << " N " << c.N << " K " << c.K);
    const Tensor a = randomTensor({1, c.M * c.K}, ++seed).toDType(DType::BF16);
    const Tensor b = randomTensor({1, c.K * c.N}, ++seed).toDType(DType::BF16);
    const Tensor addend = randomTensor({1, c.M * c.N}, ++seed).toDType(DType::BF16);
    const Tensor bias = randomTensor({c.N}, ++seed).toDType(DType::BF16);
    const std::vector<double> av = a.toDType(DType::F64).toVector<double>(),
                              bv = b.toDType(DType::F64).toVector<double>(),
                              addv = addend.toDType(DType::F64).toVector<double>(),
                              biasv = bias.toDType(DType::F64).toVector<double>();
    const Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA), dadd = addend.to(Device::CUDA),
                 dbias = bias.to(Device::CUDA);
    for (bool withBias : {false, true}) {
      Tensor out =
          Tensor::fromVector(std::vector<double>(c.M * c.N, NAN), {1, c.M * c.N}).toDType(DType::BF16).to(Device::CUDA);
      MINIDP_ON_CUDA(kernels::cuda::gemmBf16Addend<bf16>(c.transA, c.transB, c.M, c.N, c.K, 1.0f, da.data<bf16>(), 0,
                                                         db.data<bf16>(), 0, 1.0f, dadd.data<bf16>(), out.data<bf16>(),
                                                         0, 1, withBias ? dbias.data<bf16>() : nullptr,
                                                         kernels::GemmLd{}, runtime::computeStream()));
      const Tensor expected =
          Tensor::fromVector(referenceGemm(c, av, bv, 1.0, addv, withBias ? &biasv : nullptr), {1, c.M * c.N});
      EXPECT_LT(relativeL2(out, expected), kBf16OutTolerance) << "bias " << withBias;
      EXPECT_EQ(dadd.toDType(DType::F64).to(Device::CPU).toVector<double>(), addv) << "the addend changed";
    }
  }
}

TEST(GemmBf16, AddendApartFromTheOutput) {
  MINIDP_SKIP_WITHOUT_CUDA();
  checkAddendApartFromTheOutput();
}

// The GELU MLP's epilogues against float64. Per element: the pre-activation saved as aux, GELU of it and
// the product times GELU's derivative at the saved aux, within one bf16 rounding (two for the aux and the
// derivative, which cuBLASLt may round twice) plus what a fast tanh
// (~2^-11 relative) could add; a wrong index, bias or formula is off by far more. Which GELU: over
// pre-activations in [-3, -2] the erf form lies below the tanh form by 1e-4 to 4.7e-4 (3.7e-4 on average),
// so the mean signed error against the tanh form must stay under 1.5e-4 (bf16 rounding averages out).
// Biases spread over [-4, 4] put pre-activations all along GELU's curve; the one-row and odd shapes may
// take the general GEMM with the epilogue in a pass of its own.
void checkGeluEpiloguesAreTheTanhForm() {
  const std::vector<GemmCase> cases{{false, true, 64, 96, 128, 1},
                                    {false, false, 64, 96, 128, 1},
                                    {false, true, 1, 40, 64, 1},
                                    {false, true, 37, 48, 29, 1}};
  uint64_t seed = 60;
  for (const GemmCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "transA " << c.transA << " transB " << c.transB << " M " << c.M << " N " << c.N
                                      << " K " << c.K);
    const Tensor a = randomTensor({c.M * c.K}, ++seed, -0.1, 0.1).toDType(DType::BF16);
    const Tensor b = randomTensor({c.K * c.N}, ++seed, -0.1, 0.1).toDType(DType::BF16);
    std::vector<double> spread(c.N);
    for (int64_t n = 0; n < c.N; ++n) spread[n] = -4.0 + 8.0 * static_cast<double>(n) / static_cast<double>(c.N - 1);
    const Tensor bias = Tensor::fromVector(spread, {c.N}).toDType(DType::BF16);
    const std::vector<double> av = a.toDType(DType::F64).toVector<double>(),
                              bv = b.toDType(DType::F64).toVector<double>(),
                              biasv = bias.toDType(DType::F64).toVector<double>(), zeros(c.M * c.N, 0.0);
    const std::vector<double> product = referenceGemm(c, av, bv, 0.0, zeros, nullptr);
    const std::vector<double> pre = referenceGemm(c, av, bv, 0.0, zeros, &biasv);
    const Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA), dbias = bias.to(Device::CUDA);
    const Tensor out = Tensor::empty({c.M, c.N}, DType::BF16, Device::CUDA);
    const Tensor aux = Tensor::empty({c.M, c.N}, DType::BF16, Device::CUDA);
    const Tensor dpre = Tensor::empty({c.M, c.N}, DType::BF16, Device::CUDA);
    MINIDP_ON_CUDA(kernels::cuda::gemmBf16GeluBias(c.transA, c.transB, c.M, c.N, c.K, da.data<bf16>(), db.data<bf16>(),
                                                   dbias.data<bf16>(), out.data<bf16>(), aux.data<bf16>(),
                                                   runtime::computeStream()));
    MINIDP_ON_CUDA(kernels::cuda::gemmBf16DGelu(c.transA, c.transB, c.M, c.N, c.K, da.data<bf16>(), db.data<bf16>(),
                                                aux.data<bf16>(), dpre.data<bf16>(), runtime::computeStream()));
    const std::vector<double> outv = out.toDType(DType::F64).toVector<double>(),
                              auxv = aux.toDType(DType::F64).toVector<double>(),
                              dprev = dpre.toDType(DType::F64).toVector<double>();
    const double bf16Step = std::ldexp(1.0, -8), fastTanh = std::ldexp(1.0, -10);
    int bad = 0;
    double signedSum = 0;
    int64_t inRange = 0;
    for (int64_t i = 0; i < c.M * c.N; ++i) {
      const double gelu = kernels::geluValue(pre[i]), dgelu = product[i] * kernels::geluDerivative(auxv[i]);
      // pre: up to two roundings too (the product, then product + bias; seen on the H200: one element of
      // 1776 at 1.04x a one-rounding bound).
      const bool preOk = std::abs(auxv[i] - pre[i]) <= 2 * bf16Step * std::abs(pre[i]) + 1e-5;
      const bool geluOk = std::abs(outv[i] - gelu) <= bf16Step * std::abs(gelu) + fastTanh * std::abs(pre[i]) + 1e-5;
      // dgelu: up to two roundings (cuBLASLt may round the product before the derivative's multiply; seen on
      // the H200: one element of 6144 at 1.01x a one-rounding bound).
      const bool dgeluOk =
          std::abs(dprev[i] - dgelu) <=
          2 * bf16Step * std::abs(dgelu) + fastTanh * std::abs(product[i]) * (1 + 2 * auxv[i] * auxv[i]) + 1e-6;
      if (!(preOk && geluOk && dgeluOk) && ++bad <= 5) {
        ADD_FAILURE() << "element " << i << ": pre " << auxv[i] << " (float64 " << pre[i] << "), gelu " << outv[i]
                      << " (tanh form " << gelu << "), dgelu " << dprev[i] << " (tanh form " << dgelu << ")";
      }
      if (pre[i] >= -3 && pre[i] <= -2) {
        signedSum += outv[i] - gelu;
        ++inRange;
      }
    }
    EXPECT_EQ(bad, 0);
    ASSERT_GT(inRange, 0);
    EXPECT_LT(std::abs(signedSum / static_cast<double>(inRange)), 1.5e-4)
        << "mean GELU error over " << inRange << " pre-activations in [-3, -2]: the erf form gives about -3.7e-4";
  }
}

TEST(GemmBf16, GeluEpiloguesAreTheTanhForm) {
  MINIDP_SKIP_WITHOUT_CUDA();
  checkGeluEpiloguesAreTheTanhForm();
}

TEST(GemmTf32, CloseToFloat64AndOffIsExactAgain) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const int64_t M = 96, N = 80, K = 256;
  const Tensor a = randomTensor({M, K}, 21, -1, 1, DType::F32), b = randomTensor({K, N}, 22, -1, 1, DType::F32);
  const Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA);
  const auto run = [&] {
    Tensor c = Tensor::empty({M, N}, DType::F32, Device::CUDA);
    MINIDP_ON_CUDA(kernels::cuda::gemm<float>(false, false, M, N, K, 1.0f, da.data<float>(), 0, db.data<float>(), 0,
                                              0.0f, c.data<float>(), 0, 1, runtime::computeStream()));
    return c;
  };
  const Tensor exact = run();
  ops::setFp32Gemm(ops::Fp32Gemm::Tf32);
  const Tensor tf32 = run();
  ops::setFp32Gemm(ops::Fp32Gemm::Exact);
  const std::vector<double> av = a.toDType(DType::F64).toVector<double>(),
                            bv = b.toDType(DType::F64).toVector<double>();
  const Tensor expected = Tensor::fromVector(
      referenceGemm({false, false, M, N, K, 1}, av, bv, 0, std::vector<double>(M * N), nullptr), {M, N});
  // TF32 keeps 10 mantissa bits of each input: errors near 2^-11 relative, far below 1e-2; exact fp32 ~1e-6.
  EXPECT_LT(relativeL2(tf32, expected), 1e-2);
  EXPECT_LT(relativeL2(exact, expected), 1e-5);
  EXPECT_TRUE(sameBytes(run(), exact));
}

// ---- bf16 ops against their fp32 runs on CUDA ----

// Activations rounded to bf16 (2^-9 relative) once per op, sums in fp32: a few 2^-9 in the worst
// element relative to the largest; a wrong result is off by O(1).
constexpr double kBf16OpTolerance = 2e-2;

// Runs f on fp32 CUDA copies of the float64 `inputs`, once in fp32 and once with the inputs cast to bf16
// inside the graph (parameters listed in `params` stay fp32), backward with the same upstream gradient;
// expects output and every input gradient of the bf16 run within kBf16OpTolerance of the fp32 run.
void expectBf16MatchesF32(const std::function<Variable(const std::vector<Variable>&)>& f,
                          const std::vector<Tensor>& inputs, const std::vector<bool>& params) {
  std::vector<Variable> v32, v16;
  std::vector<Variable> leaves32, leaves16;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor t = inputs[i].toDType(DType::F32).to(Device::CUDA);
    leaves32.emplace_back(t, true);
    leaves16.emplace_back(t.clone(), true);
    v32.push_back(leaves32.back());
    v16.push_back(params[i] ? leaves16.back() : ops::cast(leaves16.back(), DType::BF16));
  }
  const Variable y32 = f(v32), y16 = f(v16);
  ASSERT_EQ(y16.dtype(), DType::BF16);
  EXPECT_LT(relativeError(y16.data(), y32.data()), kBf16OpTolerance) << "output";
  const Tensor g = randomTensor(y32.shape(), 77, -1, 1, DType::F32).to(Device::CUDA);
  Variable(y32).backward(g);
  Variable(y16).backward(ops::cast(g, DType::BF16));
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(leaves16[i].grad().dtype(), DType::F32) << "input " << i;
    EXPECT_LT(relativeError(leaves16[i].grad(), leaves32[i].grad()), kBf16OpTolerance) << "gradient of input " << i;
  }
}

TEST(Bf16Ops, LinearMatchesF32) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const auto withBias = [](const std::vector<Variable>& v) { return ops::linear(v[0], v[1], v[2]); };
  const auto noBias = [](const std::vector<Variable>& v) { return ops::linear(v[0], v[1], Variable()); };
  expectBf16MatchesF32(withBias, {randomTensor({4, 6, 40}, 31), randomTensor({48, 40}, 32), randomTensor({48}, 33)},
                       {false, true, true});
  expectBf16MatchesF32(noBias, {randomTensor({24, 64}, 34), randomTensor({32, 64}, 35)}, {false, true});
  // Odd sizes (no 16-byte-aligned rows) and one row take cuBLAS's general GEMM (and a bias pass) when
  // cuBLASLt has no kernel.
  expectBf16MatchesF32(noBias, {randomTensor({7, 13}, 36), randomTensor({5, 13}, 37)}, {false, true});
  expectBf16MatchesF32(withBias, {randomTensor({7, 13}, 38), randomTensor({10, 13}, 39), randomTensor({10}, 40)},
                       {false, true, true});
  expectBf16MatchesF32(withBias, {randomTensor({1, 64}, 41), randomTensor({48, 64}, 42), randomTensor({48}, 43)},
                       {false, true, true});
}

// The fused bf16 GELU MLP against the fp32 run of the same function (linear, gelu, linear): fused at
// hidden widths divisible by 8 (one row included), the three ops otherwise.
TEST(Bf16Ops, GeluMlpMatchesF32) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const auto mlp = [](const std::vector<Variable>& v) { return ops::geluMlp(v[0], v[1], v[2], v[3], v[4]); };
  const std::vector<bool> params{false, true, true, true, true};
  expectBf16MatchesF32(mlp,
                       {randomTensor({4, 6, 40}, 51), randomTensor({64, 40}, 52), randomTensor({64}, 53),
                        randomTensor({40, 64}, 54), randomTensor({40}, 55)},
                       params);
  expectBf16MatchesF32(mlp,
                       {randomTensor({1, 32}, 56), randomTensor({128, 32}, 57), randomTensor({128}, 58),
                        randomTensor({32, 128}, 59), randomTensor({32}, 60)},
                       params);
  expectBf16MatchesF32(mlp,
                       {randomTensor({7, 13}, 61), randomTensor({20, 13}, 62), randomTensor({20}, 63),
                        randomTensor({13, 20}, 64), randomTensor({13}, 65)},
                       params);
}

// The residual forms in bf16 (the residual a bf16 activation: cuBLASLt's C beside its output D) against
// their fp32 runs (the residual copied into the output first): linear with and without a bias, the fused
// and the unfused GELU MLP, swigluLinear; a one-row and an odd shape take the general GEMM's copy.
TEST(Bf16Ops, ResidualFormsMatchF32) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const auto linear = [](const std::vector<Variable>& v) { return ops::linear(v[0], v[1], v[2], v[3]); };
  expectBf16MatchesF32(
      linear,
      {randomTensor({4, 6, 40}, 81), randomTensor({48, 40}, 82), randomTensor({48}, 83), randomTensor({4, 6, 48}, 84)},
      {false, true, true, false});
  expectBf16MatchesF32(
      linear,
      {randomTensor({1, 64}, 85), randomTensor({48, 64}, 86), randomTensor({48}, 87), randomTensor({1, 48}, 88)},
      {false, true, true, false});
  expectBf16MatchesF32([](const std::vector<Variable>& v) { return ops::linear(v[0], v[1], Variable(), v[2]); },
                       {randomTensor({7, 13}, 89), randomTensor({5, 13}, 90), randomTensor({7, 5}, 91)},
                       {false, true, false});
  const auto mlp = [](const std::vector<Variable>& v) { return ops::geluMlp(v[0], v[1], v[2], v[3], v[4], v[5]); };
  expectBf16MatchesF32(mlp,
                       {randomTensor({4, 6, 40}, 92), randomTensor({64, 40}, 93), randomTensor({64}, 94),
                        randomTensor({40, 64}, 95), randomTensor({40}, 96), randomTensor({4, 6, 40}, 97)},
                       {false, true, true, true, true, false});
  expectBf16MatchesF32(mlp,
                       {randomTensor({7, 13}, 98), randomTensor({20, 13}, 99), randomTensor({20}, 100),
                        randomTensor({13, 20}, 101), randomTensor({13}, 102), randomTensor({7, 13}, 103)},
                       {false, true, true, true, true, false});
  expectBf16MatchesF32([](const std::vector<Variable>& v) { return ops::swigluLinear(v[0], v[1], v[2], v[3]); },
                       {randomTensor({4, 6, 64}, 104), randomTensor({4, 6, 64}, 105), randomTensor({40, 64}, 106),
                        randomTensor({4, 6, 40}, 107)},
                       {false, false, true, false});
}

// Runs the bf16 GEMMs in minidp's plain kernel (ops::Bf16Gemm::Plain, minidp-train's --plain-gemms) while alive.
struct PlainBf16Gemms {
  PlainBf16Gemms() { ops::setBf16Gemm(ops::Bf16Gemm::Plain); }
  ~PlainBf16Gemms() { ops::setBf16Gemm(ops::Bf16Gemm::CublasLt); }
  PlainBf16Gemms(const PlainBf16Gemms&) = delete;
  PlainBf16Gemms& operator=(const PlainBf16Gemms&) = delete;
};

// The plain kernel, which compute-sanitizer's initcheck can follow, passes the cuBLASLt path's GEMM checks
// against float64 (every transpose, batches, bias, an addend apart from C, the GELU epilogues), and the bf16
// linear layer and GELU MLP against their fp32 runs.
TEST(GemmBf16, PlainKernelPassesTheSameChecks) {
  MINIDP_SKIP_WITHOUT_CUDA();
  PlainBf16Gemms plain;
  checkGemmsMatchFloat64();
  checkAddendApartFromTheOutput();
  checkGeluEpiloguesAreTheTanhForm();
  // beta 0 never reads C (initcheck would report it): C full of NaN, bf16 and fp32 outputs, padded C rows.
  const GemmCase c{false, true, 24, 40, 56, 1};
  const Tensor a = randomTensor({c.M * c.K}, 141).toDType(DType::BF16), b = randomTensor({c.N * c.K}, 142).toDType(DType::BF16);
  const std::vector<double> av = a.toDType(DType::F64).toVector<double>(), bv = b.toDType(DType::F64).toVector<double>();
  const std::vector<double> expected = referenceGemm(c, av, bv, 0.0, std::vector<double>(c.M * c.N, 0.0), nullptr);
  const Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA);
  const int64_t ldc = c.N + 8;
  for (DType outType : {DType::BF16, DType::F32}) {
    Tensor out = Tensor::fromVector(std::vector<double>(c.M * ldc, NAN), {c.M * ldc}).toDType(outType).to(Device::CUDA);
    if (outType == DType::BF16) {
      MINIDP_ON_CUDA(kernels::cuda::gemmBf16<bf16>(c.transA, c.transB, c.M, c.N, c.K, 1.0f, da.data<bf16>(), 0,
                                                   db.data<bf16>(), 0, 0.0f, out.data<bf16>(), 0, 1, nullptr,
                                                   kernels::GemmLd{0, 0, ldc}, runtime::computeStream()));
    } else {
      MINIDP_ON_CUDA(kernels::cuda::gemmBf16<float>(c.transA, c.transB, c.M, c.N, c.K, 1.0f, da.data<bf16>(), 0,
                                                    db.data<bf16>(), 0, 0.0f, out.data<float>(), 0, 1, nullptr,
                                                    kernels::GemmLd{0, 0, ldc}, runtime::computeStream()));
    }
    const std::vector<double> got = out.toDType(DType::F64).to(Device::CPU).toVector<double>();
    std::vector<double> rows;
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) rows.push_back(got[m * ldc + n]);
      for (int64_t n = c.N; n < ldc; ++n) EXPECT_TRUE(std::isnan(got[m * ldc + n])) << "padding written";
    }
    EXPECT_LT(relativeL2(Tensor::fromVector(rows, {c.M * c.N}), Tensor::fromVector(expected, {c.M * c.N})),
              outType == DType::BF16 ? kBf16OutTolerance : kF32OutTolerance)
        << dtypeName(outType);
  }
  const auto linear = [](const std::vector<Variable>& v) { return ops::linear(v[0], v[1], v[2]); };
  expectBf16MatchesF32(linear, {randomTensor({4, 6, 40}, 131), randomTensor({48, 40}, 132), randomTensor({48}, 133)},
                       {false, true, true});
  const auto mlp = [](const std::vector<Variable>& v) { return ops::geluMlp(v[0], v[1], v[2], v[3], v[4]); };
  expectBf16MatchesF32(mlp,
                       {randomTensor({4, 6, 40}, 151), randomTensor({64, 40}, 152), randomTensor({64}, 153),
                        randomTensor({40, 64}, 154), randomTensor({40}, 155)},
                       {false, true, true, true, true});
}

// ComputeCopies' bookkeeping, on the CPU (the copies are made by the same cast on either device): no copy
// until an installed scope asks for one; then the cast's bits, grown (zero rows after the parameter's) when a
// request needs more rows, reused after; a tensor that is not a parameter, no installed scope, a scope of
// none nested inside, or a frozen ComputeCopies give a fresh cast and make or move nothing; refresh() casts
// the current values again. Without copies, weightCopy is a padded cast of any weight.
TEST(ComputeCopies, MadeOnFirstUseGrownForMoreRowsFrozenAndScoped) {
  Tensor w = randomTensor({5, 4}, 210, -1, 1, DType::F32);
  const Tensor other = randomTensor({3}, 211, -1, 1, DType::F32);
  const auto values = [](const Tensor& t) { return t.toDType(DType::F64).toVector<double>(); };
  ops::ComputeCopies copies({w});
  EXPECT_FALSE(copies.find(w).defined());
  EXPECT_EQ(values(ops::weightCopy(w)), values(ops::cast(w, DType::BF16)));
  EXPECT_FALSE(copies.find(w).defined()) << "a copy made without an installed scope";
  {
    const ops::WeightCopySource::Installed scope(&copies);
    const Tensor first = ops::weightCopy(w);
    EXPECT_EQ(first.shape(), w.shape());
    EXPECT_EQ(values(first), values(ops::cast(w, DType::BF16)));
    ASSERT_TRUE(copies.find(w).defined());
    EXPECT_EQ(copies.find(w).numel(), 20);
    const Tensor padded = ops::weightCopy(w, 8);
    EXPECT_EQ(padded.shape(), (Shape{8, 4}));
    std::vector<double> expected = values(ops::cast(w, DType::BF16));
    expected.resize(32, 0.0);
    EXPECT_EQ(values(padded), expected);
    EXPECT_EQ(copies.find(w).numel(), 32) << "not grown";
    EXPECT_EQ(ops::weightCopy(w).raw(), copies.find(w).raw()) << "the grown copy is not reused";
    EXPECT_EQ(ops::weightCopy(w, 6).raw(), copies.find(w).raw());
    EXPECT_EQ(values(ops::weightCopy(other)), values(ops::cast(other, DType::BF16)));
    EXPECT_FALSE(copies.find(other).defined());
    {
      const ops::WeightCopySource::Installed none(nullptr);
      EXPECT_NE(ops::weightCopy(w).raw(), copies.find(w).raw()) << "a scope of none still took the copy";
    }
    EXPECT_EQ(ops::weightCopy(w).raw(), copies.find(w).raw()) << "the outer scope did not come back";
    w.copyFrom(randomTensor({5, 4}, 212, -1, 1, DType::F32));
    copies.refresh();
    expected = values(ops::cast(w, DType::BF16));
    expected.resize(32, 0.0);
    EXPECT_EQ(values(copies.find(w)), expected);
  }
  EXPECT_NE(ops::weightCopy(w).raw(), copies.find(w).raw()) << "still installed after the scope";
  // Without copies: a padded cast with zero rows after the weight's, whatever its rank or rows; a bf16 weight
  // is its own copy.
  std::vector<double> padded = values(ops::cast(w, DType::BF16));
  padded.resize(32, 0.0);
  EXPECT_EQ(values(ops::weightCopy(w, 8)), padded);
  EXPECT_EQ(ops::weightCopy(randomTensor({2, 3, 4}, 213, -1, 1, DType::F32), 5).shape(), (Shape{5, 12}));
  const Tensor none = ops::weightCopy(Tensor::zeros({0, 4}, DType::F32, Device::CPU), 3);
  EXPECT_EQ(none.shape(), (Shape{3, 4}));
  EXPECT_EQ(values(none), std::vector<double>(12, 0.0));
  const Tensor half = ops::cast(w, DType::BF16);
  EXPECT_EQ(ops::weightCopy(half).raw(), half.raw());
  ops::ComputeCopies frozen({w});
  frozen.freeze();
  const ops::WeightCopySource::Installed scope(&frozen);
  EXPECT_EQ(values(ops::weightCopy(w)), values(ops::cast(w, DType::BF16)));
  EXPECT_FALSE(frozen.find(w).defined()) << "a frozen ComputeCopies made a copy";
}

// Compute copies (ops::ComputeCopies, what minidp-train installs under bf16): three AdamW steps of a bf16
// stack that takes every weight the ops cast (a linear with a residual, the fused GELU MLP, SwiGLU's
// projection, the padded vocabulary head) give the same losses and parameters, bit for bit, as the same
// steps casting each weight in every forward. A copy the optimizer failed to update would feed step 2 the
// weights of step 1; a copy that was never made would make the test vacuous, so each one must exist.
TEST(ComputeCopies, StepsGiveTheBitsOfCastingEveryForward) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const int64_t rows = 24, width = 40, hidden = 64, vocab = 37;
  struct Run {
    std::vector<double> losses;
    std::vector<Tensor> params;
  };
  const auto train = [&](bool withCopies) {
    uint64_t seed = 190;
    std::vector<Variable> params;
    for (const Shape& shape : std::vector<Shape>{{width, width},
                                                 {width},
                                                 {hidden, width},
                                                 {hidden},
                                                 {width, hidden},
                                                 {width},
                                                 {width, width / 2},
                                                 {vocab, width}}) {
      params.emplace_back(randomTensor(shape, ++seed, -0.3, 0.3, DType::F32).to(Device::CUDA), true);
    }
    const Tensor x = randomTensor({rows, width}, 200).toDType(DType::BF16).to(Device::CUDA);
    std::vector<int32_t> targetValues;
    for (int64_t i = 0; i < rows; ++i) targetValues.push_back(static_cast<int32_t>((i * 7) % vocab));
    const Tensor targets = Tensor::fromVector(targetValues, {rows}, Device::CUDA);
    std::vector<Tensor> tensors;
    for (const Variable& p : params) tensors.push_back(p.data());
    ops::ComputeCopies copies(tensors);
    const ops::WeightCopySource::Installed installed(withCopies ? &copies : nullptr);
    auto adamw = optim::makeOptimizer("adamw", params, 0.01, 0.1);
    if (withCopies) adamw->setComputeCopies([&copies](const Tensor& p) { return copies.find(p); });
    Run run;
    for (int step = 0; step < 3; ++step) {
      for (Variable& p : params) p.zeroGrad();
      const Variable in(x);
      const Variable h = ops::linear(in, params[0], params[1], in);
      const Variable m = ops::geluMlp(h, params[2], params[3], params[4], params[5], h);
      const Variable halves =
          ops::swigluLinear(ops::narrow(m, -1, 0, width / 2), ops::narrow(m, -1, width / 2, width / 2), params[6], m);
      Variable loss = ops::linearCrossEntropy(halves, params[7], targets);
      loss.backward();
      run.losses.push_back(loss.data().toDType(DType::F64).to(Device::CPU).toVector<double>()[0]);
      adamw->step();
    }
    for (const Variable& p : params) {
      run.params.push_back(p.data().to(Device::CPU));
      if (withCopies && p.data().ndim() == 2) EXPECT_TRUE(copies.find(p.data()).defined()) << "no copy was made";
    }
    return run;
  };
  const Run cast = train(false), copied = train(true);
  EXPECT_EQ(copied.losses, cast.losses);
  for (size_t i = 0; i < cast.params.size(); ++i) EXPECT_TRUE(sameBytes(copied.params[i], cast.params[i])) << i;
  EXPECT_NE(cast.losses.front(), cast.losses.back()) << "the steps changed nothing";
}

TEST(Bf16Ops, MatmulMatchesF32) {
  MINIDP_SKIP_WITHOUT_CUDA();
  expectBf16MatchesF32([](const std::vector<Variable>& v) { return ops::matmul(v[0], v[1]); },
                       {randomTensor({3, 16, 24}, 41), randomTensor({3, 24, 8}, 42)}, {false, false});
}

TEST(Bf16Ops, ElementwiseMatchF32) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const Tensor a = randomTensor({5, 33}, 51, -3, 3), b = randomTensor({5, 33}, 52, -3, 3);
  using V = std::vector<Variable>;
  expectBf16MatchesF32([](const V& v) { return ops::add(v[0], v[1]); }, {a, b}, {false, false});
  expectBf16MatchesF32([](const V& v) { return ops::mul(v[0], v[1]); }, {a, b}, {false, false});
  expectBf16MatchesF32([](const V& v) { return ops::scale(v[0], -0.37); }, {a}, {false});
  expectBf16MatchesF32([](const V& v) { return ops::relu(v[0]); }, {a}, {false});
  expectBf16MatchesF32([](const V& v) { return ops::gelu(v[0]); }, {a}, {false});
  // A value used twice: the engine adds the two bf16 gradients (addInPlace / add in bf16).
  expectBf16MatchesF32([](const V& v) { return ops::mul(ops::gelu(v[0]), v[0]); }, {a}, {false});
}

TEST(Bf16Ops, Bf16OnTheCpuIsAnError) {
  const Variable x(Tensor::zeros({2, 3}, DType::F32, Device::CPU).toDType(DType::BF16));
  EXPECT_THROW(ops::relu(x), Error);
  EXPECT_THROW(ops::linear(x, Variable(Tensor::zeros({4, 3}, DType::F32, Device::CPU)), Variable()), Error);
}

// ---- gradients written straight into an installed gradient ----

// Two layers, so that the first's dx is needed too; loss sum(y * w) with fixed weights w.
// Linear layers 10 -> 12 -> 7 with the same initial values at every call, in `dtype` on `device`.
std::pair<std::shared_ptr<nn::Linear>, std::shared_ptr<nn::Linear>> twoLinearLayers(DType dtype, Device device) {
  nn::Rng rng(5);
  auto l1 = std::make_shared<nn::Linear>(10, 12, true, rng);
  auto l2 = std::make_shared<nn::Linear>(12, 7, true, rng);
  l1->to(device, dtype);
  l2->to(device, dtype);
  return {l1, l2};
}

Variable twoLayers(const nn::Linear& l1, const nn::Linear& l2, const Tensor& x, const Tensor& w) {
  return ops::sum(ops::mul(l2.forward(ops::relu(l1.forward(Variable(x)))), Variable(w)));
}

class DirectGrad : public ::testing::TestWithParam<std::tuple<DType, Device>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) == Device::CUDA) MINIDP_SKIP_WITHOUT_CUDA();
  }
};

// The same layers trained under DDP (gradients are bucket views, written by the GEMMs with beta = 1)
// and without (the op returns new gradient tensors): byte-identical gradients, since the buckets
// start the step zeroed and 0 + g = g.
TEST_P(DirectGrad, UnderDdpSameBytesAsReturnedGradients) {
  const auto [dtype, device] = GetParam();
  const Tensor x = randomTensor({6, 10}, 61).toDType(dtype).to(device);
  const Tensor w = randomTensor({6, 7}, 62).toDType(dtype).to(device);
  auto [a1, a2] = twoLinearLayers(dtype, device);
  auto [b1, b2] = twoLinearLayers(dtype, device);
  twoLayers(*a1, *a2, x, w).backward();

  nn::NamedParameters params{
      {"l1.weight", b1->weight}, {"l1.bias", b1->bias}, {"l2.weight", b2->weight}, {"l2.bias", b2->bias}};
  distributed::CommOptions opts;
  opts.backend = "single";
  opts.cuda = device == Device::CUDA;
  distributed::DistributedDataParallel ddp(params, distributed::makeCommunicator(opts, nullptr),
                                           distributed::DdpOptions{});
  ddp.prepareStep();
  // The zeroed bucket views are marked, so the first contribution overwrites them (beta 0); backward ends it.
  for (const auto& [name, p] : params) EXPECT_TRUE(p.gradKnownZero()) << name;
  twoLayers(*b1, *b2, x, w).backward();
  for (const auto& [name, p] : params) EXPECT_FALSE(p.gradKnownZero()) << name;
  ddp.finalize();
  const std::vector<std::pair<Variable, Variable>> pairs{
      {a1->weight, b1->weight}, {a1->bias, b1->bias}, {a2->weight, b2->weight}, {a2->bias, b2->bias}};
  for (size_t i = 0; i < pairs.size(); ++i) EXPECT_TRUE(sameBytes(pairs[i].second.grad(), pairs[i].first.grad())) << i;
}

// A second backward accumulates into the installed gradient: grad = g1 + g2, in place.
TEST_P(DirectGrad, AccumulatesIntoTheInstalledGradient) {
  const auto [dtype, device] = GetParam();
  nn::Rng rng(8);
  nn::Linear layer(9, 4, true, rng);
  layer.to(device, dtype);
  const Tensor x = randomTensor({5, 9}, 63).toDType(dtype).to(device);
  const Tensor w = randomTensor({5, 4}, 64).toDType(dtype).to(device);
  const auto loss = [&] { return ops::sum(ops::mul(layer.forward(Variable(x)), Variable(w))); };
  loss().backward();
  const Tensor once = layer.weight.grad().clone(), onceBias = layer.bias.grad().clone();
  Tensor installed = Tensor::zeros(layer.weight.shape(), dtype, device);
  installed.copyFrom(once);
  layer.weight.setGrad(installed);
  loss().backward();
  EXPECT_TRUE(layer.weight.grad().sharesStorage(installed));
  EXPECT_LT(relativeError(layer.weight.grad(), ops::scale(once, 2.0)), testing::roundingEps(dtype) * 4);
  EXPECT_LT(relativeError(layer.bias.grad(), ops::scale(onceBias, 2.0)), testing::roundingEps(dtype) * 4);
}

// A gradient marked zero (Variable::markGradZero) is overwritten by the layer's first contribution. The
// promise is deliberately false here (the installed gradients hold 7), so the installed tensors end with the
// returned path's bytes only if the weight GEMMs ran with beta 0 and the bias sums were written, not added.
TEST_P(DirectGrad, AGradientMarkedZeroIsOverwritten) {
  const auto [dtype, device] = GetParam();
  if (device == Device::CUDA) MINIDP_SKIP_WITHOUT_CUDA();
  const Tensor x = randomTensor({6, 10}, 61).toDType(dtype).to(device);
  const Tensor w = randomTensor({6, 7}, 62).toDType(dtype).to(device);
  auto [a1, a2] = twoLinearLayers(dtype, device);
  auto [b1, b2] = twoLinearLayers(dtype, device);
  twoLayers(*a1, *a2, x, w).backward();
  const std::vector<std::pair<Variable, Variable>> pairs{
      {a1->weight, b1->weight}, {a1->bias, b1->bias}, {a2->weight, b2->weight}, {a2->bias, b2->bias}};
  std::vector<Tensor> installed;
  for (const auto& [fresh, marked] : pairs) {
    Variable p = marked;
    installed.push_back(ops::full(p.shape(), 7.0, dtype, device));
    p.setGrad(installed.back());
    p.markGradZero();
  }
  twoLayers(*b1, *b2, x, w).backward();
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_TRUE(pairs[i].second.grad().sharesStorage(installed[i])) << i;
    EXPECT_TRUE(sameBytes(pairs[i].second.grad(), pairs[i].first.grad())) << i;
    EXPECT_FALSE(pairs[i].second.gradKnownZero()) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DirectGrad,
                         ::testing::Values(std::make_tuple(DType::F32, Device::CPU),
                                           std::make_tuple(DType::F64, Device::CPU),
                                           std::make_tuple(DType::F32, Device::CUDA)));

// bf16 activations with fp32 parameters under DDP: the fp32 bucket views receive the GEMMs' fp32 output.
TEST(DirectGradBf16, BucketGradientsMatchReturnedGradients) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const Tensor x = randomTensor({16, 32}, 65).toDType(DType::F32).to(Device::CUDA);
  const Tensor w = randomTensor({16, 24}, 66).toDType(DType::BF16).to(Device::CUDA);
  const auto make = [] {
    nn::Rng rng(9);
    auto l = std::make_shared<nn::Linear>(32, 24, true, rng);
    l->to(Device::CUDA, DType::F32);
    return l;
  };
  const auto loss = [&](const nn::Linear& l) {
    return ops::sum(ops::cast(ops::mul(l.forward(ops::cast(Variable(x), DType::BF16)), Variable(w)), DType::F32));
  };
  auto plain = make(), bucketed = make();
  loss(*plain).backward();
  distributed::CommOptions opts;
  opts.backend = "single";
  opts.cuda = true;
  distributed::DistributedDataParallel ddp({{"weight", bucketed->weight}, {"bias", bucketed->bias}},
                                           distributed::makeCommunicator(opts, nullptr), distributed::DdpOptions{});
  ddp.prepareStep();
  loss(*bucketed).backward();
  ddp.finalize();
  ASSERT_EQ(bucketed->weight.grad().dtype(), DType::F32);
  // beta = 1 onto a zeroed bucket versus beta = 0: cuBLASLt may pick another kernel, so fp32 rounding apart.
  EXPECT_LT(relativeError(bucketed->weight.grad(), plain->weight.grad()), 1e-5);
  EXPECT_LT(relativeError(bucketed->bias.grad(), plain->bias.grad()), 1e-5);
}

}  // namespace
}  // namespace minidp
