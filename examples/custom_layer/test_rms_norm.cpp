// RMSNorm with minidp's test helpers: forward against a float64 loop, backward against float64 finite
// differences, CUDA against the CPU (skipped without a GPU), and the model's parameter names.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/testing/device_compare.h"
#include "framework/testing/gradcheck.h"
#include "rms_mlp.h"

namespace {

using minidp::DType;
using minidp::Tensor;
using minidp::Variable;
using minidp::testing::randomTensor;

TEST(RMSNorm, ForwardMatchesLoop) {
  const int64_t C = 7;
  Tensor x = randomTensor({3, 5, C}, 1, -2.0, 2.0), w = randomTensor({C}, 2, 0.5, 1.5);
  const std::vector<double> xv = x.toVector<double>(), wv = w.toVector<double>();
  const std::vector<double> y = custom::rmsNorm(Variable(x), Variable(w), 1e-6).data().toVector<double>();
  for (int64_t r = 0; r < 15; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += xv[r * C + c] * xv[r * C + c] / C;
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(y[r * C + c], xv[r * C + c] / std::sqrt(ms + 1e-6) * wv[c], 1e-14);
  }
}

TEST(RMSNorm, GradcheckThroughTheLayer) {
  custom::RMSNorm norm(6);
  norm.to(minidp::Device::CPU, DType::F64);
  norm.weight.data() = randomTensor({6}, 3, 0.5, 1.5);  // gradcheck perturbs the layer's own weight
  EXPECT_TRUE(minidp::testing::gradcheckPasses([&norm](const std::vector<Variable>& in) { return norm.forward(in[0]); },
                                               {Variable(randomTensor({4, 6}, 4, -2.0, 2.0), true), norm.weight}));
}

using RMSNormCudaVsCpu = minidp::testing::CudaVsCpuTest;

TEST_P(RMSNormCudaVsCpu, Matches) {
  const auto f = [](const std::vector<Variable>& in) { return custom::rmsNorm(in[0], in[1], 1e-6); };
  // Row means over 80 terms, the weight's gradient over 3 * 37 rows.
  expectClose(
      minidp::testing::compareDevices(f, {randomTensor({3, 37, 80}, 5), randomTensor({80}, 6, 0.5, 1.5)}, GetParam()),
      minidp::testing::sumTolerance(GetParam(), 3 * 37 + 80));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RMSNormCudaVsCpu, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return minidp::dtypeName(info.param); });

TEST(RmsMlp, RegisteredWithPyTorchStyleNames) {
  custom::registerRmsMlp();
  const minidp::models::ModelEntry& entry = minidp::models::findModel("rms-mlp");
  minidp::models::ModelArgs args;
  args.inputs = 12;
  args.classes = 3;
  minidp::models::FlagValues given;
  given.set("hidden", 8);
  args.flags = minidp::models::flagValues("rms-mlp", entry, given);
  EXPECT_EQ(args.flags.number("norm-eps"), 1e-6);  // the model's own default
  std::unique_ptr<minidp::models::Model> model = entry.make(args);
  std::vector<std::string> names;
  for (const auto& [name, p] : model->namedParameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.3.weight",
                                             "layers.3.bias"}));
  EXPECT_EQ(model->forward(randomTensor({2, 12}, 7, 0.0, 1.0, DType::F32)).shape(), (minidp::Shape{2, 3}));
}

}  // namespace
