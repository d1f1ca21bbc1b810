// minidp-bench-kernels: achieved bandwidth of the fused kernels at GPT-2-small sizes (B*T = 8192 rows,
// C = 768, V = 50257), in bf16 and fp32, against a device-to-device copy measured in the same run. Bytes
// are the compulsory traffic (each input read once, each output written once), so the percentage is a
// lower bound on how close a kernel is to the memory roofline. Last, the MLP's GEMMs with GELU in separate
// passes against cuBLASLt's GELU epilogues.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "base/bf16.h"
#include "base/cuda_check.h"
#include "kernels/bias.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/embedding_kernels.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/softmax_xent.h"
#include "tests/ops/cuda_timing.h"

namespace {

using minidp::bf16;
using minidp::ParamOf;
using minidp::bench::DeviceBuffer;
using minidp::bench::timeMs;
namespace k = minidp::kernels::cuda;

constexpr int64_t kRows = 8192, kWidth = 768, kVocab = 50257, kMlpWidth = 3072;

template <typename T>
T fromFloat(float f) {
  if constexpr (std::is_same_v<T, bf16>) {
    return minidp::floatToBf16(f);
  } else {
    return static_cast<T>(f);
  }
}

// n uniform values in [lo, hi) on the device.
template <typename T>
void fillRandom(DeviceBuffer<T>& b, size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> host(n);
  for (T& v : host) v = fromFloat<T>(dist(rng));
  CUDA_CHECK(cudaMemcpy(b.ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
}

// Random ids in [0, V) on the device; returns how many distinct ids there are.
int64_t fillTokens(DeviceBuffer<int32_t>& b, size_t n, int32_t V, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> host(n);
  for (int32_t& v : host) v = dist(rng);
  CUDA_CHECK(cudaMemcpy(b.ptr, host.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
  return static_cast<int64_t>(std::set<int32_t>(host.begin(), host.end()).size());
}

struct Reporter {
  double ceilingGBs;
  void row(const std::string& kernel, const char* dtype, double ms, double bytes) const {
    const double gbs = bytes / (ms * 1e-3) * 1e-9;
    std::printf("%-34s %-5s %9.3f %9.1f %7.1f%%\n", kernel.c_str(), dtype, ms, gbs, 100.0 * gbs / ceilingGBs);
  }
};

// Read + write GB/s of a large device-to-device copy: the bandwidth ceiling.
double copyCeilingGBs(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer<char> a(bytes), b(bytes);
  const double ms =
      timeMs([&] { CUDA_CHECK(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice, stream)); }, stream);
  return 2.0 * bytes / (ms * 1e-3) * 1e-9;
}

template <typename T>
void benchAll(const char* name, const Reporter& report, cudaStream_t stream) {
  using P = ParamOf<T>;
  using A = minidp::AccumOf<T>;
  const int64_t N = kRows, C = kWidth;
  const double act = sizeof(T), par = sizeof(P);
  {  // LayerNorm
    DeviceBuffer<T> x(N * C), y(N * C), dy(N * C), dx(N * C);
    DeviceBuffer<P> w(C), b(C), dw(C), db(C);
    DeviceBuffer<A> mean(N), rstd(N), scratch(minidp::kernels::layerNormBackwardScratchSize(N, C));
    fillRandom(x, N * C, -2.f, 2.f, 1);
    fillRandom(dy, N * C, -1.f, 1.f, 2);
    fillRandom(w, C, 0.5f, 1.5f, 3);
    fillRandom(b, C, -1.f, 1.f, 4);
    const double fwd = timeMs(
        [&] { k::layerNormForward<T>(x.ptr, w.ptr, b.ptr, y.ptr, mean.ptr, rstd.ptr, N, C, A(1e-5), stream); }, stream);
    report.row("layerNorm fwd 8192x768", name, fwd, 2 * N * C * act + 2 * N * sizeof(A));
    const double bwd = timeMs(
        [&] {
          k::layerNormBackward<T>(dy.ptr, x.ptr, w.ptr, mean.ptr, rstd.ptr, dx.ptr, dw.ptr, db.ptr, scratch.ptr, N, C,
                                  false, true, true, stream);
        },
        stream);
    report.row("layerNorm bwd 8192x768 (dx,dw,db)", name, bwd, 3 * N * C * act + 2 * N * sizeof(A) + 4 * C * par);
  }
  {  // embedding backward, accumulating into installed gradients (the DDP path)
    DeviceBuffer<T> dout(N * C);
    DeviceBuffer<P> dwte(kVocab * C), dwpe(1024 * C);
    DeviceBuffer<int32_t> tokens(N);
    DeviceBuffer<char> scratch(k::embeddingBackwardScratchBytes(N, kVocab));
    fillRandom(dout, N * C, -1.f, 1.f, 5);
    CUDA_CHECK(cudaMemset(dwte.ptr, 0, kVocab * C * sizeof(P)));
    const int64_t distinct = fillTokens(tokens, N, kVocab, 6);
    const double ms = timeMs(
        [&] {
          k::embeddingBackwardTokens<T>(dout.ptr, tokens.ptr, dwte.ptr, scratch.ptr, 8, 1024, C, kVocab, true, stream);
        },
        stream);
    report.row("embedding bwd dwte V=50257 BT=8192", name, ms, N * C * act + 2.0 * distinct * C * par);
    const double pos =
        timeMs([&] { k::embeddingBackwardPositions<T>(dout.ptr, dwpe.ptr, 8, 1024, C, 1024, true, stream); }, stream);
    report.row("embedding bwd dwpe T=1024 B=8", name, pos, N * C * act + 2.0 * 1024 * C * par);
  }
  {  // softmax cross-entropy forward + in-place backward
    DeviceBuffer<T> logits(N * kVocab);
    DeviceBuffer<int32_t> targets(N);
    DeviceBuffer<A> loss(N), lse(N), g(1);
    fillRandom(logits, N * kVocab, -4.f, 4.f, 7);
    fillTokens(targets, N, kVocab, 8);
    fillRandom(g, 1, 1.f, 1.f, 9);
    const double ms = timeMs(
        [&] {
          k::softmaxXentForward<T>(logits.ptr, targets.ptr, loss.ptr, lse.ptr, N, kVocab, kVocab, stream);
          k::softmaxXentBackward<T>(logits.ptr, targets.ptr, lse.ptr, g.ptr, logits.ptr, N, kVocab, kVocab, stream);
        },
        stream);
    report.row("crossEntropy fwd+bwd 8192x50257", name, ms, 3.0 * N * kVocab * act);
    // The classifier's forward when backward follows: the gradient written over the logits. Each repetition
    // runs on the previous one's gradient, which takes the same time as logits would.
    const double fused = timeMs(
        [&] {
          k::softmaxXentForwardGradient<T>(logits.ptr, targets.ptr, loss.ptr, lse.ptr, N, kVocab, kVocab, stream);
        },
        stream);
    report.row("crossEntropy fwd writing grad 8192x50257", name, fused, 2.0 * N * kVocab * act);
  }
  {  // bias gradient of the MLP's first layer
    DeviceBuffer<T> x(N * kMlpWidth);
    DeviceBuffer<P> out(kMlpWidth);
    DeviceBuffer<A> scratch(minidp::kernels::sumColumnsScratchSize(N, kMlpWidth));
    fillRandom(x, N * kMlpWidth, -1.f, 1.f, 10);
    const double ms =
        timeMs([&] { k::sumColumns<T>(x.ptr, out.ptr, scratch.ptr, N, kMlpWidth, true, stream); }, stream);
    report.row("sumColumns 8192x3072", name, ms, N * kMlpWidth * act);
    const double add = timeMs([&] { k::addBias<T>(x.ptr, out.ptr, N, kMlpWidth, stream); }, stream);
    report.row("addBias 8192x3072", name, add, 2.0 * N * kMlpWidth * act);
  }
  {  // the vectorised elementwise map at the MLP's hidden size: residual add, GELU forward and backward
    const int64_t n = N * kMlpWidth;
    DeviceBuffer<T> x(n), dy(n), out(n);
    fillRandom(x, n, -3.f, 3.f, 11);
    fillRandom(dy, n, -1.f, 1.f, 12);
    const double add = timeMs([&] { k::add<T>(x.ptr, dy.ptr, out.ptr, n, stream); }, stream);
    report.row("add 8192x3072", name, add, 3.0 * n * act);
    const double fwd = timeMs([&] { k::geluForward<T>(x.ptr, out.ptr, n, stream); }, stream);
    report.row("geluForward 8192x3072", name, fwd, 2.0 * n * act);
    const double bwd = timeMs([&] { k::geluBackward<T>(x.ptr, dy.ptr, out.ptr, n, stream); }, stream);
    report.row("geluBackward 8192x3072", name, bwd, 3.0 * n * act);
  }
}

// The GPT-2-small MLP's first GEMM with bias and GELU, and the hidden gradient's GEMM with GELU's derivative:
// separate passes against cuBLASLt's epilogues. Milliseconds only (the GEMMs are compute-bound).
void benchGeluEpilogues(cudaStream_t stream) {
  const int64_t N = kRows, C = kWidth, H = kMlpWidth;
  DeviceBuffer<bf16> x(N * C), w1(H * C), b1(H), w2(C * H), g(N * C), pre(N * H), h(N * H), dpre(N * H);
  fillRandom(x, N * C, -1.f, 1.f, 13);
  fillRandom(w1, H * C, -0.05f, 0.05f, 14);
  fillRandom(b1, H, -1.f, 1.f, 15);
  fillRandom(w2, C * H, -0.05f, 0.05f, 16);
  fillRandom(g, N * C, -1.f, 1.f, 17);
  const double fwdSplit = timeMs(
      [&] {
        k::gemmBf16<bf16>(false, true, N, H, C, 1.f, x.ptr, 0, w1.ptr, 0, 0.f, pre.ptr, 0, 1, b1.ptr, stream);
        k::geluForward<bf16>(pre.ptr, h.ptr, N * H, stream);
      },
      stream);
  const double fwdFused =
      timeMs([&] { k::gemmBf16GeluBias(false, true, N, H, C, x.ptr, w1.ptr, b1.ptr, h.ptr, pre.ptr, stream); }, stream);
  const double bwdSplit = timeMs(
      [&] {
        k::gemmBf16<bf16>(false, false, N, H, C, 1.f, g.ptr, 0, w2.ptr, 0, 0.f, h.ptr, 0, 1, nullptr, stream);
        k::geluBackward<bf16>(pre.ptr, h.ptr, dpre.ptr, N * H, stream);
      },
      stream);
  const double bwdFused =
      timeMs([&] { k::gemmBf16DGelu(false, false, N, H, C, g.ptr, w2.ptr, pre.ptr, dpre.ptr, stream); }, stream);
  std::printf("%-34s %-5s %9.3f ms split, %.3f ms fused\n", "c_fc + bias + gelu 8192x768x3072", "bf16", fwdSplit,
              fwdFused);
  std::printf("%-34s %-5s %9.3f ms split, %.3f ms fused\n", "dh @ W2 * gelu' 8192x768x3072", "bf16", bwdSplit,
              bwdFused);
}

}  // namespace

int main() {
  return minidp::bench::runOnStream("minidp-bench-kernels", [](cudaStream_t stream, const cudaDeviceProp& prop) {
    const Reporter report{copyCeilingGBs(stream)};
    std::printf("%s; device-to-device copy ceiling %.1f GB/s (read + write); mean of %d runs after %d warm-up\n",
                prop.name, report.ceilingGBs, minidp::bench::kRepeats, minidp::bench::kWarmup);
    std::printf("%-34s %-5s %9s %9s %8s\n", "kernel", "dtype", "ms", "GB/s", "of copy");
    benchAll<bf16>("bf16", report, stream);
    benchAll<float>("fp32", report, stream);
    benchGeluEpilogues(stream);
  });
}
