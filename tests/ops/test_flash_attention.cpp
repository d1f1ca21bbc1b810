// Flash attention (kernels/flash_attention.h): the CPU twins against the existing CPU attention path
// (float64, 1e-12) and float64 finite differences; the CUDA fp32 kernels against the CPU twin, the CUDA
// bf16 kernels against a float64 reference within a bf16 tolerance, at every head dim with a kernel and
// at lengths that are no multiple of a tile; each tensor inside a larger allocation whose rows past the
// sequence end are NaN (inputs: must never be read; outputs: must stay unwritten), outputs poisoned with
// NaN first so every element must be written; two runs bitwise equal; the op on CUDA against the CPU op.
// GPT refuses a bf16 shape without a kernel when it is built. Separate q, k, v with grouped key/value heads
// (the twin on the CPU, causalAttention on CUDA) against the packed path on k and v repeated: y and dq the
// same bits, dk and dv within the rounding of their group sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/tensor/dispatch.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "kernels/flash_attention.h"
#include "models/gpt.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

using testing::gradcheck;
using testing::randomTensor;
using testing::roundingEps;

// Sizes of one attention call: B sequences of T tokens, H heads of d channels.
struct Dims {
  int64_t B, T, H, d;
  int64_t C() const { return H * d; }
};

std::string describe(const Dims& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " d=" + std::to_string(s.d);
}

// ---- the CPU twin ----

// The twin as an op, so autograd and gradcheck can drive it: y = attention(qkv), lse kept for backward.
Variable twinAttention(const Variable& qkvVar, int64_t H) {
  const Tensor& qkv = qkvVar.data();
  const Dims s{qkv.size(0), qkv.size(1), H, qkv.size(2) / 3 / H};
  Tensor y = Tensor::empty({s.B, s.T, s.C()}, DType::F64, Device::CPU);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F64, Device::CPU);
  kernels::cpu::flashAttentionForward<double>(kernels::packedOperands<double>(qkv.data<double>(), s.H, s.d),
                                              y.data<double>(), lse.data<double>(), s.B, s.T, s.H, s.d);
  return Variable::fromOp(y, {qkvVar}, [s, qkv, y, lse](const Tensor& g) {
    Tensor dqkv = Tensor::empty(qkv.shape(), DType::F64, Device::CPU);
    Tensor rowDot = Tensor::empty({s.B, s.H, s.T}, DType::F64, Device::CPU);
    kernels::cpu::flashAttentionBackward<double>(
        g.data<double>(), kernels::packedOperands<double>(qkv.data<double>(), s.H, s.d), y.data<double>(),
        lse.data<double>(), rowDot.data<double>(), kernels::packedGradients<double>(dqkv.data<double>(), s.H, s.d), s.B,
        s.T, s.H, s.d);
    return std::vector<Tensor>{dqkv};
  });
}

void expectNear(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) ASSERT_NEAR(actual[i], expected[i], tol) << what << " element " << i;
}

TEST(FlashAttentionCpu, ForwardAndBackwardMatchTheReferencePath) {
  // The existing op on the CPU (scores, causal softmax, GEMMs) is the reference; T = 9, d = 5 odd sizes.
  const int64_t H = 3;
  Tensor qkv = randomTensor({2, 9, 3 * H * 5}, 101, -2.0, 2.0), dy = randomTensor({2, 9, H * 5}, 102);
  Variable ref(qkv.clone(), true), twin(qkv.clone(), true);
  Variable yRef = ops::causalSelfAttention(ref, H), yTwin = twinAttention(twin, H);
  expectNear(yTwin.data().toVector<double>(), yRef.data().toVector<double>(), 1e-12, "y");
  yRef.backward(dy);
  yTwin.backward(dy);
  expectNear(twin.grad().toVector<double>(), ref.grad().toVector<double>(), 1e-12, "dqkv");
}

TEST(FlashAttentionCpu, LogsumexpIsTheScaledScoresLogsumexp) {
  const Dims s{2, 6, 2, 4};
  Tensor qkv = randomTensor({s.B, s.T, 3 * s.C()}, 103, -2.0, 2.0);
  std::vector<double> y(s.B * s.T * s.C()), lse(s.B * s.H * s.T), x = qkv.toVector<double>();
  kernels::cpu::flashAttentionForward<double>(kernels::packedOperands<double>(x.data(), s.H, s.d), y.data(), lse.data(),
                                              s.B, s.T, s.H, s.d);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.T; ++i) {
        double total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.d; ++c)
            dot += x[(b * s.T + i) * 3 * s.C() + h * s.d + c] * x[(b * s.T + j) * 3 * s.C() + s.C() + h * s.d + c];
          total += std::exp(dot / std::sqrt(double(s.d)));
        }
        EXPECT_NEAR(lse[(b * s.H + h) * s.T + i], std::log(total), 1e-12) << "b " << b << " h " << h << " t " << i;
      }
}

TEST(FlashAttentionCpu, Gradcheck) {
  std::string report;
  EXPECT_LT(gradcheck([](const std::vector<Variable>& in) { return twinAttention(in[0], 2); },
                      {Variable(randomTensor({2, 5, 24}, 104, -2.0, 2.0), true)}, &report),
            1e-6)
      << report;
}

