// The Hopper flash attention forward (kernels/flash_attention_sm90.h: TMA, mbarriers, wgmma) on a compute
// capability 9.0 GPU, against a float64 reference written here (causal and not), the CPU twin in float64
// (causal) and the cp.async bf16 kernel (causal): head dims 64, 80, 96, 128, 256; T = 1, 63, 64, 65, 200, 1000
// (one key; around one 64-row tile; one 128-row query tile and part of a second; many, the last partial);
// G = 1 and 4; packed qkv and separate q, k, v. Every input ends in 128 rows of NaN (one query tile: a copy
// that runs past the sequence end reads them), outputs are poisoned with NaN first (every element must be
// written) and end in NaN rows that must stay NaN. Two runs give the same bits. Skipped without a GPU and
// on other GPUs; on a 9.0 GPU the kernel must report itself available. Every schedule (serial, overlapped,
// ping-pong: the last in tests of its own). The backward (dq, dk, dv) likewise against a float64 reference
// backward written here (checked against finite differences, and the CPU twin where causal), the CPU twin and the
// cp.async bf16 backward (causal), at head dims 64, 80, 96, 128, 256, every element written, tails untouched, two runs
// the same bits.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_sm90.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

using kernels::AttentionOperands;

constexpr int64_t kTailRows = 128;  // NaN rows after every tensor: a whole query tile

bool computeCapability90() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

// One call: B sequences of T tokens, H query heads and H / G key/value heads of d channels.
struct Case {
  int64_t d, T, G;
  bool causal, packed;
  int64_t B() const { return T <= 65 ? 2 : 1; }  // two sequences where short: the first's tiles reach the second's
  int64_t H() const { return G == 4 ? 4 : 2; }
  int64_t kvHeads() const { return H() / G; }
};

std::string describe(const Case& c) {
  return "d" + std::to_string(c.d) + "T" + std::to_string(c.T) + "G" + std::to_string(c.G) +
         (c.causal ? "Causal" : "Full") + (c.packed ? "Packed" : "Separate");
}

// Random values in [lo, hi) rounded to bf16, as float64.
std::vector<double> bf16Values(int64_t n, uint64_t seed, double lo, double hi) {
  std::vector<double> v = testing::randomTensor({n}, seed, lo, hi).toVector<double>();
  for (double& x : v) x = bf16ToFloat(floatToBf16(float(x)));
  return v;
}

// q (B, T, H, d), k and v (B, T, H / G, d) on the host, in float64 (bf16 values).
struct Inputs {
  std::vector<double> q, k, v;
};

// rows x width elements of `dtype` at the start of a CUDA allocation kTailRows rows longer, all NaN
// (0xff bytes) but for `values` (none: all NaN).
struct DeviceRows {
  Tensor whole, head;
  int64_t rows, width;
  DeviceRows(const std::vector<double>& values, int64_t rows, int64_t width, DType dtype)
      : whole(Tensor::empty({rows + kTailRows, width}, dtype, Device::CUDA)),
        head(Tensor::alias(whole, 0, {rows, width})),
        rows(rows),
        width(width) {
    const int64_t n = (rows + kTailRows) * width;
    if (dtype == DType::BF16) {
      whole.copyFrom(
          Tensor::fromVector<bf16>(std::vector<bf16>(n, bf16{uint16_t(0xffff)}), whole.shape(), Device::CUDA));
    } else {
      whole.copyFrom(Tensor::fromVector<float>(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()),
                                               whole.shape(), Device::CUDA));
    }
    if (values.empty()) return;
    if (dtype == DType::F32) {
      head.copyFrom(Tensor::fromVector<float>(std::vector<float>(values.begin(), values.end()), head.shape(),
                                              Device::CUDA));
      return;
    }
    std::vector<bf16> rounded;
    for (double x : values) rounded.push_back(floatToBf16(float(x)));
    head.copyFrom(Tensor::fromVector<bf16>(rounded, head.shape(), Device::CUDA));
  }
  static std::vector<double> valuesOf(const Tensor& t) {
    std::vector<double> out;
    if (t.dtype() == DType::BF16) {
      for (bf16 x : t.toVector<bf16>()) out.push_back(bf16ToFloat(x));
    } else {
      for (float x : t.toVector<float>()) out.push_back(x);
    }
    return out;
  }
  std::vector<double> values() const { return valuesOf(head); }
  int64_t tailWritten() const {
    int64_t written = 0;
    for (double x : valuesOf(Tensor::alias(whole, rows * width, {kTailRows, width}))) written += !std::isnan(x);
    return written;
  }
};

