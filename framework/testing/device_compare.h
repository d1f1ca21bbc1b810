// CUDA against the CPU twin: one function run forward and backward on both devices, errors compared.
// Tolerances: an op whose outputs are one or two roundings of the same inputs differs by a few
// roundingEps(dtype); a sum of `terms` products in a device-specific order by up to sumTolerance(dtype,
// terms) relative to the largest element; kernels that add in the same order on both devices agree exactly
// (tolerance 0). A wrong index, stride or missed row is off by O(1).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "framework/autograd/variable.h"

namespace minidp::testing {

/// Relative errors of the CUDA results against the CPU ones.
struct DeviceComparison {
  double output = 0;          // relative error of the forward output
  std::vector<double> grads;  // relative error of each input's gradient
};

/// Runs f forward and backward on CPU and CUDA copies of float64 `inputs` converted to `dtype`, with the
/// same random upstream gradient (values in [upstreamLo, upstreamHi)), and compares CUDA against CPU.
DeviceComparison compareDevices(const std::function<Variable(const std::vector<Variable>&)>& f,
                                const std::vector<Tensor>& inputs, DType dtype, double upstreamLo = -1.0,
                                double upstreamHi = 1.0);

/// Rounding error of one operation in `dtype`: 2^-24 (F32) and 2^-53 (F64), rounded up.
double roundingEps(DType dtype);
/// Bound on the relative difference of two sums of `terms` products of order-1 inputs added in different
/// orders: 2 (terms + 4) roundingEps(dtype).
double sumTolerance(DType dtype, int64_t terms);

/// Fixture parameterised by dtype; skips without a CUDA device.
class CudaVsCpuTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override;
  /// Every relative error of `c` is at most `tolerance`.
  void expectClose(const DeviceComparison& c, double tolerance);
};

}  // namespace minidp::testing
