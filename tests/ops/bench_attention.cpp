// minidp-bench-attention: causal self-attention forward and forward + backward at GPT shapes: the flash
// kernels (fp32 FFMA and bf16 tensor cores) beside the materialised (B, H, T, T) path (fp32, through the
// op with autograd). Median of timed repetitions, CUDA events on the compute stream. FLOPs counted causal:
// 4 B H T^2 d / 2 forward, 2.5 times that backward. tools/torch_attention_bench.py prints the same
// columns for PyTorch's scaled_dot_product_attention. The bf16 "flash" rows run what training runs (the
// attention mode, kernels/flash_attention_sm90.h: on an H100 by default the Hopper forward, and the Hopper
// backward from head dim 128; MINIDP_ATTENTION=cp.async for the cp.async kernels).
// Usage: minidp-bench-attention                       GPT-2 small at B 8 and 16, the fortunes GPT
//        minidp-bench-attention --head-dim 64,128,256 [--batch 8] [--seq 1024]
//                                                     each head dim at width about 1024 (H = 1024 / d)
//        minidp-bench-attention --shapes B:H:K:T:d[,...]  bf16 flash only at these shapes, K key/value heads
//                                                     (grouped-query where K < H): tools/shape_grid.py's
//                                                     attention grid, beside tools/torch_attention_bench.py
//        minidp-bench-attention --sm90 [shape flags]  bf16: the cp.async forward beside the Hopper TMA +
//                                                     wgmma forward (kernels/flash_attention_sm90.h) in
//                                                     each schedule, causal and without the mask (its FLOPs
//                                                     counted whole); then forward + backward, the cp.async
//                                                     kernels beside the Hopper ones; one line each. On an H100:
//                                                     --sm90 --shapes 4:16:16:4096:128 (B H = 64)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/cuda_check.h"
#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_sm90.h"

namespace {

using namespace minidp;

constexpr int kWarmup = 3, kRepeats = 20;

// Median milliseconds of one call of `f` over kRepeats timed calls, after kWarmup untimed ones.
double medianMs(const std::function<void()>& f) {
  cudaStream_t stream = runtime::computeStream();
  for (int i = 0; i < kWarmup; ++i) f();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(kRepeats);
  for (float& m : ms) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    f();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[kRepeats / 2];
}

std::vector<float> randomValues(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A CUDA tensor of `dtype` (F32 or BF16) holding `values` rounded to it.
Tensor cudaTensor(const std::vector<float>& values, const Shape& shape, DType dtype) {
  if (dtype == DType::F32) return Tensor::fromVector<float>(values, shape, Device::CUDA);
  std::vector<bf16> rounded(values.size());
  std::transform(values.begin(), values.end(), rounded.begin(), floatToBf16);
  return Tensor::fromVector<bf16>(rounded, shape, Device::CUDA);
}

std::vector<float> hostValues(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.toVector<float>();
  std::vector<bf16> v = t.toVector<bf16>();
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), bf16ToFloat);
  return out;
}

// Max |a - b| / max |b|.
double relativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

// H query heads, K key/value heads (K = H: no grouping).
struct Shape4 {
  int64_t B, H, T, d, K;
};

// check: NaN where there is no reference (printed "-").
void printRow(const char* impl, const char* dtype, const Shape4& s, double fwdMs, double fwdBwdMs, double check) {
  const double fwdFlop = 4.0 * s.B * s.H * s.T * s.T * s.d / 2;
  char checkText[16] = "-";
  if (!std::isnan(check)) std::snprintf(checkText, sizeof checkText, "%.2e", check);
  std::printf("%-13s %-5s %3lld %3lld %3lld %5lld %3lld  %9.3f %9.1f  %9.3f %9.1f  %9s\n", impl, dtype, (long long)s.B,
              (long long)s.H, (long long)s.K, (long long)s.T, (long long)s.d, fwdMs, fwdFlop / (fwdMs * 1e9), fwdBwdMs,
              3.5 * fwdFlop / (fwdBwdMs * 1e9), checkText);
}

