// Optimizer steps against values worked out by hand from the torch.optim formulas, the multi-tensor launch
// against one launch per parameter, state save/restore, double bias corrections, the gradient norm, and CUDA
// vs CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "framework/ops/ops.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/tensor/tensor_math.h"
#include "framework/testing/gradcheck.h"
#include "kernels/optimizer_kernels.h"
#include "tests/support/cuda_skip.h"

namespace minidp {
namespace {

Variable param(double value, double grad, Device device = Device::CPU) {
  Variable p(Tensor::fromVector(std::vector<double>{value}, {1}, device), true);
  p.setGrad(Tensor::fromVector(std::vector<double>{grad}, {1}, device));
  return p;
}

double value(const Variable& p) { return p.data().toVector<double>()[0]; }

TEST(Optimizer, SgdMomentumWeightDecayByHand) {
  Variable p = param(1.0, 0.5);
  optim::Sgd sgd({p}, 0.1, 0.9, 0.01);
  sgd.step();  // g = 0.5 + 0.01 * 1 = 0.51; buf = 0.51; p = 1 - 0.051
  EXPECT_NEAR(value(p), 0.949, 1e-15);
  sgd.step();  // g = 0.5 + 0.00949 = 0.50949; buf = 0.459 + 0.50949 = 0.96849; p = 0.949 - 0.096849
  EXPECT_NEAR(value(p), 0.852151, 1e-15);
}

TEST(Optimizer, AdamWByHand) {
  Variable p = param(1.0, 0.5);
  optim::AdamW adam({p}, 0.1, 0.9, 0.999, 1e-8, 0.01);
  adam.step();  // p = 0.999 (decay); m = 0.05, v = 0.00025; mhat = 0.5, vhat = 0.25; p -= 0.1 * 0.5 / (0.5 + 1e-8)
  EXPECT_NEAR(value(p), 0.999 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  const double p1 = value(p);
  adam.step();  // second step, same gradient: m = 0.095, v = 0.00049975; mhat = 0.5, vhat = 0.25
  EXPECT_NEAR(value(p), p1 * (1 - 0.001) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-14);
}

// Parameters of several sizes, one above the chunk size, and their gradients.
std::vector<Variable> randomParams(DType dtype, uint64_t seed, Device device = Device::CPU) {
  std::vector<Variable> out;
  for (int64_t n : {int64_t(3), kernels::kParamChunkElements + 17, int64_t(1000)}) {
    Variable p(testing::randomTensor({n}, seed++, -1, 1, dtype).to(device), true);
    p.setGrad(testing::randomTensor({n}, seed++, -1, 1, dtype).to(device));
    out.push_back(p);
  }
  return out;
}

std::vector<Variable> cloneParams(const std::vector<Variable>& params) {
  std::vector<Variable> out;
  for (const Variable& p : params) {
    Variable c(p.data().clone(), true);
    c.setGrad(p.grad().clone());
    out.push_back(c);
  }
  return out;
}

TEST(Optimizer, OneLaunchForAllEqualsOnePerParameter) {
  for (const std::string name : {"sgd", "adamw"}) {
    std::vector<Variable> all = randomParams(DType::F32, 10), single = cloneParams(all);
    auto together = optim::makeOptimizer(name, all, 0.01, 0.1);
    std::vector<std::unique_ptr<optim::Optimizer>> apart;
    for (const Variable& p : single) apart.push_back(optim::makeOptimizer(name, {p}, 0.01, 0.1));
    for (int s = 0; s < 3; ++s) {
      together->step();
      for (auto& o : apart) o->step();
    }
    for (size_t i = 0; i < all.size(); ++i)
      EXPECT_EQ(all[i].data().toVector<float>(), single[i].data().toVector<float>()) << name << " parameter " << i;
  }
}

TEST(Optimizer, GradScaleMultipliesEveryGradient) {
  for (const std::string name : {"sgd", "adamw"}) {
    std::vector<Variable> scaled = randomParams(DType::F64, 20), halved = cloneParams(scaled);
    for (Variable& p : halved) p.setGrad(ops::scale(Variable(p.grad()), 0.5).data());
    auto a = optim::makeOptimizer(name, scaled, 0.01, 0.1), b = optim::makeOptimizer(name, halved, 0.01, 0.1);
    a->setGradScale(Tensor::fromVector(std::vector<double>{0.5}, {1}));
    a->step();
    b->step();
    for (size_t i = 0; i < scaled.size(); ++i)
      EXPECT_EQ(scaled[i].data().toVector<double>(), halved[i].data().toVector<double>()) << name << " " << i;
  }
}

// CUDA graphs' mode: the scalars (lr, step count, SGD's first step, AdamW's bias corrections) written by
// stageStep() and read by the kernel give the bits of kernel-argument scalars, step after step with a
// changing lr; on the CPU twin and, when there is one, on the GPU.
TEST(Optimizer, ScalarsOnDeviceEqualKernelArguments) {
  std::vector<Device> devices{Device::CPU};
  if (runtime::cudaAvailable()) devices.push_back(Device::CUDA);
  for (Device device : devices) {
    for (const std::string name : {"sgd", "adamw"}) {
      std::vector<Variable> eager = randomParams(DType::F32, 50, device), staged = cloneParams(eager);
      auto a = optim::makeOptimizer(name, eager, 0.01, 0.1), b = optim::makeOptimizer(name, staged, 0.01, 0.1);
      b->setScalarsOnDevice(true);
      for (int s = 0; s < 4; ++s) {
        const double lr = 0.01 * (s + 1);
        a->setLr(lr);
        a->step();
        b->setLr(lr);
        b->stageStep();
        b->step();
      }
      EXPECT_EQ(a->stepCount(), b->stepCount());
      for (size_t i = 0; i < eager.size(); ++i) {
        EXPECT_EQ(eager[i].data().to(Device::CPU).toVector<float>(), staged[i].data().to(Device::CPU).toVector<float>())
            << name << " on " << deviceName(device) << ", parameter " << i;
      }
    }
  }
}

TEST(Optimizer, TensorPairsEqualVariables) {
  std::vector<Variable> vars = randomParams(DType::F64, 30), copies = cloneParams(vars);
  std::vector<optim::ParamSlot> slots;
  for (size_t i = 0; i < copies.size(); ++i)
    slots.push_back({"p" + std::to_string(i), copies[i].data(), copies[i].grad()});
  optim::AdamW a(vars, 0.01), b(slots, 0.01);
  for (int s = 0; s < 2; ++s) {
    a.step();
    b.step();
  }
  for (size_t i = 0; i < vars.size(); ++i)
    EXPECT_EQ(vars[i].data().toVector<double>(), copies[i].data().toVector<double>());
  EXPECT_EQ(b.state()[0].first, "p0.exp_avg");
  EXPECT_EQ(b.state()[1].first, "p0.exp_avg_sq");
}

TEST(Optimizer, StateRestoredContinuesTheSameSteps) {
  for (const std::string name : {"sgd", "adamw"}) {
    std::vector<Variable> run = randomParams(DType::F64, 40), resumed = cloneParams(run);
    auto a = optim::makeOptimizer(name, run, 0.01, 0.1);
    for (int s = 0; s < 3; ++s) a->step();
    // The resumed run starts from the first run's parameters and state after 3 steps.
    for (size_t i = 0; i < run.size(); ++i) resumed[i].data().copyFrom(run[i].data());
    auto b = optim::makeOptimizer(name, resumed, 0.01, 0.1);
    auto from = a->state(), to = b->state();
    ASSERT_EQ(from.size(), to.size());
    ASSERT_EQ(from.size(), name == "sgd" ? 3u : 6u);
    EXPECT_EQ(from[0].first, name == "sgd" ? "0.momentum_buffer" : "0.exp_avg");
    for (size_t k = 0; k < from.size(); ++k) to[k].second.copyFrom(from[k].second);
    b->setStepCount(a->stepCount());
    a->step();
    b->step();
    for (size_t i = 0; i < run.size(); ++i)
      EXPECT_EQ(run[i].data().toVector<double>(), resumed[i].data().toVector<double>()) << name << " " << i;
  }
}

// torch.optim.AdamW computes 1 - beta^t in double. In fp32, 1 - 0.999f^t is off by up to ~1e-4 relative
// over a run: this tolerance (1 ulp of float after one rounding) rejects it, as the second check shows.
TEST(Optimizer, AdamWBiasCorrectionsInDouble) {
  double worstFp32 = 0;
  for (int64_t t = 1; t <= 20000; ++t) {
    const long double exact1 = 1.0L - std::pow(0.9L, (long double)t), exact2 = 1.0L - std::pow(0.999L, (long double)t);
    const kernels::AdamWParams<float> h = kernels::adamwParams<float>(0.1, 0.9, 0.999, 1e-8, 0, t);
    const long double wantStep = 0.1L / exact1, wantSqrt = std::sqrt(exact2);
    ASSERT_LE(std::fabs((long double)h.stepSize - wantStep) / wantStep, 6e-8L) << "step " << t;
    ASSERT_LE(std::fabs((long double)h.bias2Sqrt - wantSqrt) / wantSqrt, 6e-8L) << "step " << t;
    const float fp32Sqrt = std::sqrt(1.0f - std::pow(0.999f, static_cast<float>(t)));
    worstFp32 = std::max<double>(worstFp32, std::fabs((long double)fp32Sqrt - wantSqrt) / wantSqrt);
  }
  EXPECT_GT(worstFp32, 6e-8) << "the fp32 computation would pass too: the test cannot tell them apart";
}

TEST(Optimizer, CudaMatchesCpu) {
  MINIDP_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::F32, DType::F64}) {
    for (const std::string name : {"sgd", "adamw"}) {
      std::vector<Variable> cpu = randomParams(dtype, 50), gpu;
      for (const Variable& p : cpu) {
        Variable g(p.data().to(Device::CUDA), true);
        g.setGrad(p.grad().to(Device::CUDA));
        gpu.push_back(g);
      }
      auto a = optim::makeOptimizer(name, cpu, 0.01, 0.1), b = optim::makeOptimizer(name, gpu, 0.01, 0.1);
      const Tensor scale = Tensor::fromVector(std::vector<double>{0.25}, {1}).toDType(dtype);
      a->setGradScale(scale);
      b->setGradScale(scale.to(Device::CUDA));
      for (int i = 0; i < 3; ++i) {
        a->step();
        b->step();
      }
      // Same formula, same order; only fused multiply-add contraction may differ.
      for (size_t i = 0; i < cpu.size(); ++i) {
        EXPECT_LT(testing::relativeError(gpu[i].data(), cpu[i].data()), dtype == DType::F32 ? 1e-6 : 1e-12)
            << name << " " << dtypeName(dtype) << " parameter " << i;
      }
    }
  }
}

// The multi-tensor AdamW kernel reads 16-byte packs when a chunk's arrays are aligned and one element at a
// time otherwise (a parameter that is a view at an odd offset): the same bits either way.
TEST(Optimizer, CudaAdamWPackedEqualsOneElementPath) {
  MINIDP_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::F32, DType::F64}) {
    std::vector<Variable> aligned = randomParams(dtype, 70, Device::CUDA), offset;
    for (const Variable& p : aligned) {
      const int64_t n = p.data().numel();
      auto shifted = [n](const Tensor& t) {  // t's values at element 1 of a fresh buffer
        Tensor base = Tensor::zeros({n + 1}, t.dtype(), t.device());
        Tensor view = Tensor::alias(base, 1, t.shape());
        view.copyFrom(t);
        return view;
      };
      Variable v(shifted(p.data()), true);
      v.setGrad(shifted(p.grad()));
      offset.push_back(v);
    }
    auto a = optim::makeOptimizer("adamw", aligned, 0.01, 0.1), b = optim::makeOptimizer("adamw", offset, 0.01, 0.1);
    for (int i = 0; i < 3; ++i) {
      a->step();
      b->step();
    }
    for (size_t i = 0; i < aligned.size(); ++i) {
      EXPECT_EQ(aligned[i].data().toDType(DType::F64).toVector<double>(),
                offset[i].data().toDType(DType::F64).toVector<double>())
          << dtypeName(dtype) << " parameter " << i;
    }
  }
}