// The operands on the device: packed, one (B T, (H + 2 H / G) d) buffer of rows [q | k | v]; separate, three.
struct DeviceOperands {
  std::vector<DeviceRows> buffers;
  AttentionOperands<bf16> in{};
  DeviceOperands(const Case& c, const Inputs& x) {
    const int64_t rows = c.B() * c.T, qw = c.H() * c.d, kw = c.kvHeads() * c.d;
    if (c.packed) {
      const int64_t w = qw + 2 * kw;
      std::vector<double> packed(rows * w);
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(x.q.begin() + r * qw, qw, packed.begin() + r * w);
        std::copy_n(x.k.begin() + r * kw, kw, packed.begin() + r * w + qw);
        std::copy_n(x.v.begin() + r * kw, kw, packed.begin() + r * w + qw + kw);
      }
      buffers.emplace_back(packed, rows, w, DType::BF16);
      const bf16* p = buffers[0].head.data<bf16>();
      in = {p, p + qw, p + qw + kw, w, w, w, c.G};
    } else {
      buffers.emplace_back(x.q, rows, qw, DType::BF16);
      buffers.emplace_back(x.k, rows, kw, DType::BF16);
      buffers.emplace_back(x.v, rows, kw, DType::BF16);
      in = {buffers[0].head.data<bf16>(), buffers[1].head.data<bf16>(), buffers[2].head.data<bf16>(), qw, kw, kw, c.G};
    }
  }
};

// y (B, T, H d) and lse (B, H, T) as float64.
struct Result {
  std::vector<double> y, lse;
};

// softmax(q k^T / sqrt(d)) v in float64, keys after the query masked where causal.
Result reference(const Case& c, const Inputs& x) {
  const int64_t B = c.B(), T = c.T, H = c.H(), Hkv = c.kvHeads(), d = c.d;
  const double scale = 1.0 / std::sqrt(double(d));
  Result r{std::vector<double>(B * T * H * d), std::vector<double>(B * H * T)};
  std::vector<double> s(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / c.G;
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &x.q[((b * T + i) * H + h) * d];
        const int64_t keys = c.causal ? i + 1 : T;
        double m = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          const double* k = &x.k[((b * T + j) * Hkv + kh) * d];
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += q[e] * k[e];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        double* y = &r.y[((b * T + i) * H + h) * d];
        for (int64_t j = 0; j < keys; ++j) {
          const double p = std::exp(s[j] - m);
          l += p;
          const double* v = &x.v[((b * T + j) * Hkv + kh) * d];
          for (int64_t e = 0; e < d; ++e) y[e] += p * v[e];
        }
        for (int64_t e = 0; e < d; ++e) y[e] /= l;
        r.lse[(b * H + h) * T + i] = m + std::log(l);
      }
    }
  }
  return r;
}

// The CPU twin (causal only) in float64 on the separate operands.
Result twin(const Case& c, const Inputs& x) {
  const int64_t B = c.B(), T = c.T, H = c.H(), d = c.d;
  Result r{std::vector<double>(B * T * H * d), std::vector<double>(B * H * T)};
  const AttentionOperands<double> in{x.q.data(), x.k.data(), x.v.data(), H * d, c.kvHeads() * d, c.kvHeads() * d, c.G};
  kernels::cpu::flashAttentionForward<double>(in, r.y.data(), r.lse.data(), B, T, H, d);
  return r;
}