TEST(FlashAttentionCpu, FloatTwinMatchesDoubleTwin) {
  const Dims s{2, 33, 2, 8};
  Tensor qkv = randomTensor({s.B, s.T, 3 * s.C()}, 105), dy = randomTensor({s.B, s.T, s.C()}, 106);
  const std::vector<double> x = qkv.toVector<double>(), g = dy.toVector<double>();
  const std::vector<float> xf(x.begin(), x.end()), gf(g.begin(), g.end());
  std::vector<double> y(s.B * s.T * s.C()), lse(s.B * s.H * s.T), rowDot(lse.size()), dx(x.size());
  std::vector<float> yf(y.size()), lsef(lse.size()), rowDotf(lse.size()), dxf(x.size());
  kernels::cpu::flashAttentionForward<double>(kernels::packedOperands<double>(x.data(), s.H, s.d), y.data(), lse.data(),
                                              s.B, s.T, s.H, s.d);
  kernels::cpu::flashAttentionBackward<double>(
      g.data(), kernels::packedOperands<double>(x.data(), s.H, s.d), y.data(), lse.data(), rowDot.data(),
      kernels::packedGradients<double>(dx.data(), s.H, s.d), s.B, s.T, s.H, s.d);
  kernels::cpu::flashAttentionForward<float>(kernels::packedOperands<float>(xf.data(), s.H, s.d), yf.data(),
                                             lsef.data(), s.B, s.T, s.H, s.d);
  kernels::cpu::flashAttentionBackward<float>(
      gf.data(), kernels::packedOperands<float>(xf.data(), s.H, s.d), yf.data(), lsef.data(), rowDotf.data(),
      kernels::packedGradients<float>(dxf.data(), s.H, s.d), s.B, s.T, s.H, s.d);
  expectNear(std::vector<double>(yf.begin(), yf.end()), y, 1e-5, "y");
  expectNear(std::vector<double>(lsef.begin(), lsef.end()), lse, 1e-5, "lse");
  expectNear(std::vector<double>(dxf.begin(), dxf.end()), dx, 1e-5, "dqkv");
}

// The twin on separate q (B, T, H, d), k and v (B, T, Hkv, d) in place as an op: dk and dv come out per
// key/value head, each group's G query heads summed in the twin's accumulation.
Variable twinGroupedAttention(const Variable& qVar, const Variable& kVar, const Variable& vVar) {
  const Tensor& q = qVar.data();
  const Tensor& k = kVar.data();
  const Tensor& v = vVar.data();
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), Hkv = k.size(2), d = q.size(3), G = H / Hkv;
  const auto operands = [=] {
    return kernels::AttentionOperands<double>{
        q.data<double>(), k.data<double>(), v.data<double>(), H * d, Hkv * d, Hkv * d, G};
  };
  Tensor y = Tensor::empty(q.shape(), DType::F64, Device::CPU);
  Tensor lse = Tensor::empty({B, H, T}, DType::F64, Device::CPU);
  kernels::cpu::flashAttentionForward<double>(operands(), y.data<double>(), lse.data<double>(), B, T, H, d);
  return Variable::fromOp(y, {qVar, kVar, vVar}, [=](const Tensor& g) {
    Tensor dq = Tensor::empty(q.shape(), DType::F64, Device::CPU);
    Tensor dk = Tensor::empty(k.shape(), DType::F64, Device::CPU),
           dv = Tensor::empty(v.shape(), DType::F64, Device::CPU);
    Tensor rowDot = Tensor::empty({B, H, T}, DType::F64, Device::CPU);
    kernels::cpu::flashAttentionBackward<double>(
        g.data<double>(), operands(), y.data<double>(), lse.data<double>(), rowDot.data<double>(),
        kernels::AttentionGradients<double>{dq.data<double>(), dk.data<double>(), dv.data<double>(), H * d, Hkv * d,
                                            Hkv * d},
        B, T, H, d);
    return std::vector<Tensor>{dq, dk, dv};
  });
}

TEST(FlashAttentionCpu, SeparateGroupedOperandsMatchPackedRepeatedOnes) {
  // The twin on q, k and v in place with G = H / Hkv, against the twin on the (B, T, 3C) qkv packed from q and
  // k, v repeated to H heads (ops::repeatInterleave, ops::cat): y and dq are the same products in the same
  // order, so the same bits; dk and dv add the same terms, the group's heads into one sum instead of per head
  // and then across heads, so they agree within 1e-12. All three against the packed op as the CPU runs it
  // (causalSelfAttention's materialised path) within 1e-12. T = 9, d = 6: no size a multiple of another.
  const int64_t B = 2, T = 9, H = 4, d = 6;
  for (int64_t Hkv : {4, 2, 1}) {
    SCOPED_TRACE("Hkv " + std::to_string(Hkv));
    const int64_t G = H / Hkv;
    const Tensor q = randomTensor({B, T, H, d}, 107, -2.0, 2.0), k = randomTensor({B, T, Hkv, d}, 108, -2.0, 2.0);
    const Tensor v = randomTensor({B, T, Hkv, d}, 109), dy = randomTensor({B, T, H, d}, 110);
    std::vector<Variable> grouped, packed, reference;
    for (const Tensor& t : {q, k, v}) {
      grouped.emplace_back(t.clone(), true);
      packed.emplace_back(t.clone(), true);
      reference.emplace_back(t.clone(), true);
    }
    Variable yGrouped = twinGroupedAttention(grouped[0], grouped[1], grouped[2]);
    const Shape rows{B, T, H * d};
    const Variable qkv =
        ops::cat({ops::reshape(packed[0], rows), ops::reshape(ops::repeatInterleave(packed[1], 2, G), rows),
                  ops::reshape(ops::repeatInterleave(packed[2], 2, G), rows)},
                 -1);
    Variable yPacked = ops::reshape(twinAttention(qkv, H), {B, T, H, d});
    Variable yReference = ops::causalAttentionPacked(reference[0], reference[1], reference[2]);
    yGrouped.backward(dy);
    yPacked.backward(dy);
    yReference.backward(dy);
    EXPECT_EQ(yGrouped.data().toVector<double>(), yPacked.data().toVector<double>());
    expectNear(yGrouped.data().toVector<double>(), yReference.data().toVector<double>(), 1e-12, "y");
    const char* names[3] = {"dq", "dk", "dv"};
    EXPECT_EQ(grouped[0].grad().toVector<double>(), packed[0].grad().toVector<double>()) << "dq";
    for (int i = 0; i < 3; ++i) {
      expectNear(grouped[i].grad().toVector<double>(), packed[i].grad().toVector<double>(), 1e-12, names[i]);
      expectNear(grouped[i].grad().toVector<double>(), reference[i].grad().toVector<double>(), 1e-12, names[i]);
    }
  }
}

