// The ops a LLaMA-style block needs beyond the composable ones: narrow, split, cat and repeatInterleave; the
// rotary embedding; causal attention over separate q, k and v with grouped key/value heads, materialised and
// packed; the RMSNorm layer. Forward against float64 references, every backward against float64 finite
// differences, CUDA against the CPU twin in float32 and float64, and bf16 on CUDA against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "framework/nn/rms_norm.h"
#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

using testing::compareDevices;
using testing::gradcheckPasses;
using testing::randomTensor;
using testing::relativeError;
using testing::roundingEps;
using testing::sumTolerance;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

Variable leaf(const Tensor& t) { return Variable(t, true); }

// ---- narrow, split, cat ----

TEST(SliceOps, NarrowCopiesTheSliceOfAnyDimension) {
  Tensor x = randomTensor({2, 3, 4}, 1);
  const std::vector<double> v = x.toVector<double>();
  const std::vector<double> middle = ops::narrow(Variable(x), 1, 1, 2).data().toVector<double>();  // (2, 2, 4)
  const std::vector<double> last = ops::narrow(Variable(x), -1, 3, 1).data().toVector<double>();   // (2, 3, 1)
  const std::vector<double> first = ops::narrow(Variable(x), 0, 1, 1).data().toVector<double>();   // (1, 3, 4)
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(middle[(a * 2 + b) * 4 + c], v[(a * 3 + b + 1) * 4 + c]);
  for (int64_t r = 0; r < 6; ++r) EXPECT_EQ(last[r], v[r * 4 + 3]);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(first[i], v[12 + i]);
  EXPECT_EQ(ops::narrow(Variable(x), 2, 0, 0).shape(), (Shape{2, 3, 0}));
}

TEST(SliceOps, NarrowGradcheck) {
  Tensor x = randomTensor({2, 3, 5}, 2);
  for (int dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(dim);
    const int64_t extent = x.shape()[dim < 0 ? dim + 3 : dim];
    EXPECT_TRUE(gradcheckPasses(
        [dim, extent](const std::vector<Variable>& in) { return ops::narrow(in[0], dim, 1, extent - 1); }, {leaf(x)}));
  }
}

TEST(SliceOps, CatJoinsAndSplitCuts) {
  Tensor a = randomTensor({2, 1, 3}, 3), b = randomTensor({2, 2, 3}, 4);
  Variable joined = ops::cat({Variable(a), Variable(b)}, 1);
  ASSERT_EQ(joined.shape(), (Shape{2, 3, 3}));
  const std::vector<double> av = a.toVector<double>(), bv = b.toVector<double>(), j = joined.data().toVector<double>();
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(j[(r * 3) * 3 + c], av[r * 3 + c]);
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(j[(r * 3 + 1) * 3 + c], bv[r * 6 + c]);
  }
  const std::vector<Variable> pieces = ops::split(joined, 1, {1, 2});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(relativeError(pieces[0].data(), a), 0);
  EXPECT_EQ(relativeError(pieces[1].data(), b), 0);
}

TEST(SliceOps, CatAndSplitGradcheck) {
  Tensor a = randomTensor({3, 2}, 5), b = randomTensor({3, 4}, 6), c = randomTensor({3, 1}, 7);
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::cat(in, -1); },
                              {leaf(a), leaf(b), leaf(c)}));
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::cat({in[1], in[0]}, 0); },
                              {leaf(randomTensor({2, 3}, 8)), leaf(randomTensor({1, 3}, 9))}));
  // Pieces reordered: every piece's gradient lands where it was cut from.
  EXPECT_TRUE(gradcheckPasses(
      [](const std::vector<Variable>& in) {
        const std::vector<Variable> p = ops::split(in[0], 1, {2, 1, 3});
        return ops::cat({p[2], p[0], p[1]}, 1);
      },
      {leaf(randomTensor({2, 6, 2}, 10))}));
}

