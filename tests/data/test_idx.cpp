// IDX reader on files written here (plain, gzip, broken) and Fashion-MNIST on the installed dataset.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "base/check.h"
#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "tests/support/scratch_dir.h"

namespace minidp {
namespace {

namespace fs = std::filesystem;

using Idx = testing::ScratchDirTest;
using FashionMnist = testing::ScratchDirTest;

// Header (magic 0x0000, type, ndims, big-endian dims) followed by `data`.
std::string idxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data, uint8_t type = 0x08) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(d >> shift));
  }
  return s + std::string(data.begin(), data.end());
}

void writePlain(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void writeGzip(const fs::path& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Runs readIdx expecting a minidp::Error whose message contains every one of `parts`.
void expectIdxError(const fs::path& path, const std::vector<std::string>& parts) {
  try {
    readIdx(path.string());
    FAIL() << "no error for " << path;
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

std::vector<uint8_t> iota(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7);
  return v;
}

TEST_F(Idx, ReadsPlainAndGzip) {
  const std::vector<uint8_t> data = iota(2 * 3 * 4);
  writePlain(dir_ / "a.idx", idxBytes({2, 3, 4}, data));
  writeGzip(dir_ / "a.idx.gz", idxBytes({2, 3, 4}, data));
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    const IdxArray a = readIdx((dir_ / name).string());
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4})) << name;
    EXPECT_EQ(a.data, data) << name;
  }
}

TEST_F(Idx, ReadsLargeDimensionBigEndian) {
  const std::vector<uint8_t> data = iota(70000);
  writeGzip(dir_ / "big.gz", idxBytes({70000}, data));
  const IdxArray a = readIdx((dir_ / "big.gz").string());
  EXPECT_EQ(a.dims, (std::vector<int64_t>{70000}));
  EXPECT_EQ(a.data, data);
}

TEST_F(Idx, MissingFile) { expectIdxError(dir_ / "nope.gz", {"nope.gz", "does not exist"}); }

TEST_F(Idx, TruncatedData) {
  std::string bytes = idxBytes({10, 10}, iota(100));
  bytes.resize(bytes.size() - 30);
  writePlain(dir_ / "short.idx", bytes);
  writeGzip(dir_ / "short.gz", bytes);
  expectIdxError(dir_ / "short.idx", {"short.idx", "expected 100 data bytes, file holds 70"});
  expectIdxError(dir_ / "short.gz", {"short.gz", "expected 100 data bytes, file holds 70"});
}

TEST_F(Idx, TruncatedGzipStream) {
  writeGzip(dir_ / "full.gz", idxBytes({5000}, iota(5000)));
  std::ifstream in(dir_ / "full.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  writePlain(dir_ / "cut.gz", gz.substr(0, gz.size() / 2));
  expectIdxError(dir_ / "cut.gz", {"cut.gz"});
}

TEST_F(Idx, MalformedHeaders) {
  writePlain(dir_ / "empty", "");
  expectIdxError(dir_ / "empty", {"empty", "too short for an IDX header"});
  writePlain(dir_ / "magic", "\x01\x02\x08\x01" + std::string(8, '\0'));
  expectIdxError(dir_ / "magic", {"magic", "two zero bytes"});
  writePlain(dir_ / "float", idxBytes({1}, {0, 0, 0, 0}, 0x0D));
  expectIdxError(dir_ / "float", {"float", "0xd is not supported"});
  writePlain(dir_ / "dims", idxBytes({3, 3}, {}).substr(0, 9));
  expectIdxError(dir_ / "dims", {"dims", "truncated header"});
  writePlain(dir_ / "trailing", idxBytes({2}, {1, 2, 3}));
  expectIdxError(dir_ / "trailing", {"trailing", "more than the 2 data bytes"});
}

TEST_F(FashionMnist, MissingFileNamesPackage) {
  try {
    loadFashionMnist(dir_.string(), "train");
    FAIL() << "no error for an empty directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train-images-idx3-ubyte.gz"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("install the Debian package dataset-fashion-mnist"), std::string::npos);
  }
  EXPECT_THROW(loadFashionMnist(dir_.string(), "validation"), Error);
}

TEST_F(FashionMnist, SmallFilesAndCountMismatch) {
  writeGzip(dir_ / "t10k-images-idx3-ubyte.gz", idxBytes({3, 2, 2}, {0, 255, 51, 102, 0, 0, 0, 0, 1, 2, 3, 4}));
  writeGzip(dir_ / "t10k-labels-idx1-ubyte.gz", idxBytes({3}, {9, 0, 4}));
  const ImageDataset ds = loadFashionMnist(dir_.string(), "test");
  EXPECT_EQ(ds.count, 3);
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.cols, 2);
  EXPECT_EQ(ds.images.size(), 12u);
  EXPECT_FLOAT_EQ(ds.images[1], 1.0f);
  EXPECT_FLOAT_EQ(ds.images[2], 0.2f);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{9, 0, 4}));

  writeGzip(dir_ / "t10k-labels-idx1-ubyte.gz", idxBytes({2}, {9, 0}));
  try {
    loadFashionMnist(dir_.string(), "test");
    FAIL() << "no error for 3 images and 2 labels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 images but 2 labels"), std::string::npos) << e.what();
  }
}

TEST_F(FashionMnist, InstalledDataset) {
  if (!fs::exists(fs::path(kFashionMnistDir) / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kFashionMnistDir << " (Debian package dataset-fashion-mnist)";
  }
  for (const auto& [split, count] : {std::pair<std::string, int64_t>{"train", 60000}, {"test", 10000}}) {
    const ImageDataset ds = loadFashionMnist(kFashionMnistDir, split);
    EXPECT_EQ(ds.count, count) << split;
    EXPECT_EQ(ds.rows, 28);
    EXPECT_EQ(ds.cols, 28);
    ASSERT_EQ(ds.images.size(), size_t(count * 28 * 28));
    ASSERT_EQ(ds.labels.size(), size_t(count));
    std::vector<int64_t> perClass(10, 0);
    for (int32_t l : ds.labels) {
      ASSERT_TRUE(l >= 0 && l < 10) << l;
      ++perClass[l];
    }
    for (int64_t n : perClass) EXPECT_EQ(n, count / 10) << split;  // Fashion-MNIST is balanced
    float lo = 1, hi = 0;
    for (float p : ds.images) lo = std::min(lo, p), hi = std::max(hi, p);
    EXPECT_EQ(lo, 0.0f);
    EXPECT_EQ(hi, 1.0f);
  }
}

}  // namespace
}  // namespace minidp
