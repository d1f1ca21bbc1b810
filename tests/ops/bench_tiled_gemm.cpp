// minidp-bench-gemm: GFLOP/s of the cp.async tiled SGEMM against cuBLAS (fp32, no TF32) at a few sizes,
// each the mean of timed repetitions after warm-up, measured with CUDA events on one stream.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "base/cuda_check.h"
#include "kernels/matmul.h"
#include "kernels/tiled_gemm.h"
#include "tests/ops/cuda_timing.h"

namespace {

using minidp::kernels::cuda::gemm;
using minidp::kernels::cuda::tiledGemm;

using minidp::bench::kRepeats;
using minidp::bench::kWarmup;
using minidp::bench::timeMs;
using DeviceBuffer = minidp::bench::DeviceBuffer<float>;

void fillRandom(float* device, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> host(n);
  for (float& v : host) v = dist(rng);
  CUDA_CHECK(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

// Max |tiled - cuBLAS| / max |cuBLAS|.
double relativeDifference(const float* tiled, const float* reference, size_t n) {
  std::vector<float> a(n), b(n);
  CUDA_CHECK(cudaMemcpy(a.data(), tiled, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(b.data(), reference, n * sizeof(float), cudaMemcpyDeviceToHost));
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

void benchOne(int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  DeviceBuffer a(M * K), b(K * N), c(M * N), reference(M * N);
  fillRandom(a.ptr, M * K, 1);
  fillRandom(b.ptr, K * N, 2);
  const double tiledMs = timeMs([&] { tiledGemm(M, N, K, a.ptr, b.ptr, c.ptr, stream); }, stream);
  const double cublasMs = timeMs(
      [&] { gemm<float>(false, false, M, N, K, 1.0f, a.ptr, 0, b.ptr, 0, 0.0f, reference.ptr, 0, 1, stream); }, stream);
  const double gflop = 2.0 * M * N * K * 1e-9;
  std::printf("%6lld %6lld %6lld  %10.1f  %10.1f  %6.1f%%  %9.2e\n", (long long)M, (long long)N, (long long)K,
              gflop / (tiledMs * 1e-3), gflop / (cublasMs * 1e-3), 100.0 * cublasMs / tiledMs,
              relativeDifference(c.ptr, reference.ptr, M * N));
}

}  // namespace

int main() {
  return minidp::bench::runOnStream("minidp-bench-gemm", [](cudaStream_t stream, const cudaDeviceProp& prop) {
    std::printf("%s, fp32 (cuBLAS default math: no TF32); mean of %d runs after %d warm-up\n", prop.name, kRepeats,
                kWarmup);
    std::printf("%6s %6s %6s  %10s  %10s  %7s  %9s\n", "M", "N", "K", "tiled GF/s", "cuBLAS GF/s", "of cuBLAS",
                "rel diff");
    // Square sizes, a GPT-2-small MLP layer (B*T = 8192 rows, 768 -> 3072), and an unaligned shape.
    const int64_t sizes[][3] = {{512, 512, 512},    {1024, 1024, 1024}, {2048, 2048, 2048},
                                {4096, 4096, 4096}, {8192, 3072, 768},  {1000, 999, 1001}};
    for (const auto& s : sizes) benchOne(s[0], s[1], s[2], stream);
  });
}