TEST(SliceOps, ShapeErrorsNameTheOp) {
  Variable x(randomTensor({2, 3}, 11));
  const auto fails = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what()).find(op) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(fails([&] { ops::narrow(x, 1, 2, 2); }, "narrow"));
  EXPECT_TRUE(fails([&] { ops::narrow(x, 2, 0, 1); }, "narrow"));
  EXPECT_TRUE(fails([&] { ops::split(x, 1, {1, 1}); }, "split"));
  EXPECT_TRUE(fails([&] { ops::cat({x, Variable(randomTensor({3, 3}, 12))}, 1); }, "cat"));
  EXPECT_TRUE(fails([&] { ops::cat({}, 0); }, "cat"));
}

// x (2, 3, 4) repeated along `dim`, straight from the definition: entry e of dim is entries e R .. e R + R - 1.
std::vector<double> repeatReference(const std::vector<double>& x, const Shape& shape, int dim, int64_t R) {
  Shape out = shape;
  out[dim] *= R;
  std::vector<double> y(x.size() * R);
  for (int64_t a = 0; a < out[0]; ++a)
    for (int64_t b = 0; b < out[1]; ++b)
      for (int64_t c = 0; c < out[2]; ++c) {
        int64_t i[3] = {a, b, c};
        i[dim] /= R;
        y[(a * out[1] + b) * out[2] + c] = x[(i[0] * shape[1] + i[1]) * shape[2] + i[2]];
      }
  return y;
}

TEST(SliceOps, RepeatInterleaveCopiesAndItsBackwardSumsTheCopies) {
  const Shape shape{2, 3, 4};
  Tensor x = randomTensor(shape, 60);
  for (int dim : {0, 1, 2}) {
    SCOPED_TRACE(dim);
    Variable in = leaf(x);
    Variable y = ops::repeatInterleave(in, dim, 3);
    Shape out = shape;
    out[dim] *= 3;
    ASSERT_EQ(y.shape(), out);
    EXPECT_EQ(y.data().toVector<double>(), repeatReference(x.toVector<double>(), shape, dim, 3));
    // dx[e] = g[3e] + g[3e + 1] + g[3e + 2], in that order: the same bits as the sum written out.
    Tensor g = randomTensor(out, 61);
    y.backward(g);
    const std::vector<double> gv = g.toVector<double>(), dx = in.grad().toVector<double>();
    std::vector<double> want(dx.size(), 0.0);  // g's entries added in order: r = 0, 1, 2 for each of dx's
    for (size_t j = 0; j < gv.size(); ++j) {
      int64_t i[3] = {static_cast<int64_t>(j) / (out[1] * out[2]), static_cast<int64_t>(j) / out[2] % out[1],
                      static_cast<int64_t>(j) % out[2]};
      i[dim] /= 3;
      want[(i[0] * shape[1] + i[1]) * shape[2] + i[2]] += gv[j];
    }
    EXPECT_EQ(dx, want);
  }
  Variable same(x);
  EXPECT_EQ(ops::repeatInterleave(same, -1, 1).data().data<double>(), x.data<double>());  // x itself
  EXPECT_THROW(ops::repeatInterleave(same, 1, 0), Error);
  EXPECT_THROW(ops::repeatInterleave(same, 3, 2), Error);
  EXPECT_THROW(ops::repeatInterleave(Variable(x.toDType(DType::BF16)), 1, 2), Error);  // bf16 is CUDA's
}

TEST(SliceOps, RepeatInterleaveGradcheck) {
  for (int dim : {0, 2, -1}) {
    SCOPED_TRACE(dim);
    EXPECT_TRUE(gradcheckPasses([dim](const std::vector<Variable>& in) { return ops::repeatInterleave(in[0], dim, 2); },
                                {leaf(randomTensor({2, 3, 2, 3}, 62))}));
  }
}

// ---- rotary embedding ----