TEST(FlashAttentionOp, Bf16OnTheCpuIsAnError) {
  Tensor qkv = Tensor::fromVector<bf16>(std::vector<bf16>(2 * 3 * 192, floatToBf16(0.5f)), {2, 3, 192});
  EXPECT_THROW(ops::causalSelfAttention(Variable(qkv), 1), Error);
}

// ---- CUDA kernels ----

// Host values of a float tensor of any float dtype (bf16 widened exactly).
std::vector<double> valuesOf(const Tensor& t) {
  if (t.dtype() != DType::BF16) return t.toDType(DType::F64).toVector<double>();
  std::vector<double> out;
  for (bf16 v : t.toVector<bf16>()) out.push_back(bf16ToFloat(v));
  return out;
}

// A CUDA tensor of `dtype` (F32 or BF16) holding `values` rounded to it.
Tensor cudaTensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  if (dtype == DType::F32)
    return Tensor::fromVector<float>(std::vector<float>(values.begin(), values.end()), shape, Device::CUDA);
  std::vector<bf16> rounded;
  for (double v : values) rounded.push_back(floatToBf16(static_cast<float>(v)));
  return Tensor::fromVector<bf16>(rounded, shape, Device::CUDA);
}

// A CUDA tensor whose every element is NaN (0xff bytes: a NaN in fp32 and in bf16).
Tensor poisoned(const Shape& shape, DType dtype) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return cudaTensor(std::vector<double>(shapeNumel(shape), nan), shape, dtype);
}

// y, lse and dqkv of one call, as float64 host vectors.
struct AttentionResult {
  std::vector<double> y, lse, dqkv;
};

// The CPU twin in float64 on `qkv` and `dy` as given (already rounded to the tested precision).
AttentionResult referenceTwin(const Dims& s, const std::vector<double>& qkv, const std::vector<double>& dy) {
  AttentionResult r{std::vector<double>(s.B * s.T * s.C()), std::vector<double>(s.B * s.H * s.T),
                    std::vector<double>(qkv.size())};
  std::vector<double> rowDot(r.lse.size());
  const kernels::AttentionOperands<double> in = kernels::packedOperands<double>(qkv.data(), s.H, s.d);
  kernels::cpu::flashAttentionForward<double>(in, r.y.data(), r.lse.data(), s.B, s.T, s.H, s.d);
  kernels::cpu::flashAttentionBackward<double>(dy.data(), in, r.y.data(), r.lse.data(), rowDot.data(),
                                               kernels::packedGradients<double>(r.dqkv.data(), s.H, s.d), s.B, s.T, s.H,
                                               s.d);
  return r;
}

// What lies past the sequence end of each tensor handed to the kernels.
enum class Tail {
  NaN,        // a tail of kTailRows rows, poisoned with NaN: inputs must not be read, outputs not written
  Unwritten,  // the same tail, never written (compute-sanitizer initcheck reports any read of it)
};
constexpr int64_t kTailRows = 64;  // a tile: the most rows a tile can run past the sequence end

// A tensor of `rows` rows of `width` elements of `dtype` at the start of a CUDA allocation kTailRows rows
// longer, holding `values` (NaN when empty); the tail as `tail` says.
struct Padded {
  Tensor whole, head;
  int64_t rows, width;
  Padded(const std::vector<double>& values, int64_t rows, int64_t width, DType dtype, Tail tail)
      : whole(Tensor::empty({rows + kTailRows, width}, dtype, Device::CUDA)),
        head(Tensor::alias(whole, 0, {rows, width})),
        rows(rows),
        width(width) {
    head.copyFrom(values.empty() ? poisoned({rows, width}, dtype) : cudaTensor(values, {rows, width}, dtype));
    if (tail == Tail::NaN)
      Tensor::alias(whole, rows * width, {kTailRows, width}).copyFrom(poisoned({kTailRows, width}, dtype));
  }
  template <typename T>
  T* data() const {
    return head.data<T>();
  }
  std::vector<double> values() const { return valuesOf(head); }
  // Elements of the tail that are not NaN (written by someone after it was poisoned).
  int64_t tailWritten() const {
    int64_t written = 0;
    for (double v : valuesOf(Tensor::alias(whole, rows * width, {kTailRows, width}))) written += !std::isnan(v);
    return written;
  }
};

