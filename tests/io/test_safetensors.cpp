// safetensors round trips, determinism, validation of broken files, and reading PyTorch-written fixtures.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/check.h"
#include "framework/io/safetensors.h"
#include "tests/support/scratch_dir.h"

namespace minidp {
namespace {

namespace fs = std::filesystem;

using Safetensors = testing::ScratchDirTest;

std::string readBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
SafeTensor makeTensor(const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  SafeTensor t{dtype, std::move(shape), std::vector<uint8_t>(values.size() * sizeof(T))};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());  // memcpy(nullptr, ...) is UB
  return t;
}

// Several dtypes and shapes, including a scalar, an empty tensor and names that do not sort in order.
std::vector<std::pair<std::string, SafeTensor>> sampleTensors() {
  return {
      {"z.weight", makeTensor<float>("F32", {2, 3}, {1.5f, -0.0f, 3e-38f, 1e38f, -7.25f, 0.1f})},
      {"a.bias", makeTensor<double>("F64", {3}, {1.0 / 3.0, -2.5e-300, 6.02e23})},
      {"count", makeTensor<int32_t>("I32", {}, {-123456})},
      {"steps", makeTensor<int64_t>("I64", {1, 2}, {int64_t(1) << 40, -1})},
      {"mask", makeTensor<uint8_t>("U8", {5}, {0, 1, 2, 254, 255})},
      {"tokens", makeTensor<uint16_t>("U16", {2, 2}, {0, 50256, 65535, 7})},
      {"empty", makeTensor<float>("F32", {0, 4}, {})},
  };
}

std::string errorOf(const fs::path& path) {
  try {
    readSafetensors(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no minidp::Error for " << path;
  return "";
}

// A file with the given header JSON (unpadded) followed by `buffer`.
std::string fileWithHeader(const std::string& json, const std::string& buffer) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(uint64_t(json.size()) >> (8 * i)));
  return s + json + buffer;
}

TEST_F(Safetensors, RoundTripIsBitExact) {
  const fs::path path = dir_ / "model.safetensors";
  const auto tensors = sampleTensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  writeSafetensors(path.string(), tensors, metadata);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

  const SafeTensorFile file = readSafetensors(path.string());
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, tensors[i].first) << "tensors come back in write order";
    const SafeTensor& t = file.at(tensors[i].first);
    EXPECT_EQ(t.dtype, tensors[i].second.dtype);
    EXPECT_EQ(t.shape, tensors[i].second.shape);
    EXPECT_EQ(t.bytes, tensors[i].second.bytes);
  }
  const std::string bytes = readBytes(path);
  uint64_t headerLen = 0;
  std::memcpy(&headerLen, bytes.data(), 8);
  EXPECT_EQ(headerLen % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
}

TEST_F(Safetensors, DeterministicBytesAndOverwrite) {
  writeSafetensors((dir_ / "a.safetensors").string(), sampleTensors(), {{"k", "v"}});
  writeSafetensors((dir_ / "b.safetensors").string(), sampleTensors(), {{"k", "v"}});
  EXPECT_EQ(readBytes(dir_ / "a.safetensors"), readBytes(dir_ / "b.safetensors"));
  writeSafetensors((dir_ / "b.safetensors").string(), {{"x", makeTensor<float>("F32", {1}, {2.0f})}});
  const SafeTensorFile file = readSafetensors((dir_ / "b.safetensors").string());
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_TRUE(file.metadata.empty());
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().extension(), ".safetensors") << entry.path();
}

