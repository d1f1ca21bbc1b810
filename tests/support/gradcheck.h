// Float64 central finite differences against autograd, and comparison helpers shared by the tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "framework/autograd/variable.h"

namespace minidp::testing {

/// Random float64 CPU tensor with values in [lo, hi), from a fixed seed.
Tensor randomTensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                    DType dtype = DType::F64);
/// Random int32 CPU tensor with values in [0, bound).
Tensor randomIndices(const Shape& shape, int32_t bound, uint64_t seed);

/// Checks d(sum(f(inputs) * w))/d(input_i) from autograd against central differences (step h) for every
/// input that requires grad; `w` is a fixed random weighting so that every output element matters.
/// Returns the largest error relative to max(1, |numeric|), and appends a description to `report`.
double gradcheck(const std::function<Variable(const std::vector<Variable>&)>& f,
                 std::vector<Variable> inputs, std::string* report = nullptr, double h = 1e-6);

/// Max |a - b| / max(|b|max, tiny) over all elements (host copies; any device, any float dtype).
double relativeError(const Tensor& a, const Tensor& b);
/// ||a - b||_2 / ||b||_2 (host copies; any device, any float dtype).
double relativeL2(const Tensor& a, const Tensor& b);

}  // namespace minidp::testing
