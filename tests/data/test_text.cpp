// Fortune byte corpus (on the installed package and on a directory built here) and llm.c token files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "base/check.h"
#include "data/text.h"
#include "tests/support/scratch_dir.h"

namespace minidp {
namespace {

namespace fs = std::filesystem;

using Fortunes = testing::ScratchDirTest;
using LlmcTokens = testing::ScratchDirTest;

void writeFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void appendInt32(std::string& s, int32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(uint32_t(v) >> (8 * i)));
}

// An llm.c .bin file: 256-int32 header, then uint16 tokens.
std::string llmcBytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520, int32_t version = 1) {
  std::string s;
  appendInt32(s, magic);
  appendInt32(s, version);
  appendInt32(s, static_cast<int32_t>(tokens.size()));
  for (int i = 3; i < 256; ++i) appendInt32(s, 0);
  for (uint16_t t : tokens) s += {static_cast<char>(t & 0xFF), static_cast<char>(t >> 8)};
  return s;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no minidp::Error thrown";
  return "";
}

TEST_F(Fortunes, SplitsEachFileAndSkipsNonText) {
  writeFile(dir_ / "b", "0123456789");
  writeFile(dir_ / "a", std::string("\xff\x80xyzXYZ!?", 10));
  writeFile(dir_ / "a.dat", "index");
  fs::create_symlink("a", dir_ / "a.u8");
  fs::create_symlink("missing", dir_ / "dangling");
  fs::create_directory(dir_ / "off");
  writeFile(dir_ / "off" / "c", "nested");

  const TokenCorpus c = loadFortunes(dir_.string(), 0.2);
  EXPECT_EQ(c.vocab, 256);
  // Files in name order a, b; the last 20% (2 bytes) of each goes to validation.
  EXPECT_EQ(c.train,
            (std::vector<int32_t>{255, 128, 'x', 'y', 'z', 'X', 'Y', 'Z', '0', '1', '2', '3', '4', '5', '6', '7'}));
  EXPECT_EQ(c.val, (std::vector<int32_t>{'!', '?', '8', '9'}));
}

TEST_F(Fortunes, MissingDirectoryNamesPackage) {
  EXPECT_NE(errorOf([&] { loadFortunes((dir_ / "none").string()); }).find("install the Debian package fortunes"),
            std::string::npos);
  writeFile(dir_ / "only.dat", "x");
  const std::string msg = errorOf([&] { loadFortunes(dir_.string()); });
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("install the Debian package fortunes"), std::string::npos) << msg;
}

TEST_F(Fortunes, InstalledPackage) {
  if (!fs::is_directory(kFortunesDir)) {
    GTEST_SKIP() << "no fortunes at " << kFortunesDir << " (Debian package fortunes)";
  }
  const TokenCorpus c = loadFortunes();
  EXPECT_EQ(c.vocab, 256);
  EXPECT_GT(c.train.size(), 100000u);
  EXPECT_GT(c.val.size(), 10000u);
  const double fraction = double(c.val.size()) / double(c.train.size() + c.val.size());
  EXPECT_NEAR(fraction, 0.1, 0.01);
  for (const auto* part : {&c.train, &c.val}) {
    for (int32_t t : *part) ASSERT_TRUE(t >= 0 && t < 256) << t;
  }
}

TEST_F(LlmcTokens, RoundTrip) {
  const std::vector<uint16_t> train = {0, 1, 50256, 65535, 300, 7};
  const std::vector<uint16_t> val = {42, 1000};
  writeFile(dir_ / "train.bin", llmcBytes(train));
  writeFile(dir_ / "val.bin", llmcBytes(val));
  EXPECT_EQ(readLlmcTokenFile((dir_ / "val.bin").string()), (std::vector<int32_t>{42, 1000}));
  const TokenCorpus c = loadLlmcTokens((dir_ / "train.bin").string(), (dir_ / "val.bin").string());
  EXPECT_EQ(c.train, (std::vector<int32_t>{0, 1, 50256, 65535, 300, 7}));
  EXPECT_EQ(c.val, (std::vector<int32_t>{42, 1000}));
  EXPECT_EQ(c.vocab, 65536);
  writeFile(dir_ / "empty.bin", llmcBytes({}));
  EXPECT_TRUE(readLlmcTokenFile((dir_ / "empty.bin").string()).empty());
}

TEST_F(LlmcTokens, RejectsBadFiles) {
  auto expectError = [&](const std::string& name, const std::string& bytes, const std::string& part) {
    writeFile(dir_ / name, bytes);
    const std::string msg = errorOf([&] { readLlmcTokenFile((dir_ / name).string()); });
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  expectError("magic.bin", llmcBytes({1, 2}, 12345), "bad magic 12345");
  expectError("version.bin", llmcBytes({1, 2}, 20240520, 2), "unsupported version 2");
  expectError("short.bin", llmcBytes({1, 2, 3}).substr(0, 1024 + 4), "header declares 3 tokens");
  expectError("long.bin", llmcBytes({1}) + "xx", "file holds 1028 bytes");
  expectError("tiny.bin", "abc", "less than the 1024-byte header");
  EXPECT_NE(errorOf([&] { readLlmcTokenFile((dir_ / "absent.bin").string()); }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { readLlmcTokenFile(dir_.string()); }).find(dir_.string() + " is a folder, not a file"),
            std::string::npos);
}

}  // namespace
}  // namespace minidp
