#include "framework/nn/init.h"

#include <cmath>

namespace minidp::nn {

namespace {
// A double in [0, 1) from the top 53 bits: identical on every platform, unlike std distributions.
double unit(Rng& rng) { return (rng() >> 11) * (1.0 / 9007199254740992.0); }
}  // namespace

Tensor uniform(const Shape& shape, double bound, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::CPU);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((2.0 * unit(rng) - 1.0) * bound);
  return t;
}

Tensor normal(const Shape& shape, double stddev, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::CPU);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double u1 = 1.0 - unit(rng), u2 = unit(rng);
    p[i] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return t;
}

}  // namespace minidp::nn
