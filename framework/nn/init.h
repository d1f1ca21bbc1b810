// Initialisers: seeded, portable draws for parameters (the same seed gives the same weights anywhere).
#pragma once

#include <random>

#include "framework/tensor/tensor.h"

namespace minidp::nn {

/// The seeded generator every initialiser draws from; the same seed gives the same weights anywhere.
using Rng = std::mt19937_64;
/// U(-bound, bound), float32 on the CPU, drawn in row-major order.
Tensor uniform(const Shape& shape, double bound, Rng& rng);
/// N(0, std^2), float32 on the CPU (Box-Muller, portable across standard libraries).
Tensor normal(const Shape& shape, double stddev, Rng& rng);

}  // namespace minidp::nn
