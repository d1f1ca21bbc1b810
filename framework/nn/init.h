// Initialisers: seeded, portable draws for parameters (the same seed gives the same weights anywhere).
#pragma once

#include <random>

#include "framework/tensor/tensor.h"

namespace minidp::nn {

/// The seeded generator every initialiser draws from; the same seed gives the same weights anywhere.
using Rng = std::mt19937_64;
/// Elements an initialiser draws from one generator of their own: `rng` gives each chunk of this many
/// elements (in row-major order) a seed, and the chunks are filled on all host threads, so a tensor's values
/// depend on the seed alone, not on the number of threads.
constexpr int64_t kInitChunk = 1 << 16;
/// U(-bound, bound), float32 on the CPU.
Tensor uniform(const Shape& shape, double bound, Rng& rng);
/// N(0, std^2), float32 on the CPU (Box-Muller, both values of each pair; portable across standard libraries).
Tensor normal(const Shape& shape, double stddev, Rng& rng);

}  // namespace minidp::nn