// y for x (B, T, H, d) in double, straight from the definition.
std::vector<double> rotaryReference(const Tensor& x, double theta) {
  const std::vector<double> v = x.toVector<double>();
  const int64_t T = x.size(1), H = x.size(2), d = x.size(3), half = d / 2;
  std::vector<double> y(v.size());
  for (size_t row = 0; row < v.size() / d; ++row) {
    const int64_t t = static_cast<int64_t>(row / H) % T;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = t / std::pow(theta, 2.0 * i / d), c = std::cos(angle), s = std::sin(angle);
      const double x1 = v[row * d + i], x2 = v[row * d + i + half];
      y[row * d + i] = x1 * c - x2 * s;
      y[row * d + i + half] = x2 * c + x1 * s;
    }
  }
  return y;
}

TEST(Rotary, TurnsEachPairByItsPositionsAngle) {
  Tensor x = randomTensor({2, 5, 3, 8}, 13);
  for (double theta : {10000.0, 7.0}) {
    const std::vector<double> y = ops::rotary(Variable(x), theta).data().toVector<double>();
    const std::vector<double> want = rotaryReference(x, theta);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-15) << i;
  }
  // Position 0 is not turned.
  Tensor one = randomTensor({1, 1, 2, 6}, 14);
  EXPECT_EQ(relativeError(ops::rotary(Variable(one), 10000).data(), one), 0);
  EXPECT_THROW(ops::rotary(Variable(randomTensor({1, 2, 2, 5}, 15)), 10000), Error);  // odd head dim
  EXPECT_THROW(ops::rotary(Variable(randomTensor({2, 2, 6}, 16)), 10000), Error);     // not (B, T, H, d)
}

TEST(Rotary, Gradcheck) {
  EXPECT_TRUE(gradcheckPasses([](const std::vector<Variable>& in) { return ops::rotary(in[0], 100.0); },
                              {leaf(randomTensor({2, 4, 3, 6}, 17))}));
}

// ---- causal attention with grouped key/value heads ----

TEST(CausalAttention, EqualsThePackedOpWhenEveryHeadHasItsKeys) {
  const int64_t B = 2, T = 7, H = 3, d = 4, C = H * d;
  Tensor qkv = randomTensor({B, T, 3 * C}, 18);
  Variable packed(qkv, true);
  Variable y = ops::causalSelfAttentionMaterialized(packed, static_cast<int>(H));
  Tensor g = randomTensor({B, T, C}, 19);
  y.backward(g);
  Variable q = leaf(ops::narrow(Variable(qkv), 2, 0, C).data().view({B, T, H, d}));
  Variable k = leaf(ops::narrow(Variable(qkv), 2, C, C).data().view({B, T, H, d}));
  Variable v = leaf(ops::narrow(Variable(qkv), 2, 2 * C, C).data().view({B, T, H, d}));
  Variable y2 = ops::causalAttention(q, k, v);
  y2.backward(g.view({B, T, H, d}));
  // The same kernels in the same order: the same bits.
  EXPECT_EQ(relativeError(y2.data().view({B, T, C}), y.data()), 0);
  Variable dqkv(packed.grad());
  EXPECT_EQ(relativeError(q.grad().view({B, T, C}), ops::narrow(dqkv, 2, 0, C).data()), 0);
  EXPECT_EQ(relativeError(k.grad().view({B, T, C}), ops::narrow(dqkv, 2, C, C).data()), 0);
  EXPECT_EQ(relativeError(v.grad().view({B, T, C}), ops::narrow(dqkv, 2, 2 * C, C).data()), 0);
}

TEST(CausalAttention, GroupedHeadsEqualRepeatedKeysAndValues) {
  const int64_t B = 2, T = 6, H = 6, Hkv = 2, d = 4;
  Tensor q = randomTensor({B, T, H, d}, 20), k = randomTensor({B, T, Hkv, d}, 21), v = randomTensor({B, T, Hkv, d}, 22);
  Tensor g = randomTensor({B, T, H, d}, 23);
  Variable q1 = leaf(q), k1 = leaf(k), v1 = leaf(v), q2 = leaf(q), k2 = leaf(k), v2 = leaf(v);
  Variable grouped = ops::causalAttention(q1, k1, v1);
  grouped.backward(g);
  Variable repeated =
      ops::causalAttention(q2, ops::repeatInterleave(k2, 2, H / Hkv), ops::repeatInterleave(v2, 2, H / Hkv));
  repeated.backward(g);
  // dK and dV sum the group's heads inside a GEMM on one side, after it on the other: rounding apart.
  EXPECT_LT(relativeError(grouped.data(), repeated.data()), 1e-14);
  EXPECT_LT(relativeError(q1.grad(), q2.grad()), 1e-13);
  EXPECT_LT(relativeError(k1.grad(), k2.grad()), 1e-13);
  EXPECT_LT(relativeError(v1.grad(), v2.grad()), 1e-13);
}