// One CUDA forward into poisoned outputs: the Hopper kernel with `schedule`, or the cp.async one (hopper
// false, causal only). Expects every output element written and nothing past the outputs' ends.
Result runCuda(const Case& c, const DeviceOperands& ops, bool hopper,
               kernels::cuda::HopperSchedule schedule = kernels::cuda::HopperSchedule::Serial) {
  const int64_t B = c.B(), T = c.T, H = c.H(), d = c.d;
  const DeviceRows y({}, B * T, H * d, DType::BF16), lse({}, B * H, T, DType::F32);
  if (hopper) {
    kernels::cuda::hopperAttentionForward(ops.in, y.head.data<bf16>(), lse.head.data<float>(), B, T, H, d, c.causal,
                                          runtime::computeStream(), schedule);
  } else {  // the cp.async kernel, whatever the process's attention mode
    const kernels::cuda::ScopedAttentionMode cpAsync(kernels::cuda::AttentionMode::CpAsync);
    kernels::cuda::flashAttentionForward<bf16>(ops.in, y.head.data<bf16>(), lse.head.data<float>(), B, T, H, d,
                                               runtime::computeStream());
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(y.tailWritten(), 0) << "y written past its end";
  EXPECT_EQ(lse.tailWritten(), 0) << "lse written past its end";
  Result r{y.values(), lse.values()};
  int64_t unwritten = 0;
  for (double v : r.y) unwritten += !std::isfinite(v);
  for (double v : r.lse) unwritten += !std::isfinite(v);
  EXPECT_EQ(unwritten, 0) << "outputs not written (or not finite)";
  return r;
}

// ||a - b||_2 / ||b||_2.
double relativeL2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 1e-300;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// max |a - b|, infinite where any difference is NaN.
double maxAbsDifference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double e = std::abs(a[i] - b[i]);
    if (std::isnan(e)) return INFINITY;
    diff = std::max(diff, e);
  }
  return diff;
}

// bf16 inputs (q in [-3, 3), so that the softmax is peaked; k, v in [-1, 1)), exact in both computations;
// the kernel rounds P to bf16 for P v (8 mantissa bits) and y to bf16, accumulating in fp32: relative L2
// errors of a few 1e-3 in y, and any element within 1e-2 of the reference (|v| < 1). lse comes from fp32
// scores and sums: within 2e-4 (a key masked wrongly, or a missed one, moves it by its probability: 1e-3 at
// T = 1000 in a flat softmax, more with these scores).
void expectClose(const Result& actual, const Result& expected, const std::string& what) {
  EXPECT_LT(relativeL2(actual.y, expected.y), 1e-2) << "y against " << what;
  EXPECT_LE(maxAbsDifference(actual.y, expected.y), 1e-2) << "y against " << what;
  EXPECT_LE(maxAbsDifference(actual.lse, expected.lse), 2e-4) << "lse against " << what;
}

TEST(HopperAttentionReference, CausalMatchesTheCpuTwin) {
  // The reference above (no GPU needed) against the CPU twin on the same separate grouped operands.
  for (const Case& c : {Case{64, 65, 1, true, true}, Case{80, 37, 4, true, false}, Case{96, 9, 4, true, true}}) {
    const int64_t rows = c.B() * c.T;
    const Inputs x{bf16Values(rows * c.H() * c.d, 404, -3.0, 3.0), bf16Values(rows * c.kvHeads() * c.d, 405, -1.0, 1.0),
                   bf16Values(rows * c.kvHeads() * c.d, 406, -1.0, 1.0)};
    const Result expected = reference(c, x), cpu = twin(c, x);
    EXPECT_LE(maxAbsDifference(expected.y, cpu.y), 1e-12) << describe(c);
    EXPECT_LE(maxAbsDifference(expected.lse, cpu.lse), 1e-12) << describe(c);
    Case full = c;
    full.causal = false;
    const Result unmasked = reference(full, x);  // the mask matters: the last row alone is the same
    EXPECT_GT(maxAbsDifference(unmasked.y, expected.y), 1e-3) << describe(c);
  }
}

class HopperAttention : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    MINIDP_SKIP_WITHOUT_CUDA();
    if (!computeCapability90()) GTEST_SKIP() << "not a compute capability 9.0 GPU";
  }
};

TEST(HopperAttentionDevice, AvailableOnComputeCapability90) {
  // Keeps the shape tests below from skipping on the GPU they are for.
  MINIDP_SKIP_WITHOUT_CUDA();
  if (!computeCapability90()) {
    EXPECT_FALSE(kernels::cuda::hopperAttentionAvailable(128));
    return;
  }
  for (int64_t d : {64, 80, 96, 128, 256}) EXPECT_TRUE(kernels::cuda::hopperAttentionAvailable(d)) << d;
  EXPECT_FALSE(kernels::cuda::hopperAttentionAvailable(32));
  // A row stride that is no multiple of 16 bytes cannot be a tensor map's.
  const Tensor qkv = Tensor::empty({4, 3 * 128 + 4}, DType::BF16, Device::CUDA);
  const bf16* p = qkv.data<bf16>();
  const AttentionOperands<bf16> odd{p, p + 128, p + 256, 3 * 128 + 4, 3 * 128 + 4, 3 * 128 + 4, 1};
  EXPECT_FALSE(kernels::cuda::hopperAttentionAvailable(128, odd, 1, 1));
  const AttentionOperands<bf16> even{p, p + 128, p + 256, 3 * 128 + 8, 3 * 128 + 8, 3 * 128 + 8, 1};
  EXPECT_TRUE(kernels::cuda::hopperAttentionAvailable(128, even, 1, 1));
}

