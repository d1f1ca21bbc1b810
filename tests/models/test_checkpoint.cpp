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

// F64 into a float64 model keeps every bit; the other conversions are said: F32 widens exactly, F64 rounds.
TEST_F(Checkpoint, LoadConvertsExactlyOrSaysHow) {
  models::MLP source({4, 8, 3}, 1);
  source.to(Device::CPU, DType::F64);
  for (auto& [name, p] : source.namedParameters()) {
    std::vector<double> v = p.data().toVector<double>();
    for (size_t i = 0; i < v.size(); ++i) v[i] += 1e-12 * static_cast<double>(i + 1);  // no float32 holds these
    p.data().copyFrom(Tensor::fromVector(v, p.shape()));
  }
  const std::string f64 = (dir_ / "f64.safetensors").string(), f32 = (dir_ / "f32.safetensors").string();
  nn::saveCheckpoint(source, f64);
  models::MLP wide({4, 8, 3}, 2);
  wide.to(Device::CPU, DType::F64);
  EXPECT_EQ(nn::loadCheckpoint(wide, f64), "");
  testing::expectSameParameters(source, wide);
  models::MLP narrow({4, 8, 3}, 2);
  EXPECT_EQ(nn::loadCheckpoint(narrow, f64), "F64 rounded to float32");
  for (size_t i = 0; i < narrow.namedParameters().size(); ++i) {
    EXPECT_EQ(narrow.namedParameters()[i].second.data().toVector<float>(),
              source.namedParameters()[i].second.data().toDType(DType::F32).toVector<float>());
  }
  nn::saveCheckpoint(narrow, f32);
  EXPECT_EQ(nn::loadCheckpoint(wide, f32), "F32 widened to float64 (exactly)");
  for (size_t i = 0; i < narrow.namedParameters().size(); ++i) {
    EXPECT_EQ(wide.namedParameters()[i].second.data().toVector<double>(),
              narrow.namedParameters()[i].second.data().toDType(DType::F64).toVector<double>());
  }
}

// A file whose header claims tensors of terabytes (a sparse file): refused, or those tensors skipped, from the
// header alone, before any memory is taken for them.
// A tensor of no elements (a corrupted state's [0]-shaped entry) reads back as an empty tensor of its shape and
// dtype; its byte vector has no storage, which the copy must not hand to memcpy (the sanitizer build checks that).
TEST_F(Checkpoint, EmptyTensorsRoundTrip) {
  for (const char* dtype : {"F32", "F64", "I32"}) {
    SafeTensor st;
    st.dtype = dtype;
    st.shape = {0};
    ASSERT_EQ(st.bytes.data(), nullptr);
    const Tensor t = nn::fromSafeTensor(st, "empty");
    EXPECT_EQ(t.shape(), Shape({0})) << dtype;
    EXPECT_EQ(t.numel(), 0) << dtype;
    const SafeTensor back = nn::toSafeTensor(t);
    EXPECT_EQ(back.dtype, dtype);
    EXPECT_EQ(back.shape, st.shape);
    EXPECT_TRUE(back.bytes.empty());
    if (t.dtype() == DType::F32) EXPECT_TRUE(t.toVector<float>().empty());  // a copy to a null host pointer
  }
}

TEST_F(Checkpoint, AbsurdSizesAreRefusedFromTheHeader) {
  const auto sparseFile = [&](const std::string& name, const std::string& tensors, uint64_t bytes) {
    const std::string path = (dir_ / name).string();
    std::string header = "{" + tensors + "}";
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
    std::ofstream(path, std::ios::binary) << out << header;
    std::error_code error;
    fs::resize_file(path, 8 + header.size() + bytes, error);
    return error ? std::string() : path;
  };
  const uint64_t tib = uint64_t(1) << 40;
  const std::string entry = R"("dtype":"F32","shape":[262144,1048576],"data_offsets":[0,1099511627776])";
  const std::string wrongShape = sparseFile("shape.safetensors", "\"layers.0.weight\":{" + entry + "}", tib);
  if (wrongShape.empty()) GTEST_SKIP() << "this file system takes no 1 TiB sparse file";
  models::MLP mlp({4, 8, 3}, 1);
  for (const auto& [path, part] :
       {std::pair{wrongShape, std::string("'layers.0.weight' has shape [262144, 1048576], the model expects [8, 4]")},
        std::pair{sparseFile("extra.safetensors", "\"junk\":{" + entry + "}", tib),
                  std::string("holds tensor 'junk', which the model does not have")}}) {
    try {
      nn::loadCheckpoint(mlp, path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  // Optimizer and comm hook state are left unread by --load, however large they claim to be.
  const SafeTensorFilter filter = nn::parameterFilter(mlp);
  const SafeTensor huge{"F32", {int64_t(1) << 38}, {}};
  EXPECT_FALSE(filter(std::string(nn::kOptimizerPrefix) + "layers.0.weight.exp_avg", huge));
  EXPECT_FALSE(filter(std::string(nn::kCommHookPrefix) + "powersgd.q.layers.0.weight", huge));
  EXPECT_TRUE(filter("layers.0.weight", SafeTensor{"F64", {8, 4}, {}}));
  EXPECT_THROW(filter("layers.0.weight", SafeTensor{"F16", {8, 4}, {}}), Error);
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
