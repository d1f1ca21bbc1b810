// bf16 on CUDA against the fp32 run of the same op, for the op tests.
//
// Every input and the upstream gradient are bf16-representable (float64 values rounded to bf16), so both runs
// start from the same numbers. A bf16 kernel loads them into fp32, computes as the fp32 kernel does and
// rounds once; its sums add the same fp32 terms in the same fixed order as the fp32 kernel's. So each op
// differs from its fp32 twin by one rounding to bf16, whatever the number of terms it sums: reductions need
// no sqrt(C) allowance. The tolerances, on relativeError (the worst element against the largest), are below.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "tests/support/cuda_skip.h"

namespace minidp::testing {

// Rounding to bf16 (7 stored mantissa bits) moves a value by at most half a step: 2^-8 of its magnitude.
inline constexpr double kBf16Round = 1.0 / 256;
// One rounding, with a quarter more for what may differ between the two fp32 computations (the compiler may
// contract a * b + c into an FMA in one instantiation and not the other: ~1e-7). A second rounding (a bf16
// intermediate) would reach up to 2 kBf16Round.
inline constexpr double kOneRounding = 1.25 * kBf16Round;
// Copies (narrow, split, cat, gatherRows forward, sumLastDim backward) move bits: exact.
inline constexpr double kExact = 0.0;

// The bf16 kernels are CUDA-only: a test of them skips, with the reason, where there is no GPU.
class Bf16OnCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MINIDP_SKIP_WITHOUT_CUDA() << " (bf16 kernels run on CUDA only)";
  }
};

// float64 values in [lo, hi) rounded to bf16: the same numbers in bf16, fp32 and fp64.
inline Tensor bf16Exact(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return randomTensor(shape, seed, lo, hi).toDType(DType::BF16).toDType(DType::F64);
}

using Metric = std::function<double(const Tensor&, const Tensor&)>;

// Runs f on CUDA twice on the same bf16-representable `inputs`: in fp32, and with the activations as BF16
// leaves and the parameters (params[i]) as F32 leaves (the fp32 masters of a mixed-precision run); backward
// with the same upstream gradient. Checks the dtypes (a BF16 output, BF16 activation gradients, F32
// parameter gradients) and returns the errors of the bf16 run against the fp32 run by `metric`.
inline DeviceComparison compareBf16(const std::function<Variable(const std::vector<Variable>&)>& f,
                                    const std::vector<Tensor>& inputs, const std::vector<bool>& params,
                                    const Metric& metric = relativeError) {
  std::vector<Variable> v32, v16;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor t = inputs[i].toDType(DType::F32).to(Device::CUDA);
    v32.emplace_back(t, true);
    v16.emplace_back(params[i] ? t.clone() : ops::cast(t, DType::BF16), true);
  }
  Variable y32 = f(v32), y16 = f(v16);
  EXPECT_EQ(y16.dtype(), DType::BF16) << "output";
  const Tensor g = bf16Exact(y32.shape(), 77).toDType(DType::F32).to(Device::CUDA);
  y32.backward(g);
  y16.backward(ops::cast(g, DType::BF16));
  DeviceComparison c;
  c.output = metric(y16.data(), y32.data());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(v16[i].grad().dtype(), params[i] ? DType::F32 : DType::BF16) << "gradient of input " << i;
    c.grads.push_back(metric(v16[i].grad(), v32[i].grad()));
  }
  return c;
}

// Every error of `c` at most `output` (forward) and grads[i] (gradient of input i).
inline void expectWithin(const DeviceComparison& c, double output, const std::vector<double>& grads) {
  EXPECT_LE(c.output, output) << "forward";
  ASSERT_EQ(c.grads.size(), grads.size());
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_LE(c.grads[i], grads[i]) << "gradient of input " << i;
}

}  // namespace minidp::testing