// The Hopper kernel in each of `schedules` on case c against the float64 reference, and where causal against
// the CPU twin and the cp.async kernel; each run twice, the same bits.
void checkSchedules(const Case& c, std::initializer_list<kernels::cuda::HopperSchedule> schedules) {
  ASSERT_TRUE(kernels::cuda::hopperAttentionAvailable(c.d));
  const int64_t rows = c.B() * c.T;
  const Inputs x{bf16Values(rows * c.H() * c.d, 401, -3.0, 3.0), bf16Values(rows * c.kvHeads() * c.d, 402, -1.0, 1.0),
                 bf16Values(rows * c.kvHeads() * c.d, 403, -1.0, 1.0)};
  const DeviceOperands ops(c, x);
  ASSERT_TRUE(kernels::cuda::hopperAttentionAvailable(c.d, ops.in, c.B(), c.H()));
  const Result expected = reference(c, x);
  Result cpu, cpAsync;
  if (c.causal) {
    cpu = twin(c, x);
    // The reference here is the twin's computation: the same to rounding.
    EXPECT_LE(maxAbsDifference(expected.y, cpu.y), 1e-9);
    EXPECT_LE(maxAbsDifference(expected.lse, cpu.lse), 1e-9);
    cpAsync = runCuda(c, ops, false);
  }
  using kernels::cuda::HopperSchedule;
  const char* names[3] = {"serial", "overlapped", "ping-pong"};
  for (HopperSchedule schedule : schedules) {
    SCOPED_TRACE(std::string(names[int(schedule)]) + " schedule");
    const Result hopper = runCuda(c, ops, true, schedule);
    expectClose(hopper, expected, "the float64 reference");
    if (c.causal) {
      expectClose(hopper, cpu, "the CPU twin");
      expectClose(hopper, cpAsync, "the cp.async kernel");
    }
    const Result again = runCuda(c, ops, true, schedule);
    EXPECT_TRUE(again.y == hopper.y && again.lse == hopper.lse) << "two runs differ";
  }
}

TEST_P(HopperAttention, MatchesReferencesAndTheCpAsyncKernel) {
  using kernels::cuda::HopperSchedule;
  checkSchedules(GetParam(), {HopperSchedule::Serial, HopperSchedule::Overlapped});
}

// Apart, after all the others (gtest runs a pattern's instances together): a ping-pong turn taken wrongly
// would hang (named barriers have no time limit) or fault the CUDA context for the rest of the process.
TEST_P(HopperAttention, PingPongMatchesReferences) {
  checkSchedules(GetParam(), {kernels::cuda::HopperSchedule::PingPong});
}

// Every head dim at T = 1, 63, 64, 65, 200, 1000, causal and not; (G, layout) cycling through (1, packed),
// (4, separate), (4, packed), (1, separate) over the lengths, so each head dim and mask meets all four.
std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t groups[4] = {1, 4, 4, 1};
  const bool packed[4] = {true, false, true, false};
  for (int64_t d : {64, 80, 96, 128, 256}) {
    for (bool causal : {true, false}) {
      int i = 0;
      for (int64_t T : {1, 63, 64, 65, 200, 1000}) {
        out.push_back(Case{d, T, groups[i % 4], causal, packed[i % 4]});
        ++i;
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, HopperAttention, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return describe(info.param); });

// ---- backward ----

// dq (B, T, H d), dk and dv (B, T, H / G d) as float64.
struct Gradients {
  std::vector<double> dq, dk, dv;
};

// The float64 gradients of sum(dy * y), y = softmax(q k^T / sqrt(d) [causal mask]) v, from the exact forward
// (reference above): P = exp(s - lse), D = rowsum(dy * y), dS = P (dy v^T - D), dq = scale dS k,
// dk = scale dS^T q, dv = P^T dy, dk and dv summed over each group's query heads.
Gradients referenceBackward(const Case& c, const Inputs& x, const std::vector<double>& dy) {
  const int64_t B = c.B(), T = c.T, H = c.H(), Hkv = c.kvHeads(), d = c.d;
  const double scale = 1.0 / std::sqrt(double(d));
  const Result fwd = reference(c, x);
  Gradients g{std::vector<double>(B * T * H * d), std::vector<double>(B * T * Hkv * d),
              std::vector<double>(B * T * Hkv * d)};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / c.G;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t qi = ((b * T + i) * H + h) * d;
        double rowD = 0;
        for (int64_t e = 0; e < d; ++e) rowD += dy[qi + e] * fwd.y[qi + e];
        const double lse = fwd.lse[(b * H + h) * T + i];
        for (int64_t j = 0; j < (c.causal ? i + 1 : T); ++j) {
          const int64_t kj = ((b * T + j) * Hkv + kh) * d;
          double dot = 0, dp = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot += x.q[qi + e] * x.k[kj + e];
            dp += dy[qi + e] * x.v[kj + e];
          }
          const double p = std::exp(dot * scale - lse), ds = p * (dp - rowD);
          for (int64_t e = 0; e < d; ++e) {
            g.dv[kj + e] += p * dy[qi + e];
            g.dq[qi + e] += scale * ds * x.k[kj + e];
            g.dk[kj + e] += scale * ds * x.q[qi + e];
          }
        }
      }
    }
  }
  return g;
}