// q, k, v of a (B, T, (H + 2K) d) qkv: [q | k | v] along the row, query head h reading key/value head h / (H / K).
template <typename T>
kernels::AttentionOperands<T> groupedOperands(const T* qkv, const Shape4& s) {
  const int64_t row = (s.H + 2 * s.K) * s.d;
  return {qkv, qkv + s.H * s.d, qkv + (s.H + s.K) * s.d, row, row, row, s.H / s.K};
}

template <typename T>
kernels::AttentionGradients<T> groupedGradients(T* dqkv, const Shape4& s) {
  const int64_t row = (s.H + 2 * s.K) * s.d;
  return {dqkv, dqkv + s.H * s.d, dqkv + (s.H + s.K) * s.d, row, row, row};
}

// The flash kernels in `dtype` on preallocated buffers; `check` against the materialised fp32 output.
// stored: the backward with its score scratch (the key pass stores dS for the query pass), where the
// shape takes one.
template <typename T>
void benchFlash(const Shape4& s, DType dtype, const std::vector<float>& qkvValues, const std::vector<float>& dyValues,
                const std::vector<float>& reference, bool stored = false) {
  const int64_t C = s.H * s.d, width = (s.H + 2 * s.K) * s.d;
  Tensor qkv = cudaTensor(qkvValues, {s.B, s.T, width}, dtype), dy = cudaTensor(dyValues, {s.B, s.T, C}, dtype);
  Tensor y = Tensor::empty({s.B, s.T, C}, dtype, Device::CUDA), dqkv = Tensor::empty(qkv.shape(), dtype, Device::CUDA);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F32, Device::CUDA);
  Tensor rowDot = Tensor::empty({s.B, s.H, s.T}, DType::F32, Device::CUDA);
  const size_t scratchBytes = stored ? kernels::cuda::flashAttentionBackwardScratchBytes<T>(s.B, s.T, s.H, s.d) : 0;
  const Tensor scratch =
      scratchBytes ? Tensor::empty({int64_t(scratchBytes / 2)}, DType::BF16, Device::CUDA) : Tensor();
  cudaStream_t stream = runtime::computeStream();
  auto forward = [&] {
    kernels::cuda::flashAttentionForward<T>(groupedOperands<T>(qkv.data<T>(), s), y.data<T>(), lse.data<float>(), s.B,
                                            s.T, s.H, s.d, stream);
  };
  auto forwardBackward = [&] {
    forward();
    kernels::cuda::flashAttentionBackward<T>(
        dy.data<T>(), groupedOperands<T>(qkv.data<T>(), s), y.data<T>(), lse.data<float>(), rowDot.data<float>(),
        groupedGradients<T>(dqkv.data<T>(), s), s.B, s.T, s.H, s.d,
        scratchBytes ? static_cast<void*>(scratch.data<bf16>()) : nullptr, scratchBytes, stream);
  };
  const double fwdMs = medianMs(forward), fwdBwdMs = medianMs(forwardBackward);
  printRow(scratchBytes ? "flash dS" : "flash", dtype == DType::F32 ? "fp32" : "bf16", s, fwdMs, fwdBwdMs,
           reference.empty() ? NAN : relativeDifference(hostValues(y), reference));
}