// Compute copies (ops::ComputeCopies): each step writes the updated fp32 parameter rounded to bf16 into the
// parameter's copy, the bits a cast of it gives, leaves the copy's padding past the parameter alone, and
// updates the parameters as without copies. On the CPU and, where there is one, the GPU, whose packed
// path writes 8-byte groups: the second copy starts at element 1, an odd address, for the one-element path,
// and a 1001-element parameter has a packed part and a tail.
TEST(Optimizer, ComputeCopiesHoldTheUpdatedParametersInBf16) {
  std::vector<Device> devices{Device::CPU};
  if (runtime::cudaAvailable()) devices.push_back(Device::CUDA);
  constexpr double kPadding = 7.0;
  for (Device device : devices) {
    for (const std::string name : {"sgd", "adamw"}) {
      SCOPED_TRACE(name + " on " + deviceName(device));
      std::vector<Variable> params = randomParams(DType::F32, 30, device);
      Variable odd(testing::randomTensor({1001}, 40, -1, 1, DType::F32).to(device), true);
      odd.setGrad(testing::randomTensor({1001}, 41, -1, 1, DType::F32).to(device));
      params.push_back(odd);
      const std::vector<Variable> plain = cloneParams(params);
      std::map<const void*, Tensor> copies;
      std::vector<Tensor> whole;
      for (size_t i = 0; i < params.size(); ++i) {
        const int64_t n = params[i].data().numel(), shift = i == 1 ? 1 : 0, padding = 5;
        const int64_t length = shift + n + padding;
        Tensor buffer =
            Tensor::fromVector(std::vector<double>(length, kPadding), {length}).toDType(DType::BF16).to(device);
        whole.push_back(buffer);
        copies[params[i].data().raw()] = Tensor::alias(buffer, shift, {n + padding});
      }
      auto withCopies = optim::makeOptimizer(name, params, 0.01, 0.1),
           without = optim::makeOptimizer(name, plain, 0.01, 0.1);
      withCopies->setComputeCopies([&copies](const Tensor& p) {
        const auto it = copies.find(p.raw());
        return it == copies.end() ? Tensor() : it->second;
      });
      for (int s = 0; s < 3; ++s) {
        withCopies->step();
        without->step();
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor& p = params[i].data();
        const int64_t n = p.numel(), shift = i == 1 ? 1 : 0;
        EXPECT_EQ(p.toVector<float>(), plain[i].data().toVector<float>()) << "parameter " << i;
        const std::vector<double> copy = whole[i].toDType(DType::F64).to(Device::CPU).toVector<double>();
        const std::vector<double> cast =
            ops::cast(p, DType::BF16).toDType(DType::F64).to(Device::CPU).toVector<double>();
        if (shift) EXPECT_EQ(copy[0], kPadding) << "written before copy " << i;
        EXPECT_EQ(std::vector<double>(copy.begin() + shift, copy.begin() + shift + n), cast) << "copy " << i;
        for (size_t j = shift + n; j < copy.size(); ++j) ASSERT_EQ(copy[j], kPadding) << "padding of copy " << i;
      }
    }
  }
}