TEST(CausalAttention, Gradcheck) {
  const Fn materialized = [](const std::vector<Variable>& in) { return ops::causalAttention(in[0], in[1], in[2]); };
  const Fn packed = [](const std::vector<Variable>& in) { return ops::causalAttentionPacked(in[0], in[1], in[2]); };
  for (int64_t kv : {4, 2, 1}) {
    SCOPED_TRACE(kv);
    for (const Fn& f : {materialized, packed}) {
      EXPECT_TRUE(gradcheckPasses(f, {leaf(randomTensor({2, 5, 4, 3}, 24)), leaf(randomTensor({2, 5, kv, 3}, 25)),
                                      leaf(randomTensor({2, 5, kv, 3}, 26))}));
    }
  }
}

TEST(CausalAttention, PackedPathEqualsTheGroupedGemms) {
  // The path CUDA takes at the flash kernels' head dims: k and v repeated to H heads, packed with q and run by
  // causalSelfAttention (here on the CPU its materialised path; its flash twins are held to that path at
  // 1e-12 in test_flash_attention). Against the grouped GEMMs, which never repeat k or v, in float64.
  const int64_t B = 2, T = 9, H = 4, d = 8;
  for (int64_t kv : {4, 2, 1}) {
    SCOPED_TRACE(kv);
    Tensor q = randomTensor({B, T, H, d}, 63), k = randomTensor({B, T, kv, d}, 64), v = randomTensor({B, T, kv, d}, 65);
    Tensor g = randomTensor({B, T, H, d}, 66);
    Variable q1 = leaf(q), k1 = leaf(k), v1 = leaf(v), q2 = leaf(q), k2 = leaf(k), v2 = leaf(v);
    Variable grouped = ops::causalAttentionMaterialized(q1, k1, v1);
    grouped.backward(g);
    Variable packed = ops::causalAttentionPacked(q2, k2, v2);
    ASSERT_EQ(packed.shape(), grouped.shape());
    packed.backward(g);
    EXPECT_LT(relativeError(packed.data(), grouped.data()), 1e-12);
    EXPECT_LT(relativeError(q2.grad(), q1.grad()), 1e-12);
    EXPECT_LT(relativeError(k2.grad(), k1.grad()), 1e-12);
    EXPECT_LT(relativeError(v2.grad(), v1.grad()), 1e-12);
  }
}

TEST(CausalAttention, ShapeErrors) {
  Variable q(randomTensor({1, 4, 4, 2}, 27));
  EXPECT_THROW(ops::causalAttention(q, Variable(randomTensor({1, 4, 3, 2}, 28)), Variable(randomTensor({1, 4, 3, 2}, 29))),
               Error);  // 3 does not divide 4
  EXPECT_THROW(ops::causalAttention(q, Variable(randomTensor({1, 4, 2, 2}, 30)), Variable(randomTensor({1, 4, 1, 2}, 31))),
               Error);  // k and v differ
  EXPECT_THROW(ops::causalAttention(q, Variable(randomTensor({1, 3, 2, 2}, 32)), Variable(randomTensor({1, 3, 2, 2}, 33))),
               Error);  // another length
}

// ---- RMSNorm ----

