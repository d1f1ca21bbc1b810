// The vectorised elementwise map (kernels/elementwise_kernels.cu): every kernel on CUDA against its CPU twin
// bit for bit in fp32 (vectorising changes the memory access, not the arithmetic) and against the same
// float math rounded on the host in bf16, at sizes with and without a scalar tail and at offsets that
// force the one-element path. GELU compares against float64 (device and host tanh may differ by an ulp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "framework/runtime/device.h"
#include "framework/tensor/tensor.h"
#include "framework/testing/gradcheck.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/gelu_math.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

#if MINIDP_WITH_CUDA  // the tests call the CUDA launchers directly

// Lengths around the 16-byte pack (4 floats, 8 bf16) and one large enough for many grid-stride steps.
const std::vector<int64_t> kLengths{1, 3, 7, 8, 9, 17, 4099, (int64_t(1) << 21) + 5};
// Element offsets into a larger buffer: 0 keeps 16-byte alignment, 1 forces the one-element kernel.
const std::vector<int64_t> kOffsets{0, 1};

std::vector<float> hostValues(int64_t n, uint64_t seed) {
  return testing::randomTensor({n}, seed, -3.0, 3.0).toDType(DType::F32).toVector<float>();
}

// n values of `dtype` at element `offset` of a fresh CUDA buffer (a misaligned view when offset is odd).
template <typename T>
Tensor cudaAt(const std::vector<T>& values, int64_t offset) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<T> padded(n + offset + 1, values.front());
  std::copy(values.begin(), values.end(), padded.begin() + offset);
  const Tensor base = Tensor::fromVector(padded, {n + offset + 1}, Device::CUDA);
  return Tensor::alias(base, offset, {n});
}

std::vector<bf16> toBf16(const std::vector<float>& v) {
  std::vector<bf16> out;
  for (float x : v) out.push_back(floatToBf16(x));
  return out;
}

template <typename T>
std::vector<uint32_t> bitsOf(const std::vector<T>& v) {
  std::vector<uint32_t> bits;
  for (const T& x : v) {
    uint32_t b = 0;
    std::memcpy(&b, &x, sizeof x);
    bits.push_back(b);
  }
  return bits;
}

// One binary kernel (out = f(a, b)) on CUDA against `reference` element by element, bit for bit.
template <typename T>
void expectBinaryBits(const std::function<void(const T*, const T*, T*, int64_t)>& cuda,
                      const std::function<T(T, T)>& reference, const char* name) {
  for (int64_t n : kLengths) {
    for (int64_t offset : kOffsets) {
      std::vector<T> a, b;
      if constexpr (std::is_same_v<T, bf16>) {
        a = toBf16(hostValues(n, 1)), b = toBf16(hostValues(n, 2));
      } else {
        a = hostValues(n, 1), b = hostValues(n, 2);
      }
      const Tensor da = cudaAt(a, offset), db = cudaAt(b, offset), dout = cudaAt(a, offset);
      cuda(da.data<T>(), db.data<T>(), dout.data<T>(), n);
      std::vector<T> expected(n);
      for (int64_t i = 0; i < n; ++i) expected[i] = reference(a[i], b[i]);
      EXPECT_EQ(bitsOf(dout.toVector<T>()), bitsOf(expected)) << name << " n=" << n << " offset=" << offset;
    }
  }
}

cudaStream_t stream() { return runtime::computeStream(); }

TEST(ElementwiseKernels, Fp32MatchesTheCpuTwinBitForBit) {
  MINIDP_SKIP_WITHOUT_CUDA();
  namespace gpu = kernels::cuda;
  namespace cpu = kernels::cpu;
  using Binary = std::function<void(const float*, const float*, float*, int64_t)>;
  // The CPU twin computes one element at a time: its result for (a, b) is the reference.
  auto twin = [](void (*k)(const float*, const float*, float*, int64_t)) {
    return std::function<float(float, float)>([k](float a, float b) {
      float out = 0;
      k(&a, &b, &out, 1);
      return out;
    });
  };
  expectBinaryBits<float>(Binary([](auto a, auto b, auto o, int64_t n) { gpu::add(a, b, o, n, stream()); }),
                          twin(&cpu::add<float>), "add");
  expectBinaryBits<float>(Binary([](auto a, auto b, auto o, int64_t n) { gpu::mul(a, b, o, n, stream()); }),
                          twin(&cpu::mul<float>), "mul");
  expectBinaryBits<float>(
      Binary([](auto a, auto b, auto o, int64_t n) {
        gpu::scale(a, 0.37f, o, n, stream());
        (void)b;
      }),
      [](float a, float) { return a * 0.37f; }, "scale");
  expectBinaryBits<float>(Binary([](auto a, auto b, auto o, int64_t n) { gpu::reluBackward(a, b, o, n, stream()); }),
                          twin(&cpu::reluBackward<float>), "reluBackward");
  expectBinaryBits<float>(
      Binary([](auto a, auto b, auto o, int64_t n) {
        gpu::reluForward(a, o, n, stream());
        (void)b;
      }),
      [](float a, float) { return a > 0 ? a : 0.0f; }, "reluForward");
  expectBinaryBits<float>(
      Binary([](auto a, auto b, auto o, int64_t n) {
        gpu::fill(o, 2.5f, n, stream());
        (void)a, (void)b;
      }),
      [](float, float) { return 2.5f; }, "fill");
  // addInPlace writes into its first operand: copy a there first.
  expectBinaryBits<float>(Binary([](auto a, auto b, auto o, int64_t n) {
                            gpu::scale(a, 1.0f, o, n, stream());
                            gpu::addInPlace(o, b, n, stream());
                          }),
                          twin(&cpu::add<float>), "addInPlace");
}