// The CPU twin's backward (causal only) in float64 on the separate operands.
Gradients twinBackward(const Case& c, const Inputs& x, const std::vector<double>& dy) {
  const int64_t B = c.B(), T = c.T, H = c.H(), Hkv = c.kvHeads(), d = c.d;
  const Result fwd = twin(c, x);
  Gradients g{std::vector<double>(B * T * H * d), std::vector<double>(B * T * Hkv * d),
              std::vector<double>(B * T * Hkv * d)};
  std::vector<double> rowDot(B * H * T);
  const AttentionOperands<double> in{x.q.data(), x.k.data(), x.v.data(), H * d, Hkv * d, Hkv * d, c.G};
  const kernels::AttentionGradients<double> grads{g.dq.data(), g.dk.data(), g.dv.data(), H * d, Hkv * d, Hkv * d};
  kernels::cpu::flashAttentionBackward<double>(dy.data(), in, fwd.y.data(), fwd.lse.data(), rowDot.data(), grads, B, T,
                                               H, d);
  return g;
}

// sum(dy * y) of the reference forward.
double referenceLoss(const Case& c, const Inputs& x, const std::vector<double>& dy) {
  const Result r = reference(c, x);
  double loss = 0;
  for (size_t i = 0; i < dy.size(); ++i) loss += dy[i] * r.y[i];
  return loss;
}

TEST(HopperAttentionReference, BackwardMatchesFiniteDifferencesAndTheCpuTwin) {
  // The float64 backward reference (no GPU needed): against central differences of the reference forward,
  // causal and not, grouped; and where causal against the CPU twin.
  for (bool causal : {false, true}) {
    const Case c{16, 9, 4, causal, false};
    const int64_t rows = c.B() * c.T;
    Inputs x{bf16Values(rows * c.H() * c.d, 501, -2.0, 2.0), bf16Values(rows * c.kvHeads() * c.d, 502, -1.0, 1.0),
             bf16Values(rows * c.kvHeads() * c.d, 503, -1.0, 1.0)};
    const std::vector<double> dy = bf16Values(rows * c.H() * c.d, 504, -1.0, 1.0);
    const Gradients g = referenceBackward(c, x, dy);
    std::vector<double>* inputs[3] = {&x.q, &x.k, &x.v};
    const std::vector<double>* grads[3] = {&g.dq, &g.dk, &g.dv};
    const double eps = 1e-5;
    for (int which = 0; which < 3; ++which) {
      std::vector<double>& v = *inputs[which];
      for (size_t i = 0; i < v.size(); i += 7) {
        const double saved = v[i];
        v[i] = saved + eps;
        const double up = referenceLoss(c, x, dy);
        v[i] = saved - eps;
        const double down = referenceLoss(c, x, dy);
        v[i] = saved;
        EXPECT_NEAR((*grads[which])[i], (up - down) / (2 * eps), 1e-7) << "input " << which << " element " << i;
      }
    }
    if (causal) {
      const Gradients cpu = twinBackward(c, x, dy);
      EXPECT_LE(maxAbsDifference(g.dq, cpu.dq), 1e-12);
      EXPECT_LE(maxAbsDifference(g.dk, cpu.dk), 1e-12);
      EXPECT_LE(maxAbsDifference(g.dv, cpu.dv), 1e-12);
    }
  }
}