// flashAttentionBackwardScratchBytes<bf16> at s (a CUDA build's; the CUDA tests skip before this elsewhere).
size_t scoreScratchBytes(const Dims& s) {
  size_t bytes = 0;
  MINIDP_ON_CUDA(bytes = kernels::cuda::flashAttentionBackwardScratchBytes<bf16>(s.B, s.T, s.H, s.d));
  return bytes;
}

// How runCuda's backward runs: without scratch (the query pass recomputes the scores), or with the scratch
// of flashAttentionBackwardScratchBytes (the key pass stores dS for it where the shape allows).
enum class Scores { Recomputed, Stored };

// The CUDA kernels in `dtype` (F32 or BF16) on qkv and dy rounded to it, every tensor inside a longer
// allocation (Padded); outputs poisoned first. With Tail::NaN, expects the output tails still poisoned
// (the score scratch's too).
AttentionResult runCuda(const Dims& s, const std::vector<double>& qkv, const std::vector<double>& dy, DType dtype,
                        Tail tail = Tail::NaN, Scores scores = Scores::Recomputed) {
  const Padded x(qkv, s.B * s.T, 3 * s.C(), dtype, tail), g(dy, s.B * s.T, s.C(), dtype, tail);
  const Padded y({}, s.B * s.T, s.C(), dtype, tail), dx({}, s.B * s.T, 3 * s.C(), dtype, tail);
  const Padded lse({}, s.B * s.H, s.T, DType::F32, tail), rowDot({}, s.B * s.H, s.T, DType::F32, tail);
  const size_t scratchBytes = dtype == DType::BF16 && scores == Scores::Stored ? scoreScratchBytes(s) : 0;
  // The scratch as (tiles, 64 x 64) bf16, poisoned; one row of tiles at least, so that Padded has a shape.
  const int64_t scratchTiles = std::max<int64_t>(1, int64_t(scratchBytes) / (64 * 64 * 2));
  const Padded scratch({}, scratchTiles, 64 * 64, DType::BF16, tail);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    MINIDP_ON_CUDA(kernels::cuda::flashAttentionForward<T>(kernels::packedOperands<T>(x.data<T>(), s.H, s.d),
                                                           y.data<T>(), lse.data<float>(), s.B, s.T, s.H, s.d,
                                                           runtime::computeStream()));
    MINIDP_ON_CUDA(kernels::cuda::flashAttentionBackward<T>(
        g.data<T>(), kernels::packedOperands<T>(x.data<T>(), s.H, s.d), y.data<T>(), lse.data<float>(),
        rowDot.data<float>(), kernels::packedGradients<T>(dx.data<T>(), s.H, s.d), s.B, s.T, s.H, s.d,
        scratchBytes ? static_cast<void*>(scratch.data<bf16>()) : nullptr, scratchBytes, runtime::computeStream()));
  };
  if (dtype == DType::F32) {
    run(float{});
  } else {
    run(bf16{});
  }
  if (tail == Tail::NaN) {
    const char* names[5] = {"y", "dqkv", "lse", "rowDot", "score scratch"};
    const Padded* outputs[5] = {&y, &dx, &lse, &rowDot, &scratch};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(outputs[i]->tailWritten(), 0) << names[i] << " written past its end";
  }
  return {y.values(), lse.values(), dx.values()};
}

// Every value finite (none left at the poison), and max |a - b| / max |b|.
double maxRelativeError(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  double diff = 0, scale = 1e-30;
  int64_t unwritten = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    unwritten += !std::isfinite(a[i]);
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  EXPECT_EQ(unwritten, 0) << what << ": elements not written (or not finite)";
  return unwritten ? std::numeric_limits<double>::infinity() : diff / scale;
}

// ||a - b||_2 / ||b||_2 over the elements of one part (0 = q, 1 = k, 2 = v) of (B, T, 3C) vectors, or all
// elements with part = -1. A part that is (nearly) zero in the reference, as dq and dk are at T = 1 (a
// softmax over one key has no gradient), is measured against 1% of the whole vector's norm instead.
double relativeL2(const std::vector<double>& a, const std::vector<double>& b, int64_t C, int part) {
  double num = 0, den = 0, denAll = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    denAll += b[i] * b[i];
    if (part >= 0 && static_cast<int64_t>(i) % (3 * C) / C != part) continue;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-4 * denAll));
}

class FlashAttentionCuda : public ::testing::TestWithParam<Dims> {
 protected:
  void SetUp() override {
    MINIDP_SKIP_WITHOUT_CUDA();
  }
};

// Random values in [-1, 1) rounded to `dtype` (F32 or BF16), as float64.
std::vector<double> randomValues(int64_t n, uint64_t seed, DType dtype) {
  std::vector<double> v = randomTensor({n}, seed).toVector<double>();
  for (double& x : v) x = dtype == DType::F32 ? double(float(x)) : double(bf16ToFloat(floatToBf16(float(x))));
  return v;
}

