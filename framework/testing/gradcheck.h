// Float64 central finite differences against autograd, and comparison helpers shared by the tests.
// Installed with the package as target minidp::testing (find_package(minidp COMPONENTS testing)).
//
// Tolerance: central differences in float64 with h = 1e-6 leave errors near 1e-9 for inputs and outputs of
// order 1 (truncation h^2 plus rounding 1e-16 / h); a wrong gradient is off by O(1). So a correct backward
// passes `gradcheck(...) < kGradcheckTolerance` (1e-6) with a wide margin on both sides.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/autograd/variable.h"

namespace minidp::testing {

/// The bound a correct float64 backward stays under with the default step h = 1e-6 (see above).
constexpr double kGradcheckTolerance = 1e-6;

/// Random float64 CPU tensor with values in [lo, hi), from a fixed seed.
Tensor randomTensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0, DType dtype = DType::F64);
/// Random int32 CPU tensor with values in [0, bound).
Tensor randomIndices(const Shape& shape, int32_t bound, uint64_t seed);

/// Checks d(sum(f(inputs) * w))/d(input_i) from autograd against central differences (step h) for every
/// input that requires grad; `w` is a fixed random weighting so that every output element matters.
/// Returns the largest error relative to max(1, |numeric|), and appends a description to `report`.
/// The inputs must be float64 CPU tensors (randomTensor's default); keep them away from kinks (relu at 0).
double gradcheck(const std::function<Variable(const std::vector<Variable>&)>& f, std::vector<Variable> inputs,
                 std::string* report = nullptr, double h = 1e-6);

/// GoogleTest check: gradcheck(f, inputs) < tolerance; on failure the message holds the per-input report.
/// EXPECT_TRUE(gradcheckPasses(f, {Variable(x, true), ...})).
::testing::AssertionResult gradcheckPasses(const std::function<Variable(const std::vector<Variable>&)>& f,
                                           std::vector<Variable> inputs, double tolerance = kGradcheckTolerance);

/// Max |a - b| / max(|b|max, tiny) over all elements (host copies; any device, any float dtype).
double relativeError(const Tensor& a, const Tensor& b);
/// ||a - b||_2 / ||b||_2 (host copies; any device, any float dtype).
double relativeL2(const Tensor& a, const Tensor& b);

}  // namespace minidp::testing