class HopperAttentionBackward : public HopperAttention {};

TEST(HopperAttentionDevice, BackwardAvailableOnComputeCapability90) {
  MINIDP_SKIP_WITHOUT_CUDA();
  const Tensor qkv = Tensor::empty({4, 3 * 128}, DType::BF16, Device::CUDA);
  const bf16* p = qkv.data<bf16>();
  const AttentionOperands<bf16> in{p, p + 128, p + 256, 3 * 128, 3 * 128, 3 * 128, 1};
  if (!computeCapability90()) {
    EXPECT_FALSE(kernels::cuda::hopperAttentionBackwardAvailable(128, in, 1, 1));
    return;
  }
  for (int64_t d : {64, 80, 96, 128}) EXPECT_TRUE(kernels::cuda::hopperAttentionBackwardAvailable(d, in, 1, 1)) << d;
  const Tensor wide = Tensor::empty({4, 3 * 256}, DType::BF16, Device::CUDA);
  const bf16* w = wide.data<bf16>();
  const AttentionOperands<bf16> in256{w, w + 256, w + 512, 3 * 256, 3 * 256, 3 * 256, 1};
  EXPECT_TRUE(kernels::cuda::hopperAttentionBackwardAvailable(256, in256, 1, 1));
  EXPECT_FALSE(kernels::cuda::hopperAttentionBackwardAvailable(32, in, 1, 1));
}

TEST(HopperAttentionDevice, TheModeComesFromTheEnvironmentAndScopes) {
  // MINIDP_ATTENTION unset or `auto`: the ping-pong forward and the Hopper backward from head dim 128; `cp.async`:
  // neither; `sm90-bwd`: the serial forward and the backward at every head dim. (ctest runs test_flash_attention,
  // not this program, under several values; here whichever this process has.) No GPU is needed.
  using kernels::cuda::AttentionMode;
  using kernels::cuda::HopperSchedule;
  const char* value = std::getenv("MINIDP_ATTENTION");
  const AttentionMode fromEnvironment = kernels::cuda::parseAttentionMode(value ? value : "auto");
  EXPECT_EQ(int(kernels::cuda::attentionMode()), int(fromEnvironment));
  const std::map<std::string, AttentionMode> names = {
      {"auto", AttentionMode::Auto},       {"cp.async", AttentionMode::CpAsync},
      {"sm90", AttentionMode::Serial},     {"sm90-overlap", AttentionMode::Overlapped},
      {"sm90-pingpong", AttentionMode::PingPong}, {"sm90-bwd", AttentionMode::HopperBackward}};
  for (const auto& [name, mode] : names) {
    EXPECT_EQ(int(kernels::cuda::parseAttentionMode(name)), int(mode)) << name;
    EXPECT_EQ(kernels::cuda::attentionModeName(mode), name);
  }
  try {
    kernels::cuda::parseAttentionMode("sm90-pingpnog", "MINIDP_ATTENTION");
    ADD_FAILURE() << "a misspelt mode was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MINIDP_ATTENTION=sm90-pingpnog: not an attention mode (auto, cp.async, "
                                         "sm90, sm90-overlap, sm90-pingpong, sm90-bwd)"),
              std::string::npos)
        << e.what();
  }
  struct Expected {
    AttentionMode mode;
    bool forward;
    HopperSchedule schedule;
    bool backward64, backward128;
  };
  for (const Expected& e : {Expected{AttentionMode::Auto, true, HopperSchedule::PingPong, false, true},
                            Expected{AttentionMode::CpAsync, false, HopperSchedule::Serial, false, false},
                            Expected{AttentionMode::Serial, true, HopperSchedule::Serial, false, false},
                            Expected{AttentionMode::Overlapped, true, HopperSchedule::Overlapped, false, false},
                            Expected{AttentionMode::PingPong, true, HopperSchedule::PingPong, false, false},
                            Expected{AttentionMode::HopperBackward, true, HopperSchedule::Serial, true, true}}) {
    SCOPED_TRACE(int(e.mode));
    {
      const kernels::cuda::ScopedAttentionMode scope(e.mode);
      EXPECT_EQ(int(kernels::cuda::attentionMode()), int(e.mode));
      HopperSchedule schedule = HopperSchedule::Serial;
      EXPECT_EQ(kernels::cuda::hopperAttentionRequested(&schedule), e.forward);
      if (e.forward) EXPECT_EQ(int(schedule), int(e.schedule));
      EXPECT_EQ(kernels::cuda::hopperAttentionBackwardRequested(64), e.backward64);
      EXPECT_EQ(kernels::cuda::hopperAttentionBackwardRequested(128), e.backward128);
    }
    EXPECT_EQ(int(kernels::cuda::attentionMode()), int(fromEnvironment)) << "the scope did not restore the mode";
  }
}