TEST(RmsNormLayer, ForwardAndGradcheck) {
  nn::RMSNorm norm(6, 1e-5);
  norm.to(Device::CPU, DType::F64);
  norm.weight.data() = randomTensor({6}, 34, 0.5, 1.5);
  Tensor x = randomTensor({2, 3, 6}, 35, -2.0, 2.0);
  const std::vector<double> xv = x.toVector<double>(), wv = norm.weight.data().toVector<double>();
  const std::vector<double> y = norm.forward(Variable(x)).data().toVector<double>();
  for (int64_t r = 0; r < 6; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < 6; ++c) ms += xv[r * 6 + c] * xv[r * 6 + c] / 6;
    for (int64_t c = 0; c < 6; ++c) EXPECT_NEAR(y[r * 6 + c], xv[r * 6 + c] / std::sqrt(ms + 1e-5) * wv[c], 1e-14);
  }
  EXPECT_TRUE(gradcheckPasses([&norm](const std::vector<Variable>& in) { return norm.forward(in[0]); },
                              {leaf(x), norm.weight}));
}

// ---- CUDA against the CPU twin ----

using SequenceCudaVsCpu = testing::CudaVsCpuTest;

TEST_P(SequenceCudaVsCpu, SlicesAreExactCopies) {
  // Enough elements for several blocks of the copy kernel, extents that are not multiples of anything.
  expectClose(compareDevices(
                  [](const std::vector<Variable>& in) {
                    const std::vector<Variable> p = ops::split(in[0], 1, {37, 10, 53});
                    return ops::cat({ops::narrow(p[2], -1, 3, 40), ops::narrow(p[0], -1, 5, 40), ops::narrow(p[1], -1, 0, 40)}, 1);
                  },
                  {randomTensor({3, 100, 45}, 36)}, GetParam()),
              0.0);
}

TEST_P(SequenceCudaVsCpu, Rotary) {
  // The angles in double on both devices; cos and sin of the CUDA math library are within an ulp or two.
  // Head dims 16 and 128 take the kernel's 16-byte packs of pairs, 6 (3 pairs) one pair per thread. At
  // (5, 3, 32, 128) a position's 5 sequences are split between blocks (2, 2 and 1 in fp32).
  for (const Shape& shape : {Shape{2, 37, 5, 16}, Shape{2, 37, 3, 6}, Shape{1, 20, 2, 128}, Shape{5, 3, 32, 128}}) {
    SCOPED_TRACE(shapeString(shape));
    expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::rotary(in[0], 10000.0); },
                               {randomTensor(shape, 37)}, GetParam()),
                8 * roundingEps(GetParam()));
  }
}

TEST_P(SequenceCudaVsCpu, GroupedQueryAttention) {
  // Score rows of up to 45 keys, dK and dV over 4 heads x 45 queries, in device-specific orders.
  const Fn f = [](const std::vector<Variable>& in) { return ops::causalAttention(in[0], in[1], in[2]); };
  expectClose(compareDevices(f,
                             {randomTensor({2, 45, 8, 16}, 38), randomTensor({2, 45, 2, 16}, 39),
                              randomTensor({2, 45, 2, 16}, 40)},
                             GetParam()),
              sumTolerance(GetParam(), 4 * 45 * 16));
}

TEST_P(SequenceCudaVsCpu, RepeatInterleave) {
  // Copies forward; backward adds each entry's 3 copies in the same order on both devices: exact.
  expectClose(compareDevices([](const std::vector<Variable>& in) { return ops::repeatInterleave(in[0], 2, 3); },
                             {randomTensor({2, 37, 3, 40}, 67)}, GetParam()),
              0.0);
}

