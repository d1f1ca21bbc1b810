// Token streams for language models: byte-level fortune text and llm.c's .bin token files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minidp {

/// Where the Debian package fortunes installs its plain-text fortune files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

/// A token stream split into a training and a validation part.
struct TokenCorpus {
  std::vector<int32_t> train, val;  // token ids in [0, vocab)
  int vocab = 0;
};

/// Byte-level corpus (vocab 256) of the extensionless regular files in `dir`, in name order; the last
/// `valFraction` of each file goes to validation so that every genre is validated.
TokenCorpus loadFortunes(const std::string& dir = kFortunesDir, double valFraction = 0.1);

/// Reads one llm.c token file: 256 little-endian int32 header (magic 20240520, version 1, token count),
/// then that many little-endian uint16 tokens.
std::vector<int32_t> readLlmcTokenFile(const std::string& path);

/// Loads llm.c train and val token files; vocab = max token + 1 over both, because the files do not
/// record it: a caller that knows the tokenizer (GPT-2: 50257) should overwrite it.
TokenCorpus loadLlmcTokens(const std::string& trainPath, const std::string& valPath);

}  // namespace minidp