TEST_P(FlashAttentionCuda, F32MatchesCpuTwin) {
  // The same fp32 inputs; the twin in float64. The longest sums run over T keys and d channels, so fp32
  // rounding stays within a few (T + d) ulp of the largest value; a wrong index, mask, tile edge or
  // missed row is off by O(1), and a NaN read past the sequence end reaches the outputs.
  const Dims s = GetParam();
  const std::vector<double> qkv = randomValues(s.B * s.T * 3 * s.C(), 201, DType::F32);
  const std::vector<double> dy = randomValues(s.B * s.T * s.C(), 202, DType::F32);
  const AttentionResult expected = referenceTwin(s, qkv, dy), actual = runCuda(s, qkv, dy, DType::F32);
  const double tol = 4.0 * static_cast<double>(s.T + s.d + 4) * roundingEps(DType::F32);
  EXPECT_LE(maxRelativeError(actual.y, expected.y, "y"), tol) << describe(s);
  EXPECT_LE(maxRelativeError(actual.lse, expected.lse, "lse"), tol) << describe(s);
  EXPECT_LE(maxRelativeError(actual.dqkv, expected.dqkv, "dqkv"), tol) << describe(s);
  const AttentionResult again = runCuda(s, qkv, dy, DType::F32);  // deterministic: the same bits
  EXPECT_TRUE(again.y == actual.y && again.lse == actual.lse && again.dqkv == actual.dqkv) << describe(s);
}

TEST_P(FlashAttentionCuda, Bf16MatchesFloat64) {
  // bf16 inputs; the reference in float64 on the same (rounded) values. The kernels round P and dS to
  // bf16 for the tensor-core products (8 mantissa bits: 2^-9 relative) and store y and dqkv in bf16,
  // with fp32 accumulation: relative L2 errors of a few 1e-3. Bound: 1e-2 per output and per part.
  const Dims s = GetParam();
  const std::vector<double> qkv = randomValues(s.B * s.T * 3 * s.C(), 203, DType::BF16);
  const std::vector<double> dy = randomValues(s.B * s.T * s.C(), 204, DType::BF16);
  const AttentionResult expected = referenceTwin(s, qkv, dy), actual = runCuda(s, qkv, dy, DType::BF16);
  maxRelativeError(actual.y, expected.y, "y");  // every element written and finite
  maxRelativeError(actual.lse, expected.lse, "lse");
  maxRelativeError(actual.dqkv, expected.dqkv, "dqkv");
  EXPECT_LT(relativeL2(actual.y, expected.y, s.C(), -1), 1e-2) << "y " << describe(s);
  EXPECT_LT(relativeL2(actual.lse, expected.lse, s.C(), -1), 1e-2) << "lse " << describe(s);
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    EXPECT_LT(relativeL2(actual.dqkv, expected.dqkv, s.C(), part), 1e-2) << names[part] << " " << describe(s);
  }
  const AttentionResult again = runCuda(s, qkv, dy, DType::BF16);  // deterministic: the same bits
  EXPECT_TRUE(again.y == actual.y && again.lse == actual.lse && again.dqkv == actual.dqkv) << describe(s);
}

TEST_P(FlashAttentionCuda, Bf16StoredScoreGradientsMatchRecomputedOnes) {
  // The key pass's stored dS against the query pass's own: y and lse are the forward's; dk and dv come from
  // the same key pass, bit for bit. dq is the same product over the same bf16 dS wherever the key pass's
  // S^T = k q^T gives the query pass's S = q k^T to the bit; where the two tensor-core sums round
  // differently, a dS element moves by one bf16 rounding: within 2^-7 of the largest dq. Then the stored
  // path against float64, as Bf16MatchesFloat64.
  const Dims s = GetParam();
  if (scoreScratchBytes(s) == 0) {
    GTEST_SKIP() << "no score scratch at head dim " << s.d;
  }
  const std::vector<double> qkv = randomValues(s.B * s.T * 3 * s.C(), 205, DType::BF16);
  const std::vector<double> dy = randomValues(s.B * s.T * s.C(), 206, DType::BF16);
  const AttentionResult recomputed = runCuda(s, qkv, dy, DType::BF16);
  const AttentionResult stored = runCuda(s, qkv, dy, DType::BF16, Tail::NaN, Scores::Stored);
  EXPECT_TRUE(stored.y == recomputed.y && stored.lse == recomputed.lse) << describe(s);
  const int64_t C = s.C();
  std::vector<double> dqStored, dqRecomputed;
  for (size_t i = 0; i < stored.dqkv.size(); ++i) {
    const int64_t part = static_cast<int64_t>(i) % (3 * C) / C;
    if (part == 0) {
      dqStored.push_back(stored.dqkv[i]);
      dqRecomputed.push_back(recomputed.dqkv[i]);
    } else {
      EXPECT_EQ(stored.dqkv[i], recomputed.dqkv[i])
          << (part == 1 ? "dk" : "dv") << " element " << i << " " << describe(s);
      if (stored.dqkv[i] != recomputed.dqkv[i]) break;
    }
  }
  EXPECT_LE(maxRelativeError(dqStored, dqRecomputed, "dq"), 1.0 / 128) << describe(s);
  const AttentionResult expected = referenceTwin(s, qkv, dy);
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    EXPECT_LT(relativeL2(stored.dqkv, expected.dqkv, C, part), 1e-2) << names[part] << " " << describe(s);
  }
  const AttentionResult again = runCuda(s, qkv, dy, DType::BF16, Tail::NaN, Scores::Stored);
  EXPECT_TRUE(again.dqkv == stored.dqkv) << "deterministic " << describe(s);
}

