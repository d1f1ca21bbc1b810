#include "train/train_state.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/nn/checkpoint.h"
#include "models/registry.h"

namespace minidp::train {

namespace {

constexpr const char* kStateKey = "minidp";
constexpr int kStateFormat = 1;

std::string optimizerName(const Options& o) {
  return o.optimizer.empty() ? models::findModel(o.model).defaultOptimizer : o.optimizer;
}

// The model's flags a state must match (ModelFlag::checkedOnResume), as one line: a state from another
// model says what differs. Token models add their data (its vocabulary shapes the parameters).
std::string modelDescription(const Options& o) {
  const models::ModelEntry& entry = models::findModel(o.model);
  const models::FlagValues values = models::flagValues(o.model, entry, o.modelFlags);
  std::ostringstream os;
  os << o.model;
  for (const models::ModelFlag& flag : entry.flags) {
    if (flag.checkedOnResume) os << " --" << flag.name << " " << values.text(flag.name);
  }
  if (entry.data == models::DataKind::Tokens) os << " --data " << (o.data.empty() ? entry.defaultData : o.data);
  return os.str();
}

nlohmann::json readState(const SafeTensorFile& file, const std::string& path) {
  const auto it = file.metadata.find(kStateKey);
  MINIDP_CHECK(it != file.metadata.end(), "--resume " << path
                                                      << " holds parameters only (no training state); "
                                                         "start from them with --load instead");
  const nlohmann::json state = nlohmann::json::parse(it->second, nullptr, false);
  MINIDP_CHECK(state.is_object() && state.value("format", 0) == kStateFormat,
               "--resume " << path << ": unknown training state format; it was written by another minidp version");
  return state;
}

template <typename T>
void expectSame(const nlohmann::json& state, const char* key, const T& here, const std::string& path, const char* fix) {
  const T there = state.at(key).get<T>();
  if (there == here) return;
  std::ostringstream os;
  os << "--resume " << path << " was saved with " << key << " " << nlohmann::json(there).dump() << ", this run has "
     << nlohmann::json(here).dump() << "; " << fix;
  throw Error(os.str());
}

}  // namespace

void checkResumeFile(const Options& o, const std::string& path, int world) {
  SafeTensorFile file;
  try {
    file = readSafetensors(path);
  } catch (const Error& e) {
    throw Error("--resume " + path + ": " + e.what());
  }
  const nlohmann::json state = readState(file, path);
  try {
    expectSame(state, "model", modelDescription(o), path, "pass the same model flags");
    expectSame(state, "dtype", o.dtype, path, "pass the same --dtype");
    expectSame(state, "optimizer", optimizerName(o), path, "pass the same --optimizer");
    expectSame<uint64_t>(state, "seed", o.seed, path, "pass the same --seed");
    expectSame<int64_t>(state, "global_batch", o.batchSize * world, path,
                        "--batch-size x ranks must equal it (any rank count continues the same batches)");
    expectSame<int64_t>(state, "grad_accum", o.gradAccum, path, "pass the same --grad-accum");
  } catch (const nlohmann::json::exception&) {
    throw Error("--resume " + path + ": the training state lacks an entry; it was written by another minidp version");
  }
  const int64_t step = state.at("step").get<int64_t>();
  MINIDP_CHECK(step < o.steps, "--resume " << path << " is at step " << step << " already and --steps is " << o.steps
                                           << " (--steps counts the total): raise --steps");
}

void Trainer::saveState(const std::string& path, int64_t step) {
  const std::vector<std::pair<std::string, Tensor>> full = optimizer_->checkpointState();  // ZeRO-1: a collective
  const distributed::HookState hook = ddp_->hookState();  // per-rank state is gathered: a collective
  if (session_.rank() != 0) return;
  std::vector<std::pair<std::string, SafeTensor>> state;
  for (const auto& [name, tensor] : full) state.emplace_back(nn::kOptimizerPrefix + name, nn::toSafeTensor(tensor));
  for (const auto& [name, tensor] : hook) state.emplace_back(nn::kCommHookPrefix + name, nn::toSafeTensor(tensor));
  const nlohmann::json meta = {{"format", kStateFormat},
                               {"step", step},
                               {"micro_batches", step * opts_.gradAccum},
                               {"optimizer_steps", optimizer_->stepCount()},
                               {"model", modelDescription(opts_)},
                               {"dtype", opts_.dtype},
                               {"optimizer", optimizerName(opts_)},
                               {"seed", opts_.seed},
                               {"global_batch", opts_.batchSize * session_.world()},
                               {"grad_accum", opts_.gradAccum}};
  nn::saveCheckpoint(*model_, path, {{"format", "pt"}, {kStateKey, meta.dump()}}, state);
}

int64_t Trainer::resume(const std::string& path) {
  const SafeTensorFile file = readSafetensors(path);
  const nlohmann::json meta = readState(file, path);
  try {
    nn::loadParameters(*model_, file);
    optimizer_->restoreState([&file](const std::string& name) {
      const std::string key = nn::kOptimizerPrefix + name;
      return nn::fromSafeTensor(file.at(key), key);
    });
    ddp_->restoreHookState([&file](const std::string& name) {
      const std::string key = nn::kCommHookPrefix + name;
      for (const auto& [stored, tensor] : file.tensors) {
        if (stored == key) return nn::fromSafeTensor(tensor, key);
      }
      return Tensor();
    });
  } catch (const Error& e) {
    throw Error("--resume " + path + ": " + e.what());
  }
  optimizer_->setStepCount(meta.at("optimizer_steps").get<int64_t>());
  batches_->skip(meta.at("micro_batches").get<int64_t>());
  return meta.at("step").get<int64_t>();
}

}  // namespace minidp::train