TEST(ElementwiseKernels, Bf16MatchesFloatMathRoundedOnTheHost) {
  MINIDP_SKIP_WITHOUT_CUDA();
  namespace gpu = kernels::cuda;
  using Binary = std::function<void(const bf16*, const bf16*, bf16*, int64_t)>;
  auto f = [](bf16 x) { return bf16ToFloat(x); };
  expectBinaryBits<bf16>(
      Binary([](auto a, auto b, auto o, int64_t n) { gpu::add(a, b, o, n, stream()); }),
      [&](bf16 a, bf16 b) { return floatToBf16(f(a) + f(b)); }, "add");
  expectBinaryBits<bf16>(
      Binary([](auto a, auto b, auto o, int64_t n) { gpu::mul(a, b, o, n, stream()); }),
      [&](bf16 a, bf16 b) { return floatToBf16(f(a) * f(b)); }, "mul");
  expectBinaryBits<bf16>(
      Binary([](auto a, auto b, auto o, int64_t n) {
        gpu::addInPlace(o, b, n, stream());
        (void)a;
      }),
      [&](bf16 a, bf16 b) { return floatToBf16(f(a) + f(b)); }, "addInPlace");
  expectBinaryBits<bf16>(
      Binary([](auto a, auto b, auto o, int64_t n) {
        gpu::scale(a, 0.37f, o, n, stream());
        (void)b;
      }),
      [&](bf16 a, bf16) { return floatToBf16(f(a) * 0.37f); }, "scale");
  expectBinaryBits<bf16>(
      Binary([](auto a, auto b, auto o, int64_t n) {
        gpu::reluForward(a, o, n, stream());
        (void)b;
      }),
      [&](bf16 a, bf16) { return f(a) > 0 ? a : bf16{0}; }, "reluForward");
  expectBinaryBits<bf16>(
      Binary([](auto a, auto b, auto o, int64_t n) { gpu::reluBackward(a, b, o, n, stream()); }),
      [&](bf16 a, bf16 b) { return f(a) > 0 ? b : bf16{0}; }, "reluBackward");
  expectBinaryBits<bf16>(
      Binary([](auto a, auto b, auto o, int64_t n) {
        gpu::fill(o, floatToBf16(-1.25f), n, stream());
        (void)a, (void)b;
      }),
      [&](bf16, bf16) { return floatToBf16(-1.25f); }, "fill");
}

// GELU forward and backward against float64, per element: within a few roundings of the output type.
template <typename T>
void expectGeluClose(double tolerance) {
  namespace gpu = kernels::cuda;
  for (int64_t n : kLengths) {
    for (int64_t offset : kOffsets) {
      const std::vector<float> xf = hostValues(n, 3), gf = hostValues(n, 4);
      std::vector<T> x, g;
      if constexpr (std::is_same_v<T, bf16>) {
        x = toBf16(xf), g = toBf16(gf);
      } else {
        x = xf, g = gf;
      }
      auto value = [](const T& v) {
        if constexpr (std::is_same_v<T, bf16>)
          return double(bf16ToFloat(v));
        else
          return double(v);
      };
      const Tensor dx = cudaAt(x, offset), dg = cudaAt(g, offset), y = cudaAt(x, offset), d = cudaAt(x, offset);
      gpu::geluForward(dx.data<T>(), y.data<T>(), n, stream());
      gpu::geluBackward(dx.data<T>(), dg.data<T>(), d.data<T>(), n, stream());
      const std::vector<T> yv = y.toVector<T>(), dv = d.toVector<T>();
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double xi = value(x[i]);
        const double ey = kernels::geluValue(xi), ed = value(g[i]) * kernels::geluDerivative(xi);
        worst = std::max({worst, std::abs(value(yv[i]) - ey) / std::max(1.0, std::abs(ey)),
                          std::abs(value(dv[i]) - ed) / std::max(1.0, std::abs(ed))});
      }
      EXPECT_LE(worst, tolerance) << "n=" << n << " offset=" << offset;
    }
  }
}

TEST(ElementwiseKernels, GeluCloseToFloat64) {
  MINIDP_SKIP_WITHOUT_CUDA();
  expectGeluClose<float>(1e-5);           // a few fp32 roundings (2^-24 each) of values up to 3
  expectGeluClose<bf16>(2 * 0.00390625);  // one bf16 rounding (2^-8 relative) of the output, twice over
}

#endif  // MINIDP_WITH_CUDA

}  // namespace
}  // namespace minidp