// Every head dim with a kernel at T = 1, 7, 63, 65, 100, 257 (one key; partial single tiles; one tile and
// one row; two tiles, the last partial; five tiles, the last holding one row), B = 2 up to T = 65 (the first
// sequence's tiles run into the second's rows, the second's into the NaN tail); T = 64 and 128 (whole
// tiles, no padding rows); and the fortunes GPT's attention (768 CTAs: several waves on the GPU).
std::vector<Dims> kernelShapes() {
  std::vector<Dims> shapes;
  for (int64_t d : {32, 64, 80, 96, 128, 256}) {
    for (int64_t T : {1, 7, 63, 65, 100, 257}) shapes.push_back(Dims{T <= 65 ? 2 : 1, T, d >= 128 ? 1 : 2, d});
  }
  shapes.push_back(Dims{1, 64, 2, 64});
  shapes.push_back(Dims{2, 128, 1, 128});
  shapes.push_back(Dims{32, 256, 6, 64});
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionCuda, ::testing::ValuesIn(kernelShapes()),
                         [](const ::testing::TestParamInfo<Dims>& info) {
                           const Dims& s = info.param;
                           return "B" + std::to_string(s.B) + "T" + std::to_string(s.T) + "H" + std::to_string(s.H) +
                                  "d" + std::to_string(s.d);
                         });

TEST(FlashAttentionCudaTail, UnwrittenTailIsNeverRead) {
  // The rows past the sequence end are never written here: under compute-sanitizer --tool initcheck
  // (scripts/attention-check.sh) any read of them is reported. Without the sanitizer: the twin's values.
  MINIDP_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::BF16, DType::F32}) {
    for (int64_t d : {64, 128, 256}) {
      const Dims s{1, 100, 2, d};
      const std::vector<double> qkv = randomValues(s.B * s.T * 3 * s.C(), 205, dtype);
      const std::vector<double> dy = randomValues(s.B * s.T * s.C(), 206, dtype);
      const AttentionResult expected = referenceTwin(s, qkv, dy);
      const AttentionResult actual = runCuda(s, qkv, dy, dtype, Tail::Unwritten);
      EXPECT_LT(relativeL2(actual.y, expected.y, s.C(), -1), 1e-2) << dtypeName(dtype) << " " << describe(s);
      EXPECT_LT(relativeL2(actual.dqkv, expected.dqkv, s.C(), -1), 1e-2) << dtypeName(dtype) << " " << describe(s);
    }
  }
}

TEST(FlashAttentionCudaTail, Bf16OutputsAtAnOddElementGetTheSameBits) {
  // bf16 outputs (y, dq, dk, dv) go out as a thread's two adjacent columns in one 4-byte store where the
  // destination is 4-byte aligned; one element past an aligned base they take one 2-byte store per element.
  // The values are the same either way: the same bits, every element written, nothing past the end.
  MINIDP_SKIP_WITHOUT_CUDA();
  for (int64_t d : {64, 128}) {
    const Dims s{2, 100, 2, d};
    const std::vector<double> qkv = randomValues(s.B * s.T * 3 * s.C(), 207, DType::BF16);
    const std::vector<double> dy = randomValues(s.B * s.T * s.C(), 208, DType::BF16);
    const AttentionResult aligned = runCuda(s, qkv, dy, DType::BF16);
    const int64_t rows = s.B * s.T;
    const Tensor x = cudaTensor(qkv, {rows, 3 * s.C()}, DType::BF16), g = cudaTensor(dy, {rows, s.C()}, DType::BF16);
    const Tensor y = cudaTensor(aligned.y, {rows, s.C()}, DType::BF16);  // backward reads y 16-byte aligned
    const Tensor lse = cudaTensor(aligned.lse, {s.B * s.H, s.T}, DType::F32);
    const Tensor rowDot = Tensor::empty({s.B * s.H, s.T}, DType::F32, Device::CUDA);
    // Odd outputs: one element into an allocation two elements longer, poisoned, so that both ends show.
    const Tensor yWhole = poisoned({rows * s.C() + 2}, DType::BF16),
                 dxWhole = poisoned({rows * 3 * s.C() + 2}, DType::BF16);
    const Tensor yOdd = Tensor::alias(yWhole, 1, {rows, s.C()}), dxOdd = Tensor::alias(dxWhole, 1, {rows, 3 * s.C()});
    const auto in = kernels::packedOperands<bf16>(x.data<bf16>(), s.H, s.d);
    MINIDP_ON_CUDA(kernels::cuda::flashAttentionForward<bf16>(in, yOdd.data<bf16>(), lse.data<float>(), s.B, s.T, s.H,
                                                              s.d, runtime::computeStream()));
    MINIDP_ON_CUDA(kernels::cuda::flashAttentionBackward<bf16>(
        g.data<bf16>(), in, y.data<bf16>(), lse.data<float>(), rowDot.data<float>(),
        kernels::packedGradients<bf16>(dxOdd.data<bf16>(), s.H, s.d), s.B, s.T, s.H, s.d, runtime::computeStream()));
    EXPECT_TRUE(valuesOf(yOdd) == aligned.y) << "y, " << describe(s);
    EXPECT_TRUE(valuesOf(dxOdd) == aligned.dqkv) << "dqkv, " << describe(s);
    for (const Tensor* whole : {&yWhole, &dxWhole}) {
      const std::vector<double> v = valuesOf(*whole);
      EXPECT_TRUE(std::isnan(v.front()) && std::isnan(v.back())) << "written outside the outputs, " << describe(s);
    }
  }
}