// The gradient buffers on the device, poisoned (NaN, tails included): packed, one (B T, (H + 2 H / G) d)
// buffer of rows [dq | dk | dv]; separate, three.
struct DeviceGradients {
  std::vector<DeviceRows> buffers;
  kernels::AttentionGradients<bf16> grads{};
  int64_t qw, kw;
  explicit DeviceGradients(const Case& c) : qw(c.H() * c.d), kw(c.kvHeads() * c.d) {
    const int64_t rows = c.B() * c.T;
    if (c.packed) {
      const int64_t w = qw + 2 * kw;
      buffers.emplace_back(std::vector<double>{}, rows, w, DType::BF16);
      bf16* p = buffers[0].head.data<bf16>();
      grads = {p, p + qw, p + qw + kw, w, w, w};
    } else {
      buffers.emplace_back(std::vector<double>{}, rows, qw, DType::BF16);
      buffers.emplace_back(std::vector<double>{}, rows, kw, DType::BF16);
      buffers.emplace_back(std::vector<double>{}, rows, kw, DType::BF16);
      grads = {buffers[0].head.data<bf16>(), buffers[1].head.data<bf16>(), buffers[2].head.data<bf16>(), qw, kw, kw};
    }
  }
  // The gradients as float64 (B T rows each), after checking that nothing past the buffers' ends was written.
  Gradients values() const {
    for (const DeviceRows& r : buffers) EXPECT_EQ(r.tailWritten(), 0) << "gradients written past their end";
    Gradients g;
    auto columns = [](const std::vector<double>& all, int64_t width, int64_t offset, int64_t n) {
      std::vector<double> out;
      for (int64_t r = 0; r * width < int64_t(all.size()); ++r)
        out.insert(out.end(), all.begin() + r * width + offset, all.begin() + r * width + offset + n);
      return out;
    };
    if (buffers.size() == 1) {
      const std::vector<double> all = buffers[0].values();
      const int64_t w = qw + 2 * kw;
      g = {columns(all, w, 0, qw), columns(all, w, qw, kw), columns(all, w, qw + kw, kw)};
    } else {
      g = {buffers[0].values(), buffers[1].values(), buffers[2].values()};
    }
    int64_t unwritten = 0;
    for (const std::vector<double>* v : {&g.dq, &g.dk, &g.dv})
      for (double e : *v) unwritten += !std::isfinite(e);
    EXPECT_EQ(unwritten, 0) << "gradients not written (or not finite)";
    return g;
  }
};