// The bf16 forward alone: the cp.async kernel (causal), then the Hopper kernel in each schedule (serial,
// overlapped, ping-pong), causal and without the mask, one line each; the causal Hopper outputs checked against the
// cp.async kernel's (max |y - y'| / max |y'|).
void benchSm90(const Shape4& s) {
  const int64_t width = (s.H + 2 * s.K) * s.d;
  const Tensor qkv = cudaTensor(randomValues(s.B * s.T * width, 1), {s.B, s.T, width}, DType::BF16);
  const auto in = groupedOperands<bf16>(qkv.data<bf16>(), s);
  if (!kernels::cuda::hopperAttentionAvailable(s.d, in, s.B, s.H)) {
    std::printf("sm90: no Hopper kernel for head dim %lld on this device\n", (long long)s.d);
    return;
  }
  Tensor y[2], lse[2];
  for (int i = 0; i < 2; ++i) {
    y[i] = Tensor::empty({s.B, s.T, s.H * s.d}, DType::BF16, Device::CUDA);
    lse[i] = Tensor::empty({s.B, s.H, s.T}, DType::F32, Device::CUDA);
  }
  cudaStream_t stream = runtime::computeStream();
  // The cp.async rows run the cp.async kernels, whatever MINIDP_ATTENTION says (the rows are the comparison).
  const kernels::cuda::ScopedAttentionMode cpAsyncMode(kernels::cuda::AttentionMode::CpAsync);
  auto cpAsync = [&] {
    kernels::cuda::flashAttentionForward<bf16>(in, y[0].data<bf16>(), lse[0].data<float>(), s.B, s.T, s.H, s.d, stream);
  };
  using kernels::cuda::HopperSchedule;
  auto hopper = [&](bool causal, HopperSchedule schedule) {
    kernels::cuda::hopperAttentionForward(in, y[1].data<bf16>(), lse[1].data<float>(), s.B, s.T, s.H, s.d, causal,
                                          stream, schedule);
  };
  const double flop = 4.0 * s.B * s.H * s.T * s.T * s.d / 2;  // causal: half the products
  auto print = [&](const char* impl, double ms, double flops, double check) {
    char checkText[16] = "-";
    if (!std::isnan(check)) std::snprintf(checkText, sizeof checkText, "%.2e", check);
    std::printf("%-13s %-5s %3lld %3lld %3lld %5lld %3lld  %9.3f %9.1f  %9s\n", impl, "bf16", (long long)s.B,
                (long long)s.H, (long long)s.K, (long long)s.T, (long long)s.d, ms, flops / (ms * 1e9), checkText);
    std::fflush(stdout);
  };
  print("cp.async", medianMs(cpAsync), flop, NAN);
  const std::vector<float> yCpAsync = hostValues(y[0]);
  const char* names[3][2] = {
      {"sm90", "sm90 full"}, {"sm90 overlap", "sm90 ovl full"}, {"sm90 pingpong", "sm90 pp full"}};
  for (HopperSchedule schedule : {HopperSchedule::Serial, HopperSchedule::Overlapped, HopperSchedule::PingPong}) {
    const double ms = medianMs([&] { hopper(true, schedule); });
    CUDA_CHECK(cudaStreamSynchronize(stream));
    print(names[int(schedule)][0], ms, flop, relativeDifference(hostValues(y[1]), yCpAsync));
    print(names[int(schedule)][1], medianMs([&] { hopper(false, schedule); }), 2 * flop, NAN);
  }
  // Forward + backward (FLOPs 3.5 times the forward's: the backward's 2.5): the cp.async kernels (causal; with
  // the dS scratch where the shape takes it), then the Hopper forward (serial) and backward, causal and full;
  // the causal Hopper gradients checked against the cp.async kernels' (max |g - g'| / max |g'|).
  if (!kernels::cuda::hopperAttentionBackwardAvailable(s.d, in, s.B, s.H)) {
    std::printf("sm90: no Hopper backward for head dim %lld\n", (long long)s.d);
    return;
  }
  const Tensor dy = cudaTensor(randomValues(s.B * s.T * s.H * s.d, 2), {s.B, s.T, s.H * s.d}, DType::BF16);
  const Tensor rowDot = Tensor::empty({s.B, s.H, s.T}, DType::F32, Device::CUDA);
  Tensor dqkv[2] = {Tensor::empty(qkv.shape(), DType::BF16, Device::CUDA),
                    Tensor::empty(qkv.shape(), DType::BF16, Device::CUDA)};
  const size_t scratchBytes = kernels::cuda::flashAttentionBackwardScratchBytes<bf16>(s.B, s.T, s.H, s.d);
  const Tensor scratch =
      scratchBytes ? Tensor::empty({int64_t(scratchBytes / 2)}, DType::BF16, Device::CUDA) : Tensor();
  auto cpAsyncBoth = [&](bool stored) {
    cpAsync();
    kernels::cuda::flashAttentionBackward<bf16>(
        dy.data<bf16>(), in, y[0].data<bf16>(), lse[0].data<float>(), rowDot.data<float>(),
        groupedGradients<bf16>(dqkv[0].data<bf16>(), s), s.B, s.T, s.H, s.d,
        stored ? static_cast<void*>(scratch.data<bf16>()) : nullptr, stored ? scratchBytes : 0, stream);
  };
  auto hopperBoth = [&](bool causal) {
    hopper(causal, HopperSchedule::Serial);
    kernels::cuda::hopperAttentionBackward(dy.data<bf16>(), in, y[1].data<bf16>(), lse[1].data<float>(),
                                           rowDot.data<float>(), groupedGradients<bf16>(dqkv[1].data<bf16>(), s), s.B,
                                           s.T, s.H, s.d, causal, stream);
  };
  print("cp.async f+b", medianMs([&] { cpAsyncBoth(false); }), 3.5 * flop, NAN);
  if (scratchBytes > 0) print("cp.async dS f+b", medianMs([&] { cpAsyncBoth(true); }), 3.5 * flop, NAN);
  cpAsyncBoth(false);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> gradCpAsync = hostValues(dqkv[0]);
  const double ms = medianMs([&] { hopperBoth(true); });
  CUDA_CHECK(cudaStreamSynchronize(stream));
  print("sm90 f+b", ms, 3.5 * flop, relativeDifference(hostValues(dqkv[1]), gradCpAsync));
  print("sm90 f+b full", medianMs([&] { hopperBoth(false); }), 2 * 3.5 * flop, NAN);
}