// The norm over several buffers equals the norm of their concatenation summed directly in long double;
// the coefficient is min(1, max / (norm + 1e-6)).
TEST(GradClipper, NormAndCoefficientOverBuffers) {
  std::vector<Tensor> buffers = {testing::randomTensor({3}, 60, -1, 1, DType::F32),
                                 testing::randomTensor({100003}, 61, -1, 1, DType::F32),
                                 testing::randomTensor({700}, 62, -1, 1, DType::F32)};
  long double sum = 0;
  for (const Tensor& b : buffers)
    for (float v : b.toVector<float>()) sum += (long double)v * v;
  const double want = std::sqrt((double)sum);
  for (double maxNorm : {0.0, 1.0, 1e6}) {
    optim::GradClipper clipper(maxNorm, DType::F32, Device::CPU);
    clipper.compute(buffers);
    EXPECT_NEAR(clipper.norm(), want, 1e-12 * want);
    const double coefficient = maxNorm > 0 ? std::min(1.0, maxNorm / (want + 1e-6)) : 1.0;
    EXPECT_FLOAT_EQ(clipper.scale().toVector<float>()[0], static_cast<float>(coefficient)) << "max " << maxNorm;
  }
}

TEST(GradClipper, CudaMatchesCpu) {
  MINIDP_SKIP_WITHOUT_CUDA();
  std::vector<Tensor> cpu = {testing::randomTensor({5}, 70, -1, 1, DType::F32),
                             testing::randomTensor({3000017}, 71, -1, 1, DType::F32)},
                      gpu;
  for (const Tensor& b : cpu) gpu.push_back(b.to(Device::CUDA));
  optim::GradClipper a(1.0, DType::F32, Device::CPU), b(1.0, DType::F32, Device::CUDA);
  a.compute(cpu);
  b.compute(gpu);
  EXPECT_NEAR(b.norm(), a.norm(), 1e-12 * a.norm());
  EXPECT_FLOAT_EQ(b.scale().to(Device::CPU).toVector<float>()[0], a.scale().toVector<float>()[0]);
  b.compute(gpu);  // the same buffers again: the same bits (fixed order, no atomics)
  const double first = b.norm();
  b.compute(gpu);
  EXPECT_EQ(b.norm(), first);
}

}  // namespace
}  // namespace minidp