// One CUDA backward into poisoned gradients: the Hopper kernel, or the cp.async one (hopper false, causal only).
Gradients runCudaBackward(const Case& c, const DeviceOperands& ops, const DeviceRows& dy, const DeviceRows& y,
                          const DeviceRows& lse, bool hopper) {
  const DeviceRows rowDot({}, c.B() * c.H(), c.T, DType::F32);
  const DeviceGradients g(c);
  if (hopper) {
    kernels::cuda::hopperAttentionBackward(dy.head.data<bf16>(), ops.in, y.head.data<bf16>(), lse.head.data<float>(),
                                           rowDot.head.data<float>(), g.grads, c.B(), c.T, c.H(), c.d, c.causal,
                                           runtime::computeStream());
  } else {  // the cp.async kernel, whatever the process's attention mode
    const kernels::cuda::ScopedAttentionMode cpAsync(kernels::cuda::AttentionMode::CpAsync);
    kernels::cuda::flashAttentionBackward<bf16>(dy.head.data<bf16>(), ops.in, y.head.data<bf16>(),
                                                lse.head.data<float>(), rowDot.head.data<float>(), g.grads, c.B(), c.T,
                                                c.H(), c.d, runtime::computeStream());
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(rowDot.tailWritten(), 0) << "rowDot written past its end";
  return g.values();
}

// bf16 inputs, the forward's y (rounded to bf16) and lse (fp32) from the float64 reference; the kernels round P
// and dS to bf16 for their products (2^-9 relative) and the gradients to bf16: relative L2 errors of a few 1e-3.
// Bound 1e-2 against the float64 gradients, 2e-2 against the cp.async kernel (both kernels' errors). A gradient
// that is (nearly) zero in the reference, as dq and dk are at T = 1 (a softmax over one key has no gradient), is
// measured against 1% of the norm of all three instead (as test_flash_attention.cpp does).
void expectGradientsClose(const Gradients& actual, const Gradients& expected, double bound, const std::string& what) {
  const char* names[3] = {"dq", "dk", "dv"};
  const std::vector<double>* a[3] = {&actual.dq, &actual.dk, &actual.dv};
  const std::vector<double>* e[3] = {&expected.dq, &expected.dk, &expected.dv};
  double all = 0;
  for (int i = 0; i < 3; ++i)
    for (double x : *e[i]) all += x * x;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(a[i]->size(), e[i]->size()) << names[i];
    double num = 0, den = 0;
    for (size_t j = 0; j < e[i]->size(); ++j) {
      num += ((*a[i])[j] - (*e[i])[j]) * ((*a[i])[j] - (*e[i])[j]);
      den += (*e[i])[j] * (*e[i])[j];
    }
    EXPECT_LT(std::sqrt(num / std::max({den, 1e-4 * all, 1e-300})), bound) << names[i] << " against " << what;
    // Element by element too, so that a defect confined to a few rows (a diagonal tile, a partial last tile) of a
    // long sequence shows: no element off by more than 5 x the bound of the tensor's largest magnitude.
    double largest = 0, worst = 0;
    size_t at = 0;
    for (size_t j = 0; j < e[i]->size(); ++j) {
      largest = std::max(largest, std::fabs((*e[i])[j]));
      const double error = std::fabs((*a[i])[j] - (*e[i])[j]);
      if (std::isnan(error)) {  // a NaN is the worst: kept, and the search ends
        worst = error, at = j;
        break;
      }
      if (error > worst) worst = error, at = j;
    }
    const double scale = std::max(largest, 1e-2 * std::sqrt(all / std::max<size_t>(e[i]->size(), 1)));
    EXPECT_LE(worst, 5 * bound * scale) << names[i] << " element " << at << " against " << what;
  }
}

TEST_P(HopperAttentionBackward, MatchesReferencesAndTheCpAsyncKernel) {
  const Case c = GetParam();
  const int64_t rows = c.B() * c.T;
  const Inputs x{bf16Values(rows * c.H() * c.d, 601, -2.0, 2.0), bf16Values(rows * c.kvHeads() * c.d, 602, -1.0, 1.0),
                 bf16Values(rows * c.kvHeads() * c.d, 603, -1.0, 1.0)};
  const std::vector<double> dyValues = bf16Values(rows * c.H() * c.d, 604, -1.0, 1.0);
  const DeviceOperands ops(c, x);
  ASSERT_TRUE(kernels::cuda::hopperAttentionBackwardAvailable(c.d, ops.in, c.B(), c.H()));
  const Result fwd = reference(c, x);
  const DeviceRows dy(dyValues, rows, c.H() * c.d, DType::BF16), y(fwd.y, rows, c.H() * c.d, DType::BF16),
      lse(fwd.lse, c.B() * c.H(), c.T, DType::F32);
  const Gradients expected = referenceBackward(c, x, dyValues);
  const Gradients hopper = runCudaBackward(c, ops, dy, y, lse, true);
  expectGradientsClose(hopper, expected, 1e-2, "the float64 reference");
  if (c.causal) {
    const Gradients cpu = twinBackward(c, x, dyValues);
    expectGradientsClose(expected, cpu, 1e-9, "the CPU twin (reference check)");
    expectGradientsClose(hopper, cpu, 1e-2, "the CPU twin");
    const Gradients cpAsync = runCudaBackward(c, ops, dy, y, lse, false);
    expectGradientsClose(hopper, cpAsync, 2e-2, "the cp.async kernel");
  }
  const Gradients again = runCudaBackward(c, ops, dy, y, lse, true);
  EXPECT_TRUE(again.dq == hopper.dq && again.dk == hopper.dk && again.dv == hopper.dv) << "two runs differ";
}

// The forward's cases: every head dim at T = 1, 63, 64, 65, 200, 1000, causal and not, (G, layout) cycling.
INSTANTIATE_TEST_SUITE_P(Shapes, HopperAttentionBackward, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return describe(info.param); });

}  // namespace
}  // namespace minidp