TEST_F(Safetensors, WriteRejectsBadInputWithoutLeavingFiles) {
  const std::string path = (dir_ / "bad.safetensors").string();
  auto expectWriteError = [&](const std::vector<std::pair<std::string, SafeTensor>>& tensors, const std::string& part) {
    try {
      writeSafetensors(path, tensors);
      ADD_FAILURE() << "no error, expected " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const SafeTensor ok = makeTensor<float>("F32", {2}, {1, 2});
  expectWriteError({{"w", ok}, {"w", ok}}, "'w' is given twice");
  expectWriteError({{"w", makeTensor<float>("F32", {3}, {1, 2})}}, "F32 [3] needs 12 bytes, got 8");
  expectWriteError({{"w", makeTensor<float>("F31", {2}, {1, 2})}}, "unknown dtype \"F31\"");
  expectWriteError({{"w", makeTensor<float>("F32", {int64_t(1) << 62, 4}, {1, 2})}},
                   "shape [4611686018427387904, 4] is too large");
  expectWriteError({{"__metadata__", ok}}, "reserved");
  EXPECT_TRUE(fs::is_empty(dir_));
  EXPECT_THROW(writeSafetensors((dir_ / "no" / "such" / "dir.safetensors").string(), {{"w", ok}}), Error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(Safetensors, MissingTensorIsNamed) {
  const fs::path path = dir_ / "m.safetensors";
  writeSafetensors(path.string(), {{"w", makeTensor<float>("F32", {1}, {1})}});
  try {
    readSafetensors(path.string()).at("bias");
    FAIL() << "no error for a missing tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bias'"), std::string::npos) << e.what();
  }
}

TEST_F(Safetensors, TruncatedFiles) {
  writeSafetensors((dir_ / "full.safetensors").string(), sampleTensors());
  const std::string full = readBytes(dir_ / "full.safetensors");
  // Cut inside the length, inside the header and inside the buffer.
  for (size_t keep : {size_t(0), size_t(5), size_t(40), full.size() - 1}) {
    const fs::path cut = dir_ / ("cut" + std::to_string(keep) + ".safetensors");
    writeBytes(cut, full.substr(0, keep));
    const std::string msg = errorOf(cut);
    EXPECT_NE(msg.find(cut.string()), std::string::npos) << msg;
  }
  EXPECT_NE(errorOf(dir_ / "cut5.safetensors").find("too short"), std::string::npos);
  EXPECT_NE(errorOf(dir_ / "cut40.safetensors").find("runs past the end"), std::string::npos);
  EXPECT_NE(errorOf(dir_ / "absent.safetensors").find("does not exist"), std::string::npos);
}

TEST_F(Safetensors, CorruptHeaders) {
  const std::string buf8(8, '\x01');
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> cases = {
      {"not valid JSON", {"{\"w\": {\"dtype\": ", buf8}},
      {"not a JSON object but array", {"[1, 2]", ""}},
      {"unknown dtype \"F128\"", {R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,8]}})", buf8}},
      {"lie outside the 8-byte buffer", {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", buf8}},
      {"span 8 bytes, but F32 [3] needs 12", {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", buf8}},
      {"shape [4611686018427387904, 4] is too large: its F32 bytes exceed 2^63 - 1",
       {R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", buf8}},
      {"'w' appears twice",
       {R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
        buf8}},
      {"gap or overlap",
       {R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
        buf8}},
      {"tensors cover 4 bytes", {R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", buf8}},
      {"non-negative integers", {R"({"w":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}})", buf8}},
      {"missing array \"shape\"", {R"({"w":{"dtype":"U8","data_offsets":[0,8]}})", buf8}},
      {"metadata 'k' is not a string", {R"({"__metadata__":{"k":1}})", ""}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path path = dir_ / ("case" + std::to_string(i) + ".safetensors");
    writeBytes(path, fileWithHeader(cases[i].second.first, cases[i].second.second));
    const std::string msg = errorOf(path);
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(cases[i].first), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_EQ(msg.find("json.exception"), std::string::npos) << "case " << i << ": " << msg;
  }
}

// A filter sees every tensor's dtype and shape before any bytes are read: what it leaves out is never read
// (nor memory taken for it), and it can refuse a file whose header claims a terabyte without reading it.
TEST_F(Safetensors, FilterDecidesBeforeAnyBytesAreRead) {
  const fs::path path = dir_ / "some.safetensors";
  writeSafetensors(path.string(), sampleTensors(), {{"k", "v"}});
  std::vector<std::string> seen;
  const SafeTensorFile some = readSafetensors(path.string(), [&](const std::string& name, const SafeTensor& header) {
    EXPECT_TRUE(header.bytes.empty());
    seen.push_back(name);
    return name == "a.bias" || name == "count";
  });
  EXPECT_EQ(seen.size(), sampleTensors().size());
  ASSERT_EQ(some.tensors.size(), 2u);
  EXPECT_EQ(some.at("a.bias").bytes, sampleTensors()[1].second.bytes);
  EXPECT_EQ(some.metadata.at("k"), "v");

  // 2^40 bytes of one tensor, as a sparse file: its header is consistent, its bytes are never read.
  const fs::path huge = dir_ / "huge.safetensors";
  const std::string header = R"({"w":{"dtype":"U8","shape":[1099511627776],"data_offsets":[0,1099511627776]}})";
  writeBytes(huge, fileWithHeader(header, ""));
  std::error_code sparse;
  fs::resize_file(huge, 8 + header.size() + (uint64_t(1) << 40), sparse);
  if (sparse) GTEST_SKIP() << "this file system takes no 1 TiB sparse file: " << sparse.message();
  std::vector<int64_t> shape;
  EXPECT_TRUE(readSafetensors(huge.string(), [&](const std::string&, const SafeTensor& h) {
                shape = h.shape;
                return false;
              }).tensors.empty());
  EXPECT_EQ(shape, (std::vector<int64_t>{int64_t(1) << 40}));
  EXPECT_THROW(readSafetensors(huge.string(),
                               [](const std::string& name, const SafeTensor&) -> bool {
                                 throw Error("tensor '" + name + "' is larger than the model");
                               }),
               Error);
}

TEST_F(Safetensors, HeaderLargerThanTheFormatAllowsIsRefused) {
  const fs::path path = dir_ / "long.safetensors";
  std::string bytes(8, '\0');
  const uint64_t length = kMaxSafetensorsHeader + 8;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(length >> (8 * i));
  writeBytes(path, bytes);
  std::error_code sparse;
  fs::resize_file(path, 8 + length, sparse);
  if (sparse) GTEST_SKIP() << sparse.message();
  EXPECT_NE(errorOf(path).find("exceeds the format's 100000000-byte limit"), std::string::npos) << errorOf(path);
}

TEST_F(Safetensors, ReadsPyTorchFixtures) {
  const char* source = std::getenv("MINIDP_SOURCE_DIR");
  const fs::path fixture = fs::path(source ? source : "") / "tests/fixtures/mlp_tiny.safetensors";
  if (!source || !fs::exists(fixture)) GTEST_SKIP() << "no fixture at " << fixture << " (MINIDP_SOURCE_DIR unset?)";
  const SafeTensorFile file = readSafetensors(fixture.string());
  EXPECT_EQ(file.metadata.at("model"), "mlp");
  const SafeTensor& w = file.at("param.layers.0.weight");
  EXPECT_EQ(w.dtype, "F32");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{16, 12}));
  EXPECT_EQ(w.bytes.size(), 16u * 12u * 4u);
}

}  // namespace
}  // namespace minidp
