// minidp-bench-block: one LLaMA-style block, forward + backward, built two ways from the same weights:
//   built-in: ops::rmsNorm, ops::rotary (one fused kernel each way) and ops::swigluLinear (the gated product
//             fused into down_proj, recomputed in backward), as models/llama.cpp;
//   composed: RMSNorm, RoPE and SwiGLU written from public ops as docs/extending.md writes them (rsqrt,
//             meanLastDim, mulBroadcast; narrow, neg, cat, mulBroadcast over (T, H, d) tables, add; silu, mul),
// both with grouped-query ops::causalAttention, the projections and the residual additions (in the output
// projections' GEMMs).
// Prints the median ms of each, the composed / built-in ratio, and how far the composed block's output and
// gradients are from the built-in one's (relative to the largest value), so a wrong composition shows.
// Default shape: width 1024, 8 query heads, 4 key/value heads (head dim 128), SwiGLU hidden 2816, context
// 1024, batch 8, bf16 on CUDA. On the CPU (fp32 or fp64) it checks the composition at a small shape.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"
#include "tests/ops/composed_ops.h"

namespace {

using namespace minidp;

struct BlockShape {
  int64_t batch = 8, context = 1024, embd = 1024, heads = 8, kvHeads = 4, hidden = 2816;
  double theta = 1e4;
  int64_t headDim() const { return embd / heads; }
};

// The block's fp32 parameters (as a model holds them) and constant rotary tables.
struct BlockWeights {
  Variable norm1, wq, wk, wv, wo, norm2, gate, up, down;
  Variable cosQ, sinQ, cosK, sinK;  // (T, H, d) and (T, Hkv, d), fp32
};

Variable param(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype, Device device) {
  return Variable(minidp::testing::randomTensor(shape, seed, lo, hi).toDType(dtype).to(device), true);
}

BlockWeights makeWeights(const BlockShape& s, DType dtype, Device device) {
  const int64_t C = s.embd, d = s.headDim(), F = s.hidden;
  const double scale = 1 / std::sqrt(static_cast<double>(C));
  BlockWeights w;
  w.norm1 = param({C}, 1, 0.5, 1.5, dtype, device);
  w.wq = param({s.heads * d, C}, 2, -scale, scale, dtype, device);
  w.wk = param({s.kvHeads * d, C}, 3, -scale, scale, dtype, device);
  w.wv = param({s.kvHeads * d, C}, 4, -scale, scale, dtype, device);
  w.wo = param({C, s.heads * d}, 5, -scale, scale, dtype, device);
  w.norm2 = param({C}, 6, 0.5, 1.5, dtype, device);
  w.gate = param({F, C}, 7, -scale, scale, dtype, device);
  w.up = param({F, C}, 8, -scale, scale, dtype, device);
  w.down = param({C, F}, 9, -1 / std::sqrt(static_cast<double>(F)), 1 / std::sqrt(static_cast<double>(F)), dtype,
                 device);
  w.cosQ = Variable(composed::ropeTable(s.context, s.heads, d, s.theta, false).toDType(dtype).to(device));
  w.sinQ = Variable(composed::ropeTable(s.context, s.heads, d, s.theta, true).toDType(dtype).to(device));
  w.cosK = Variable(composed::ropeTable(s.context, s.kvHeads, d, s.theta, false).toDType(dtype).to(device));
  w.sinK = Variable(composed::ropeTable(s.context, s.kvHeads, d, s.theta, true).toDType(dtype).to(device));
  return w;
}

// x (B, T, C) -> the block's output; `fromOps` picks RMSNorm, RoPE and SwiGLU composed from public ops.
Variable block(const BlockShape& s, const BlockWeights& w, const Variable& x, bool fromOps) {
  const int64_t B = x.shape()[0], T = x.shape()[1], d = s.headDim();
  const auto norm = [&](const Variable& v, const Variable& weight) {
    return fromOps ? composed::rmsNorm(v, weight, 1e-5) : ops::rmsNorm(v, weight, 1e-5);
  };
  const auto rope = [&](const Variable& v, const Variable& cos, const Variable& sin) {
    return fromOps ? composed::rope(v, cos, sin) : ops::rotary(v, s.theta);
  };
  const Variable h = norm(x, w.norm1);
  const Variable q = rope(ops::reshape(ops::linear(h, w.wq, {}), {B, T, s.heads, d}), w.cosQ, w.sinQ);
  const Variable k = rope(ops::reshape(ops::linear(h, w.wk, {}), {B, T, s.kvHeads, d}), w.cosK, w.sinK);
  const Variable v = ops::reshape(ops::linear(h, w.wv, {}), {B, T, s.kvHeads, d});
  // The residual additions in the output projections' GEMMs (linear's and swigluLinear's residual), both ways.
  const Variable x1 = ops::linear(ops::reshape(ops::causalAttention(q, k, v), {B, T, s.heads * d}), w.wo, {}, x);
  const Variable h2 = norm(x1, w.norm2);
  const Variable gate = ops::linear(h2, w.gate, {}), up = ops::linear(h2, w.up, {});
  return fromOps ? ops::linear(ops::mul(ops::silu(gate), up), w.down, {}, x1) : ops::swigluLinear(gate, up, w.down, x1);
}

// max |a - b| / max |b| over two tensors (any dtype, any device).
double relativeError(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.toDType(DType::F64).to(Device::CPU).toVector<double>();
  const std::vector<double> y = b.toDType(DType::F64).to(Device::CPU).toVector<double>();
  double worst = 0, largest = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - y[i]));
    largest = std::max(largest, std::abs(y[i]));
  }
  return largest > 0 ? worst / largest : worst;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minidp-bench-block: one LLaMA-style block, built-in fused RMSNorm, rotary and SwiGLU against the "
               "same block composed from public ops (forward + backward)"};
  BlockShape s;
  std::string device = runtime::cudaAvailable() ? "cuda" : "cpu";
  std::string dtype = "bf16";
  int repeats = 20;
  double maxError = 0;
  app.add_option("--batch", s.batch, "Sequences per batch")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--context", s.context, "Tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--embd", s.embd, "Width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--heads", s.heads, "Query heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", s.kvHeads, "Key/value heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--hidden", s.hidden, "SwiGLU width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--device", device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype, "Activations: bf16 (CUDA; fp32 parameters), fp32 or fp64")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp32", "fp64"}));
  app.add_option("--repeats", repeats, "Timed forward + backward passes of each block")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-error", maxError,
                 "Exit 1 when the composed block's output or a gradient differs from the built-in one's by more "
                 "than this (relative to the largest value); 0: no check")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    if (s.embd % s.heads != 0 || s.headDim() % 2 != 0 || s.heads % s.kvHeads != 0) {
      std::fprintf(stderr, "minidp-bench-block: --embd / --heads must be even and --kv-heads must divide --heads\n");
      return 2;
    }
    const Device dev = device == "cuda" ? Device::CUDA : Device::CPU;
    if (dev == Device::CUDA && !runtime::cudaAvailable()) {
      std::fprintf(stderr, "minidp-bench-block: --device cuda, but no CUDA device is available\n");
      return 2;
    }
    if (dtype == "bf16" && dev != Device::CUDA) {
      std::fprintf(stderr, "minidp-bench-block: --dtype bf16 runs on CUDA only (--device cuda)\n");
      return 2;
    }
    const DType params = dtype == "fp64" ? DType::F64 : DType::F32;
    const DType activations = dtype == "bf16" ? DType::BF16 : params;
    const BlockWeights w = makeWeights(s, params, dev);
    const Tensor x = minidp::testing::randomTensor({s.batch, s.context, s.embd}, 10, -1, 1).toDType(params).to(dev);
    const Tensor g = minidp::testing::randomTensor({s.batch, s.context, s.embd}, 11, -1, 1).toDType(params).to(dev);
    const auto input = [&] { return Variable(ops::cast(Variable(x), activations).data(), true); };
    const Tensor upstream = ops::cast(Variable(g), activations).data();

    // One pass; returns the output, x's gradient and the first norm's and first projection's.
    const auto pass = [&](bool composed) {
      Variable in = input();
      const BlockWeights fresh{Variable(w.norm1.data(), true), Variable(w.wq.data(), true), w.wk, w.wv, w.wo,
                               w.norm2, w.gate, w.up, w.down, w.cosQ, w.sinQ, w.cosK, w.sinK};
      Variable out = block(s, fresh, in, composed);
      out.backward(upstream);
      return std::vector<Tensor>{out.data(), in.grad(), fresh.norm1.grad(), fresh.wq.grad()};
    };
    const std::vector<Tensor> builtIn = pass(false), composed = pass(true);
    const char* names[] = {"output", "dx", "dnorm1", "dwq"};
    std::printf("block: batch %lld, context %lld, width %lld, heads %lld / %lld kv (head dim %lld), hidden %lld, "
                "%s on %s\n",
                static_cast<long long>(s.batch), static_cast<long long>(s.context), static_cast<long long>(s.embd),
                static_cast<long long>(s.heads), static_cast<long long>(s.kvHeads),
                static_cast<long long>(s.headDim()), static_cast<long long>(s.hidden), dtype.c_str(), device.c_str());
    std::printf("composed against built-in (max |difference| / max |built-in|):");
    double worst = 0;
    for (size_t i = 0; i < builtIn.size(); ++i) {
      const double e = relativeError(composed[i], builtIn[i]);
      std::printf(" %s %.2e", names[i], e);
      worst = std::max(worst, e);
    }
    std::printf("\n");
    if (maxError > 0 && !(worst <= maxError)) {
      std::fprintf(stderr, "minidp-bench-block: the composed block differs from the built-in one by %.2e (--max-error %g)\n",
                   worst, maxError);
      return 1;
    }

    const auto sync = [&] {
      if (dev == Device::CUDA) runtime::synchronize();
    };
    const auto median = [&](bool composed) {
      std::vector<double> ms;
      for (int i = 0; i < repeats + 2; ++i) {
        sync();
        const auto start = std::chrono::steady_clock::now();
        pass(composed);
        sync();
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (i >= 2) ms.push_back(t);  // two warm-up passes
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    // Alternating, so that drift touches both.
    double a = 0, b = 0;
    for (int round = 0; round < 2; ++round) {
      a += median(false) / 2;
      b += median(true) / 2;
    }
    std::printf("forward + backward, median ms: built-in %.3f, composed %.3f, composed / built-in %.3f\n", a, b, b / a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidp-bench-block: %s\n", e.what());
    return 1;
  }
  return 0;
}