// ---- GPT's shape check ----

TEST(FlashAttentionGpt, Bf16WithoutAKernelIsRefusedWhenBuilt) {
  // bf16 attention runs on the CUDA flash kernels only: a head dim without one is refused by the model's
  // constructor (before the banner, data and forward), in one line naming the flags; fp32 takes any.
  models::GptConfig c;
  c.compute = DType::BF16;
  c.embd = 200;
  c.heads = 2;  // head dim 100
  try {
    models::GPT model(c, 1);
    ADD_FAILURE() << "head dim 100 in bf16 was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--embd 200"), std::string::npos) << what;
    EXPECT_NE(what.find("--heads 2"), std::string::npos) << what;
    EXPECT_NE(what.find(kernels::flashAttentionHeadDims()), std::string::npos) << what;
  }
  c.compute = DType::F32;
  EXPECT_NO_THROW(models::GPT(c, 1));
  for (int64_t d : {32, 64, 80, 96, 128, 256}) {
    c.compute = DType::BF16;
    c.heads = 2;
    c.embd = 2 * d;
    EXPECT_NO_THROW(models::GPT(c, 1)) << "head dim " << d;
  }
}

// ---- the op on CUDA ----

using FlashAttentionOpCuda = testing::CudaVsCpuTest;

TEST_P(FlashAttentionOpCuda, MatchesTheCpuOp) {
  // d = 64 and 256 take the flash kernels on CUDA (F32; 256 its row kernels), the CPU keeps the reference
  // path. F64 on CUDA keeps the reference path too: the comparison still runs, as the fp64 check of the wiring.
  const DType dtype = GetParam();
  for (const int heads : {2, 1}) {  // (2, 70, 384): head dim 64; (1, 70, 768): head dim 256
    const int64_t d = heads == 2 ? 64 : 256;
    const auto f = [heads](const std::vector<Variable>& in) { return ops::causalSelfAttention(in[0], heads); };
    const testing::DeviceComparison c = testing::compareDevices(f, {randomTensor({2, 70, 3 * heads * d}, 205)}, dtype);
    expectClose(c, 4.0 * static_cast<double>(70 + d + 4) * roundingEps(dtype));
  }
}

TEST_P(FlashAttentionOpCuda, BitwiseReproducible) {
  const DType dtype = GetParam();
  Tensor qkv = randomTensor({2, 130, 384}, 206, -1.0, 1.0, dtype).to(Device::CUDA);
  Tensor dy = randomTensor({2, 130, 128}, 207, -1.0, 1.0, dtype).to(Device::CUDA);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    Variable x(qkv.clone(), true);
    Variable y = ops::causalSelfAttention(x, 2);
    y.backward(dy);
    std::vector<double> bits = valuesOf(y.data()), g = valuesOf(x.grad());
    bits.insert(bits.end(), g.begin(), g.end());
    runs.push_back(bits);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FlashAttentionOpCuda, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtypeName(info.param); });

TEST(FlashAttentionOpBf16, MatchesFloat64AndIsReproducible) {
  // BF16 qkv gives BF16 y and dqkv on the flash kernels; the float64 CPU op on the same rounded values
  // is the reference (relative L2 < 1e-2, as for the kernels).
  MINIDP_SKIP_WITHOUT_CUDA();
  for (const Dims s : {Dims{2, 150, 3, 64}, Dims{2, 150, 2, 128}, Dims{1, 150, 2, 256}}) {
    const std::vector<double> qkv = randomValues(s.B * s.T * 3 * s.C(), 208, DType::BF16);
    const std::vector<double> dy = randomValues(s.B * s.T * s.C(), 209, DType::BF16);
    Variable ref(Tensor::fromVector<double>(qkv, {s.B, s.T, 3 * s.C()}), true);
    Variable yRef = ops::causalSelfAttention(ref, s.H);
    yRef.backward(Tensor::fromVector<double>(dy, {s.B, s.T, s.C()}));
    std::vector<std::vector<double>> runs;
    for (int run = 0; run < 2; ++run) {
      Variable x(cudaTensor(qkv, {s.B, s.T, 3 * s.C()}, DType::BF16), true);
      Variable y = ops::causalSelfAttention(x, s.H);
      ASSERT_EQ(y.dtype(), DType::BF16);
      y.backward(cudaTensor(dy, {s.B, s.T, s.C()}, DType::BF16));
      ASSERT_EQ(x.grad().dtype(), DType::BF16);
      std::vector<double> out = valuesOf(y.data()), g = valuesOf(x.grad());
      EXPECT_LT(relativeL2(out, yRef.data().toVector<double>(), s.C(), -1), 1e-2) << describe(s);
      EXPECT_LT(relativeL2(g, ref.grad().toVector<double>(), s.C(), -1), 1e-2) << describe(s);
      out.insert(out.end(), g.begin(), g.end());
      runs.push_back(out);
    }
    EXPECT_EQ(runs[0], runs[1]) << describe(s);
  }
}