// The grid's shapes: bf16 flash alone (the materialised path would not fit at long contexts), no reference.
void benchGridShape(const Shape4& s) {
  const std::vector<float> qkvValues = randomValues(s.B * s.T * (s.H + 2 * s.K) * s.d, 1),
                           dyValues = randomValues(s.B * s.T * s.H * s.d, 2);
  benchFlash<bf16>(s, DType::BF16, qkvValues, dyValues, {});
  if (kernels::cuda::flashAttentionBackwardScratchBytes<bf16>(s.B, s.T, s.H, s.d) > 0) {
    benchFlash<bf16>(s, DType::BF16, qkvValues, dyValues, {}, true);
  }
}

void benchShape(const Shape4& s) {
  const int64_t C = s.H * s.d;
  const std::vector<float> qkvValues = randomValues(s.B * s.T * 3 * C, 1), dyValues = randomValues(s.B * s.T * C, 2);
  Tensor qkv = cudaTensor(qkvValues, {s.B, s.T, 3 * C}, DType::F32),
         dy = cudaTensor(dyValues, {s.B, s.T, C}, DType::F32);
  const double fwdMs = medianMs([&] {
    NoGradGuard noGrad;
    ops::causalSelfAttentionMaterialized(Variable(qkv), int(s.H));
  });
  const double fwdBwdMs = medianMs([&] {
    Variable x(qkv, true);
    ops::causalSelfAttentionMaterialized(x, int(s.H)).backward(dy);
  });
  std::vector<float> reference;
  {
    NoGradGuard noGrad;
    reference = hostValues(ops::causalSelfAttentionMaterialized(Variable(qkv), int(s.H)).data());
  }
  printRow("materialised", "fp32", s, fwdMs, fwdBwdMs, 0.0);
  benchFlash<float>(s, DType::F32, qkvValues, dyValues, reference);
  benchFlash<bf16>(s, DType::BF16, qkvValues, dyValues, reference);
  if (kernels::cuda::flashAttentionBackwardScratchBytes<bf16>(s.B, s.T, s.H, s.d) > 0) {
    benchFlash<bf16>(s, DType::BF16, qkvValues, dyValues, reference, true);
  }
}

