#include "data/text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/check.h"

namespace minidp {

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;  // uint16 tokens; version 2 (LLaMA-3, uint32) is not supported
constexpr int64_t kLlmcHeaderInts = 256;

std::vector<uint8_t> readAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MINIDP_CHECK(in, "cannot open " << path.string());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TokenCorpus loadFortunes(const std::string& dir, double valFraction) {
  MINIDP_CHECK(valFraction >= 0.0 && valFraction < 1.0, "valFraction must be in [0, 1), got " << valFraction);
  MINIDP_CHECK(std::filesystem::is_directory(dir),
               "fortune directory " << dir << " does not exist: install the Debian package fortunes");
  std::vector<std::filesystem::path> files;
  // is_regular_file follows symlinks, so dangling links and directories drop out here.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() && !entry.path().has_extension()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  MINIDP_CHECK(!files.empty(), "no fortune files (regular files without extension) in "
                                   << dir << ": install the Debian package fortunes");

  TokenCorpus corpus;
  corpus.vocab = 256;
  for (const auto& file : files) {
    const std::vector<uint8_t> bytes = readAll(file);
    const size_t valCount = static_cast<size_t>(static_cast<double>(bytes.size()) * valFraction);
    const auto split = bytes.end() - static_cast<std::ptrdiff_t>(valCount);
    corpus.train.insert(corpus.train.end(), bytes.begin(), split);
    corpus.val.insert(corpus.val.end(), split, bytes.end());
  }
  MINIDP_CHECK(!corpus.train.empty(), "fortune files in " << dir << " are empty: install the Debian package fortunes");
  return corpus;
}

std::vector<int32_t> readLlmcTokenFile(const std::string& path) {
  MINIDP_CHECK(!std::filesystem::is_directory(path), "llm.c token file " << path << " is a folder, not a file");
  MINIDP_CHECK(std::filesystem::is_regular_file(path), "llm.c token file " << path << " does not exist");
  const std::vector<uint8_t> bytes = readAll(path);
  const int64_t headerBytes = kLlmcHeaderInts * 4;
  MINIDP_CHECK(static_cast<int64_t>(bytes.size()) >= headerBytes,
               path << ": file holds " << bytes.size() << " bytes, less than the " << headerBytes << "-byte header");
  auto headerInt = [&](int i) {
    const uint8_t* b = &bytes[4 * i];
    return static_cast<int32_t>(uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24);
  };
  MINIDP_CHECK(headerInt(0) == kLlmcMagic,
               path << ": bad magic " << headerInt(0) << ", expected " << kLlmcMagic << " (not an llm.c token file)");
  MINIDP_CHECK(headerInt(1) == kLlmcVersion,
               path << ": unsupported version " << headerInt(1) << ", only " << kLlmcVersion << " (uint16 tokens)");
  const int64_t count = headerInt(2);
  MINIDP_CHECK(count >= 0, path << ": negative token count " << count);
  const int64_t expected = headerBytes + 2 * count;
  MINIDP_CHECK(static_cast<int64_t>(bytes.size()) == expected, path << ": header declares " << count << " tokens ("
                                                                    << expected << " bytes), file holds "
                                                                    << bytes.size() << " bytes");
  std::vector<int32_t> tokens(count);
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* b = &bytes[headerBytes + 2 * i];
    tokens[i] = int32_t(b[0]) | int32_t(b[1]) << 8;
  }
  return tokens;
}

TokenCorpus loadLlmcTokens(const std::string& trainPath, const std::string& valPath) {
  TokenCorpus corpus;
  corpus.train = readLlmcTokenFile(trainPath);
  corpus.val = readLlmcTokenFile(valPath);
  int32_t maxToken = -1;
  for (const auto* part : {&corpus.train, &corpus.val}) {
    for (int32_t t : *part) maxToken = std::max(maxToken, t);
  }
  corpus.vocab = maxToken + 1;
  return corpus;
}

}  // namespace minidp