TEST(FlashAttentionOpGrouped, SeparateOperandsMatchThePackedPath) {
  // causalAttention on CUDA runs the flash kernels on q, k and v in place (query head h reading key/value head
  // h / G; the key pass sums dk, dv over each group in fp32); causalAttentionPacked repeats k and v, packs
  // [q | k | v], runs the same kernels on the packed qkv and sums the repeats' gradients after rounding each
  // head's. y and dq are the same bits; dk and dv too where G = 1, and within the dtype's rounding otherwise
  // (relative L2 < 1e-5 in F32, < 1e-2 in BF16). BF16 and F32 at head dims 64, 128 and 256 (F32 256: the
  // row kernels; BF16 256: two column slices), T = 77 and 200 (no multiple of a tile), G = 1, 2, 4. The
  // float64 CPU op on the same rounded values bounds both (relative L2 < 1e-2).
  MINIDP_SKIP_WITHOUT_CUDA();
  const int64_t B = 2, H = 4;
  for (DType dtype : {DType::BF16, DType::F32}) {
    for (int64_t d : {64, 128, 256}) {
      for (int64_t T : {77, 200}) {
        for (int64_t Hkv : {4, 2, 1}) {
          SCOPED_TRACE(std::string(dtypeName(dtype)) + " d " + std::to_string(d) + " T " + std::to_string(T) + " Hkv " +
                       std::to_string(Hkv));
          const std::vector<double> q = randomValues(B * T * H * d, 301, dtype);
          const std::vector<double> k = randomValues(B * T * Hkv * d, 302, dtype);
          const std::vector<double> v = randomValues(B * T * Hkv * d, 303, dtype);
          const std::vector<double> dy = randomValues(B * T * H * d, 304, dtype);
          const Shape qShape{B, T, H, d}, kvShape{B, T, Hkv, d};
          std::vector<std::vector<double>> results[2];  // y, dq, dk, dv of each path
          for (int path = 0; path < 2; ++path) {
            std::vector<Variable> in{Variable(cudaTensor(q, qShape, dtype), true),
                                     Variable(cudaTensor(k, kvShape, dtype), true),
                                     Variable(cudaTensor(v, kvShape, dtype), true)};
            Variable y =
                path == 0 ? ops::causalAttention(in[0], in[1], in[2]) : ops::causalAttentionPacked(in[0], in[1], in[2]);
            ASSERT_EQ(y.dtype(), dtype);
            y.backward(cudaTensor(dy, qShape, dtype));
            results[path] = {valuesOf(y.data()), valuesOf(in[0].grad()), valuesOf(in[1].grad()),
                             valuesOf(in[2].grad())};
          }
          std::vector<Variable> ref{Variable(Tensor::fromVector<double>(q, qShape), true),
                                    Variable(Tensor::fromVector<double>(k, kvShape), true),
                                    Variable(Tensor::fromVector<double>(v, kvShape), true)};
          Variable yRef = ops::causalAttention(ref[0], ref[1], ref[2]);
          yRef.backward(Tensor::fromVector<double>(dy, qShape));
          const std::vector<double> expected[4] = {yRef.data().toVector<double>(), ref[0].grad().toVector<double>(),
                                                   ref[1].grad().toVector<double>(), ref[2].grad().toVector<double>()};
          const char* names[4] = {"y", "dq", "dk", "dv"};
          for (int i = 0; i < 4; ++i) {
            maxRelativeError(results[0][i], expected[i], names[i]);  // every element written and finite
            if (i < 2 || Hkv == H) {
              EXPECT_TRUE(results[0][i] == results[1][i]) << names[i] << " differs from the packed path";
            } else {
              EXPECT_LT(relativeL2(results[0][i], results[1][i], 1, -1), dtype == DType::F32 ? 1e-5 : 1e-2) << names[i];
            }
            EXPECT_LT(relativeL2(results[0][i], expected[i], 1, -1), 1e-2) << names[i];
          }
        }
      }
    }
  }
}

TEST(FlashAttentionOpBf16, AfterALinear) {
  // As in the GPT: qkv written by the bf16 linear (cuBLASLt, bias in its epilogue) into a fresh block,
  // then attention forward and backward. scripts/attention-check.sh runs this test alone under
  // compute-sanitizer --tool initcheck: a report here, with UnwrittenTailIsNeverRead clean, points at how
  // the sanitizer sees the GEMM's writes rather than at the attention kernels' reads.
  MINIDP_SKIP_WITHOUT_CUDA();
  const int64_t B = 6, T = 100, C = 128, H = 2;
  Tensor xs = cudaTensor(randomValues(B * T * C, 210, DType::BF16), {B, T, C}, DType::BF16);
  Variable x(xs, true);
  Variable w(randomTensor({3 * C, C}, 211, -0.1, 0.1, DType::F32).to(Device::CUDA), true);
  Variable b(randomTensor({3 * C}, 212, -0.1, 0.1, DType::F32).to(Device::CUDA), true);
  Variable y = ops::causalSelfAttention(ops::linear(x, w, b), H);
  y.backward(cudaTensor(randomValues(B * T * C, 213, DType::BF16), {B, T, C}, DType::BF16));
  for (const Tensor& t : {y.data(), x.grad()}) {
    int64_t bad = 0;
    for (double v : valuesOf(t)) bad += !std::isfinite(v);
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace minidp
