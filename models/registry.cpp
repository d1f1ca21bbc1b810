#include "models/registry.h"

#include <map>
#include <mutex>
#include <sstream>

#include "models/gpt.h"
#include "models/mlp.h"

namespace minidp::models {

namespace {

ModelEntry mlpEntry() {
  ModelEntry e;
  e.description = "MLP with ReLU (--hidden sizes) on Fashion-MNIST images";
  e.data = DataKind::Images;
  e.defaultData = "fashion-mnist";
  e.evaluation = Evaluation::Accuracy;
  e.defaultSteps = 5000;
  e.defaultOptimizer = "sgd";
  e.defaultLr = 0.05;
  e.make = [](const ModelArgs& a) {
    std::vector<int64_t> dims{a.inputs};
    dims.insert(dims.end(), a.hidden.begin(), a.hidden.end());
    dims.push_back(a.classes);
    return std::make_unique<MLP>(dims, a.seed, a.compute);
  };
  return e;
}

ModelEntry gptEntry() {
  ModelEntry e;
  e.description = "GPT-2-style decoder (--layers, --heads, --embd, --context) on byte or llm.c tokens";
  e.data = DataKind::Tokens;
  e.defaultData = "fortunes";
  e.evaluation = Evaluation::MeanLoss;
  e.defaultSteps = 2000;
  e.defaultOptimizer = "adamw";
  e.defaultLr = 1e-3;
  e.rowSparseParameter = "wte.weight";
  e.make = [](const ModelArgs& a) {
    GptConfig c;
    c.vocab = a.classes;
    c.context = a.context;
    c.layers = a.layers;
    c.heads = a.heads;
    c.embd = a.embd;
    c.compute = a.compute;
    c.fp32Residual = a.fp32Residual;
    return std::make_unique<GPT>(c, a.seed);
  };
  return e;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, ModelEntry> entries;
};

// Built-ins are added on first use: no static initialisers a static library's linker could drop.
Registry& registry() {
  static Registry* r = [] {
    auto* fresh = new Registry;
    fresh->entries.emplace("mlp", mlpEntry());
    fresh->entries.emplace("gpt", gptEntry());
    return fresh;
  }();
  return *r;
}

}  // namespace

void registerModel(const std::string& name, ModelEntry entry) {
  MINIDP_CHECK(!name.empty() && entry.make, "registerModel: a model needs a name and a factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.entries[name] = std::move(entry);
}

const ModelEntry& findModel(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.entries.find(name);
  if (it == r.entries.end()) {
    std::ostringstream known;
    for (const auto& [n, e] : r.entries) known << " " << n;
    MINIDP_CHECK(false, "unknown model '" << name << "'; registered:" << known.str());
  }
  return it->second;
}

bool hasModel(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.entries.count(name) > 0;
}

std::vector<std::string> registeredModels() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [n, e] : r.entries) names.push_back(n);
  return names;
}

}  // namespace minidp::models