TEST_P(SequenceCudaVsCpu, GroupedQueryAttentionAtAFlashHeadDim) {
  // Head dim 32: CUDA F32 runs the packed path on the flash kernels (online softmax, its own order), the CPU
  // and CUDA F64 the grouped GEMMs. dK and dV sum G heads of 70 queries.
  const Fn f = [](const std::vector<Variable>& in) { return ops::causalAttention(in[0], in[1], in[2]); };
  for (int64_t kv : {2, 1}) {
    SCOPED_TRACE(kv);
    const double G = static_cast<double>(4 / kv);
    expectClose(
        compareDevices(
            f, {randomTensor({2, 70, 4, 32}, 68), randomTensor({2, 70, kv, 32}, 69), randomTensor({2, 70, kv, 32}, 70)},
            GetParam()),
        4.0 * (G * 70 + 32 + 4) * roundingEps(GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SequenceCudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

// ---- bf16 on CUDA ----

// float64 values in [-1, 1) rounded to bf16: the same numbers in bf16, fp32 and fp64.
Tensor bf16Exact(const Shape& shape, uint64_t seed) { return randomTensor(shape, seed).toDType(DType::BF16); }

// The bf16 kernels are CUDA-only: skip, with the reason, where there is no GPU.
class SequenceBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    MINIDP_SKIP_WITHOUT_CUDA() << " (bf16 kernels run on CUDA only)";
  }
};

TEST_F(SequenceBf16, RepeatInterleaveCopiesBitsAndSumsInFp32) {
  // Forward copies bf16 values: the CPU's fp32 result exactly. Backward adds each entry's 3 copies in fp32 in
  // the CPU's order and rounds once: the CPU's fp32 sum rounded to bf16, exactly.
  const Tensor x = bf16Exact({2, 37, 3, 40}, 71), g = bf16Exact({2, 37, 9, 40}, 72);
  Variable cpu(x.toDType(DType::F32), true), cuda(x.to(Device::CUDA), true);
  Variable yCpu = ops::repeatInterleave(cpu, 2, 3), yCuda = ops::repeatInterleave(cuda, 2, 3);
  ASSERT_EQ(yCuda.dtype(), DType::BF16);
  yCpu.backward(g.toDType(DType::F32));
  yCuda.backward(g.to(Device::CUDA));
  ASSERT_EQ(cuda.grad().dtype(), DType::BF16);
  EXPECT_EQ(relativeError(yCuda.data(), yCpu.data()), 0);
  EXPECT_EQ(relativeError(cuda.grad(), cpu.grad().toDType(DType::BF16)), 0);
}

TEST_F(SequenceBf16, GroupedQueryAttentionRunsTheFlashKernels) {
  // BF16 q, k, v at the flash head dims, 4 query heads over 4, 2 or 1 key/value heads: bf16 outputs and
  // gradients within the flash kernels' bf16 tolerance (relative L2 < 1e-2) of the float64 CPU op on the same
  // rounded values. No flash kernel for the head dim: an error naming the op.
  for (int64_t d : {32, 64}) {
    for (int64_t kv : {4, 2, 1}) {
      SCOPED_TRACE(std::to_string(d) + " " + std::to_string(kv));
      const Tensor q = bf16Exact({2, 70, 4, d}, 73), k = bf16Exact({2, 70, kv, d}, 74);
      const Tensor v = bf16Exact({2, 70, kv, d}, 75), g = bf16Exact({2, 70, 4, d}, 76);
      std::vector<Variable> ref, bf;
      for (const Tensor& t : {q, k, v}) {
        ref.emplace_back(t.toDType(DType::F64), true);
        bf.emplace_back(t.to(Device::CUDA), true);
      }
      Variable yRef = ops::causalAttention(ref[0], ref[1], ref[2]), y = ops::causalAttention(bf[0], bf[1], bf[2]);
      ASSERT_EQ(y.dtype(), DType::BF16);
      yRef.backward(g.toDType(DType::F64));
      y.backward(g.to(Device::CUDA));
      EXPECT_LT(testing::relativeL2(y.data(), yRef.data()), 1e-2);
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(bf[i].grad().dtype(), DType::BF16);
        EXPECT_LT(testing::relativeL2(bf[i].grad(), ref[i].grad()), 1e-2) << "gradient of input " << i;
      }
    }
  }
  Variable q(bf16Exact({1, 8, 2, 16}, 77).to(Device::CUDA)), k(bf16Exact({1, 8, 1, 16}, 78).to(Device::CUDA));
  try {
    ops::causalAttention(q, k, k);
    ADD_FAILURE() << "bf16 at head dim 16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("causalAttention"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minidp
