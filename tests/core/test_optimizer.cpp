// Optimizer steps against values worked out by hand from the torch.optim formulas, and CUDA vs CPU.
#include <gtest/gtest.h>

#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "tests/support/gradcheck.h"

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

TEST(Optimizer, CudaMatchesCpu) {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"sgd", "adamw"}) {
    Tensor w = testing::randomTensor({1000}, 1, -1, 1, DType::F32), g = testing::randomTensor({1000}, 2, -1, 1, DType::F32);
    Variable cpu(w.clone(), true), gpu(w.to(Device::CUDA), true);
    cpu.setGrad(g.clone());
    gpu.setGrad(g.to(Device::CUDA));
    auto a = optim::makeOptimizer(name, {cpu}, 0.01, 0.1), b = optim::makeOptimizer(name, {gpu}, 0.01, 0.1);
    for (int i = 0; i < 3; ++i) {
      a->step();
      b->step();
    }
    // Same formula, same order; only fused multiply-add contraction may differ.
    EXPECT_LT(testing::relativeError(gpu.data(), cpu.data()), 1e-6) << name;
  }
}

}  // namespace
}  // namespace minidp
