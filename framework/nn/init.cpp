#include "framework/nn/init.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace minidp::nn {

namespace {
// A double in [0, 1) from the top 53 bits: identical on every platform, unlike std distributions.
double unit(Rng& rng) { return (rng() >> 11) * (1.0 / 9007199254740992.0); }

/// `t`'s n floats in chunks of kInitChunk, each filled by fill(p, count, chunkRng) from a generator seeded by the
/// next draw of `rng`, the chunks spread over the host's threads.
template <typename Fill>
Tensor fillInChunks(const Shape& shape, Rng& rng, const Fill& fill) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::CPU);
  float* p = t.data<float>();
  const int64_t n = t.numel(), chunks = (n + kInitChunk - 1) / kInitChunk;
  std::vector<uint64_t> seeds(static_cast<size_t>(chunks));
  for (uint64_t& seed : seeds) seed = rng();
  const auto work = [&](int64_t first, int64_t stride) {
    for (int64_t c = first; c < chunks; c += stride) {
      Rng local(seeds[static_cast<size_t>(c)]);
      const int64_t begin = c * kInitChunk;
      fill(p + begin, std::min(kInitChunk, n - begin), local);
    }
  };
  const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < threads; ++i) pool.emplace_back(work, i, threads);
  work(0, std::max<int64_t>(threads, 1));
  for (std::thread& thread : pool) thread.join();
  return t;
}
}  // namespace

Tensor uniform(const Shape& shape, double bound, Rng& rng) {
  return fillInChunks(shape, rng, [bound](float* p, int64_t n, Rng& local) {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((2.0 * unit(local) - 1.0) * bound);
  });
}

Tensor normal(const Shape& shape, double stddev, Rng& rng) {
  return fillInChunks(shape, rng, [stddev](float* p, int64_t n, Rng& local) {
    for (int64_t i = 0; i < n; i += 2) {
      const double u1 = 1.0 - unit(local), u2 = unit(local);
      const double radius = stddev * std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * M_PI * u2;
      p[i] = static_cast<float>(radius * std::cos(angle));
      if (i + 1 < n) p[i + 1] = static_cast<float>(radius * std::sin(angle));
    }
  });
}

}  // namespace minidp::nn