// The shapes the command line asks for (grid: --shapes was given; sm90: --sm90); exits with status 2 and one line on a
// bad argument.
std::vector<Shape4> shapesFrom(int argc, char** argv, bool& grid, bool& sm90) {
  std::vector<int64_t> headDims;
  std::vector<Shape4> gridShapes;
  int64_t batch = 8, seq = 1024;
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: minidp-bench-attention [--sm90] [--head-dim D[,D...]] [--batch B] [--seq T] | [--sm90] "
                 "--shapes B:H:K:T:d[,...]\n");
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--sm90") {
      sm90 = true;
      continue;
    }
    if (i + 1 >= argc) usage();
    std::istringstream value(argv[++i]);
    if (flag == "--head-dim") {
      for (std::string d; std::getline(value, d, ',');) headDims.push_back(std::atoll(d.c_str()));
    } else if (flag == "--batch") {
      value >> batch;
    } else if (flag == "--seq") {
      value >> seq;
    } else if (flag == "--shapes") {
      for (std::string item; std::getline(value, item, ',');) {
        Shape4 s{};
        char c1 = 0, c2 = 0, c3 = 0, c4 = 0;
        std::istringstream in(item);
        in >> s.B >> c1 >> s.H >> c2 >> s.K >> c3 >> s.T >> c4 >> s.d;
        if (!in || !in.eof() || c1 != ':' || c2 != ':' || c3 != ':' || c4 != ':' || s.B <= 0 || s.H <= 0 || s.K <= 0 ||
            s.T <= 0 || s.d <= 0 || s.H % s.K) {
          std::fprintf(stderr, "minidp-bench-attention: --shapes '%s': expected B:H:K:T:d, positive, K dividing H\n",
                       item.c_str());
          std::exit(2);
        }
        gridShapes.push_back(s);
      }
    } else {
      usage();
    }
  }
  grid = !gridShapes.empty();
  if (grid) return gridShapes;
  // GPT-2 small at batch 8 and 16; the 10.8 M fortunes GPT (6 heads of 64, context 256).
  if (headDims.empty()) return {Shape4{8, 12, 1024, 64, 12}, Shape4{16, 12, 1024, 64, 12}, Shape4{32, 6, 256, 64, 6}};
  std::vector<Shape4> shapes;
  for (int64_t d : headDims) {
    if (d <= 0 || batch <= 0 || seq <= 0) usage();
    const int64_t H = std::max<int64_t>(1, 1024 / d);
    shapes.push_back(Shape4{batch, H, seq, d, H});
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  bool grid = false, sm90 = false;
  const std::vector<Shape4> shapes = shapesFrom(argc, argv, grid, sm90);
  try {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s; causal attention, median of %d runs after %d warm-up; fp32 without TF32\n", prop.name, kRepeats,
                kWarmup);
    if (sm90) {
      std::printf("%-13s %-5s %3s %3s %3s %5s %3s  %9s %9s  %9s\n", "impl", "dtype", "B", "H", "K", "T", "d", "fwd ms",
                  "TFLOP/s", "y vs cp");
    } else {
      std::printf("%-13s %-5s %3s %3s %3s %5s %3s  %9s %9s  %9s %9s  %9s\n", "impl", "dtype", "B", "H", "K", "T", "d",
                  "fwd ms", "TFLOP/s", "f+b ms", "TFLOP/s", "y vs mat");
    }
    for (const Shape4& s : shapes) {
      if (!kernels::flashAttentionSupportsHeadDim(s.d)) {
        std::printf("head dim %lld: no flash kernel (head dims %s)\n", (long long)s.d,
                    kernels::flashAttentionHeadDims());
        continue;
      }
      if (sm90) {
        benchSm90(s);
      } else if (grid) {
        benchGridShape(s);
      } else {
        benchShape(s);
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidp-bench-attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
