#include "tests/support/reference_models.h"

#include <cstdlib>
#include <sstream>
#include <utility>

#include "models/gpt.h"
#include "models/mlp.h"
#include "models/registry.h"

namespace minidp::testing {

namespace {

std::vector<int64_t> parseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

std::string fixturePath(const std::string& name) {
  const char* root = std::getenv("MINIDP_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/fixtures/" + name;
}


std::unique_ptr<models::Model> buildReferenceModel(const SafeTensorFile& f) {
  const auto& meta = f.metadata;
  if (meta.at("model") == "mlp") return std::make_unique<models::MLP>(parseList(meta.at("dims")), 0);
  if (meta.at("model") == "llama") {
    models::FlagValues given;
    for (const auto& [flag, key] : std::vector<std::pair<std::string, std::string>>{{"layers", "n_layer"},
                                                                                     {"heads", "n_head"},
                                                                                     {"kv-heads", "n_kv_head"},
                                                                                     {"embd", "n_embd"},
                                                                                     {"hidden", "hidden"},
                                                                                     {"context", "block_size"},
                                                                                     {"rope-theta", "rope_theta"},
                                                                                     {"norm-eps", "rms_norm_eps"}}) {
      given.set(flag, meta.at(key));
    }
    const models::ModelEntry& entry = models::findModel("llama");
    models::ModelArgs args;
    args.classes = std::stoll(meta.at("vocab_size"));
    args.flags = models::flagValues("llama", entry, given);
    args.context = args.flags.integer("context");
    return entry.make(args);
  }
  models::GptConfig c;
  c.vocab = std::stoll(meta.at("vocab_size"));
  c.context = std::stoll(meta.at("block_size"));
  c.layers = std::stoll(meta.at("n_layer"));
  c.heads = std::stoll(meta.at("n_head"));
  c.embd = std::stoll(meta.at("n_embd"));
  return std::make_unique<models::GPT>(c, 0);
}

}  // namespace minidp::testing
