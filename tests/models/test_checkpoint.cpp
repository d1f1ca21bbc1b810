// safetensors checkpoints: bit-exact round trip, clear errors, and exchange with PyTorch in both directions.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "framework/nn/checkpoint.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "tests/support/parameters.h"
#include "tests/support/scratch_dir.h"

namespace minidp {
namespace {

namespace fs = std::filesystem;

std::string sourceDir() {
  const char* root = std::getenv("MINIDP_SOURCE_DIR");
  return root ? root : ".";
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

models::GptConfig tinyGpt() { return models::GptConfig{32, 8, 2, 2, 16}; }

using Checkpoint = testing::ScratchDirTest;

TEST_F(Checkpoint, SaveThenLoadIsBitExact) {
  models::GPT a(tinyGpt(), 1), b(tinyGpt(), 2);
  const std::string path = (dir_ / "gpt.safetensors").string();
  nn::saveCheckpoint(a, path);
  nn::loadCheckpoint(b, path);
  testing::expectSameParameters(a, b);
  // Saving the loaded model again gives the same bytes.
  const std::string again = (dir_ / "gpt2.safetensors").string();
  nn::saveCheckpoint(b, again);
  EXPECT_EQ(readBytes(path), readBytes(again));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(Checkpoint, Fp64ParametersSaveAsF64AndOptimizerStateIsSkippedByLoad) {
  models::MLP a({4, 8, 3}, 1), b({4, 8, 3}, 2);
  a.to(Device::CPU, DType::F64);
  b.to(Device::CPU, DType::F64);
  const std::string path = (dir_ / "fp64.safetensors").string();
  SafeTensor state = nn::toSafeTensor(Tensor::zeros({8, 4}, DType::F64, Device::CPU));
  nn::saveCheckpoint(a, path, {}, {{std::string(nn::kOptimizerPrefix) + "layers.0.weight.exp_avg", state}});
  const SafeTensorFile file = readSafetensors(path);
  for (const auto& [name, tensor] : file.tensors) EXPECT_EQ(tensor.dtype, "F64") << name;
  nn::loadCheckpoint(b, path);  // the optimizer's tensor is not a parameter, and not an error
  EXPECT_EQ(a.namedParameters()[0].second.data().toVector<double>(),
            b.namedParameters()[0].second.data().toVector<double>());
}

TEST_F(Checkpoint, WrongShapeMissingAndExtraNamesAreNamed) {
  const std::string path = (dir_ / "mlp.safetensors").string();
  nn::saveCheckpoint(models::MLP({4, 8, 3}, 1), path);
  models::MLP wider({4, 9, 3}, 1);
  try {
    nn::loadCheckpoint(wider, path);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.weight"), std::string::npos) << e.what();
  }
  models::MLP deeper({4, 8, 3, 3}, 1);
  try {
    nn::loadCheckpoint(deeper, path);
    FAIL() << "expected a missing-tensor error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.2.weight"), std::string::npos) << e.what();
  }
  const std::string deepPath = (dir_ / "deep.safetensors").string();
  nn::saveCheckpoint(deeper, deepPath);
  models::MLP shallow({4, 8, 3}, 1);
  try {
    nn::loadCheckpoint(shallow, deepPath);
    FAIL() << "expected an extra-tensor error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.2"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoint, LoadsAFileWrittenByPyTorch) {
  // tests/reference/check_interop.py --write: a torch MLP [12, 16, 5] state_dict.
  const std::string path = sourceDir() + "/tests/fixtures/torch_mlp_12_16_5.safetensors";
  models::MLP mlp({12, 16, 5}, 7);
  nn::loadCheckpoint(mlp, path);
  const SafeTensorFile f = readSafetensors(path);
  for (auto& [name, p] : mlp.namedParameters()) {
    EXPECT_EQ(p.data().toVector<float>(), nn::fromSafeTensor(f.at(name), name).toVector<float>()) << name;
  }
}

TEST_F(Checkpoint, PyTorchLoadsAFileWrittenByMinidp) {
  // MINIDP_PYTHON: the interpreter CMake checked for torch and safetensors; ctest sets it.
  const char* python = std::getenv("MINIDP_PYTHON");
  if (python == nullptr || *python == '\0') {
    GTEST_SKIP() << "MINIDP_PYTHON is not set (ctest sets it to the interpreter the build was configured with)";
  }
  const std::string path = (dir_ / "for_torch.safetensors").string();
  nn::saveCheckpoint(models::GPT(tinyGpt(), 3), path);
  const std::string cmd = std::string(python) + " " + sourceDir() +
                          "/tests/reference/check_interop.py --model gpt:32,8,2,2,16 " + path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace minidp
