#include "train/train_state.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/nn/checkpoint.h"
#include "framework/nn/state_check.h"
#include "models/registry.h"
#include "train/trainer.h"

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
  os << o.model << checkedFlagsText(entry.flags, values);
  if (entry.data == models::DataKind::Tokens) os << " --data " << nameOf(dataSetNames(), o.dataSet());
  return os.str();
}

/// A training state's metadata ("minidp"), read whole and checked before any of it is used.
struct SavedState {
  std::string model, dtype, optimizer, commHook;
  uint64_t seed = 0;
  int64_t globalBatch = 0, gradAccum = 0, step = 0, microBatches = 0, optimizerSteps = 0;
};

/// The metadata of `file`: every entry present, of its type and within its bounds (a step in [0, 1e9], the
/// micro-batches drawn exactly step x grad_accum, ...), else an error naming the file and the entry.
SavedState readState(const SafeTensorFile& file, const std::string& path) {
  const auto it = file.metadata.find(kStateKey);
  MINIDP_CHECK(it != file.metadata.end(), "--resume " << path
                                                      << " holds parameters only (no training state); "
                                                         "start from them with --load instead");
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  const std::string where = "--resume " + path + ": the training state";
  const std::string other = "; it was written by another minidp version, or altered";
  MINIDP_CHECK(j.is_object(), where << " is not a JSON object" << other);
  const auto field = [&](const char* key) -> const nlohmann::json& {
    MINIDP_CHECK(j.contains(key), where << " has no \"" << key << "\"" << other);
    return j[key];
  };
  const auto integer = [&](const char* key, int64_t lo, int64_t hi) {
    const nlohmann::json& v = field(key);
    const bool inRange = v.is_number_unsigned()  ? v.get<uint64_t>() <= uint64_t(hi) && int64_t(v.get<uint64_t>()) >= lo
                         : v.is_number_integer() ? v.get<int64_t>() >= lo && v.get<int64_t>() <= hi
                                                 : false;
    MINIDP_CHECK(inRange, where << "'s \"" << key << "\" is " << v.dump() << ", not an integer in [" << lo << ", " << hi
                                << "]" << other);
    return v.get<int64_t>();
  };
  const auto text = [&](const char* key) {
    const nlohmann::json& v = field(key);
    MINIDP_CHECK(v.is_string(), where << "'s \"" << key << "\" is " << v.dump() << ", not a string" << other);
    return v.get<std::string>();
  };
  MINIDP_CHECK(field("format") == kStateFormat,
               where << " has format " << field("format").dump() << ", not " << kStateFormat << other);
  SavedState s;
  s.model = text("model");
  s.dtype = text("dtype");
  s.optimizer = text("optimizer");
  // The comm hook and the settings its state depends on (CommHook::signature); a state written before hooks
  // had one was all-reduced.
  s.commHook = j.contains("comm_hook") ? text("comm_hook") : "allreduce";
  const nlohmann::json& seed = field("seed");
  MINIDP_CHECK(seed.is_number_unsigned() || (seed.is_number_integer() && seed.get<int64_t>() >= 0),
               where << "'s \"seed\" is " << seed.dump() << ", not an integer in [0, 2^64)" << other);
  s.seed = seed.get<uint64_t>();
  constexpr int64_t kMaxSteps = static_cast<int64_t>(kMaxCount);
  s.globalBatch = integer("global_batch", 1, int64_t(1) << 40);
  s.gradAccum = integer("grad_accum", 1, 1000000);
  s.step = integer("step", 0, kMaxSteps);
  s.optimizerSteps = integer("optimizer_steps", 0, s.step);
  // The sampler replays exactly this many draws: step x grad_accum, nothing else.
  const nlohmann::json& drawn = field("micro_batches");
  MINIDP_CHECK(drawn.is_number_integer() && drawn == s.step * s.gradAccum,
               where << "'s \"micro_batches\" is " << drawn.dump() << ", not \"step\" " << s.step
                     << " x \"grad_accum\" " << s.gradAccum << other);
  s.microBatches = s.step * s.gradAccum;
  return s;
}

void expectSame(const std::string& key, const nlohmann::json& there, const nlohmann::json& here,
                const std::string& path, const char* fix) {
  if (there == here) return;
  std::ostringstream os;
  os << "--resume " << path << " was saved with " << key << " " << there.dump() << ", this run has " << here.dump()
     << "; " << fix;
  throw Error(os.str());
}

/// Trainer::resume's filter: the parameters (nn::parameterFilter), the optimizer state of each (its shape),
/// and comm hook state no larger than every rank's copy of the whole model; all checked from the header.
SafeTensorFilter stateFilter(const models::Model& model, int64_t globalBatch) {
  std::map<std::string, Shape> shapes;
  double parameters = 0;
  for (const auto& [name, p] : model.namedParameters()) {
    shapes[name] = p.shape();
    parameters += static_cast<double>(shapeNumel(p.shape()));
  }
  const SafeTensorFilter ofParameters = nn::parameterFilter(model);
  const auto startsWith = [](const std::string& text, const char* prefix) {
    return text.compare(0, std::strlen(prefix), prefix) == 0;
  };
  return [=](const std::string& name, const SafeTensor& header) {
    if (startsWith(name, nn::kOptimizerPrefix)) {  // "optimizer.<parameter>.<kind>"
      const std::string rest = name.substr(std::strlen(nn::kOptimizerPrefix));
      const size_t dot = rest.rfind('.');
      const auto it = dot == std::string::npos ? shapes.end() : shapes.find(rest.substr(0, dot));
      MINIDP_CHECK(it != shapes.end(), "the file holds optimizer state '" << name << "' of no parameter of the model");
      MINIDP_CHECK(header.shape == it->second, "optimizer state '"
                                                   << name << "' has shape " << shapeString(header.shape)
                                                   << ", not its parameter's " << shapeString(it->second));
      return true;
    }
    if (startsWith(name, nn::kCommHookPrefix)) {
      double elements = 1;
      for (int64_t d : header.shape) elements *= static_cast<double>(d);
      MINIDP_CHECK(elements <= static_cast<double>(globalBatch) * parameters + 1024 * parameters,
                   "comm hook state '" << name << "' of shape " << shapeString(header.shape)
                                       << " is larger than every rank's copy of the model");
      return true;
    }
    return ofParameters(name, header);
  };
}

/// The file's tensor `key` (converted from its stored dtype), or an undefined tensor when it holds none.
Tensor storedTensor(const SafeTensorFile& file, const std::string& key) {
  for (const auto& [stored, tensor] : file.tensors) {
    if (stored == key) return nn::fromSafeTensor(tensor, key);
  }
  return Tensor();
}

/// Every state tensor checked before any is used: each parameter's optimizer state (the parameter's dtype and
/// shape, finite) and the comm hook's as its schema says (CommHook::stateSchema), none missing, none extra.
/// (The parameters themselves: nn::loadParameters.)
void checkStateTensors(const SafeTensorFile& file, const models::Model& model, const optim::Optimizer& optimizer,
                       const Options& o, const distributed::CommHook& hook, int world, int64_t step) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : file.tensors) names.push_back(name);
  const nn::StoredTensor find = [&file](const std::string& key) { return storedTensor(file, key); };
  std::vector<nn::StateRule> rules;
  for (const auto& [name, p] : model.namedParameters()) {
    for (const std::string& kind : optimizer.stateNames()) rules.push_back({name + "." + kind, {p.dtype()}, p.shape()});
  }
  nn::checkStateTensors(rules, find, names, nn::kOptimizerPrefix, "--optimizer " + optimizerName(o));
  nn::checkStateTensors(hook.stateSchema(world, step), find, names, nn::kCommHookPrefix,
                        "--comm-hook " + hook.name());
}

}  // namespace

void checkResumeFile(const Options& o, const std::string& path, int world) {
  SafeTensorFile file;
  try {
    file = readSafetensorsHeader(path);
  } catch (const Error& e) {
    throw Error("--resume " + path + ": " + e.what());
  }
  const SavedState state = readState(file, path);
  expectSame("model", state.model, modelDescription(o), path, "pass the same model flags");
  expectSame("dtype", state.dtype, nameOf(precisionNames(), o.precision), path, "pass the same --dtype");
  expectSame("optimizer", state.optimizer, optimizerName(o), path, "pass the same --optimizer");
  expectSame("seed", state.seed, o.seed, path, "pass the same --seed");
  expectSame("global_batch", state.globalBatch, o.batchSize * world, path,
             "--batch-size x ranks must equal it (any rank count continues the same batches)");
  expectSame("grad_accum", state.gradAccum, o.gradAccum, path, "pass the same --grad-accum");
  expectSame("comm_hook", state.commHook, distributed::commHookSignature(o.ddp.commHook), path,
             "pass the same --comm-hook and its flags (its state, such as PowerSGD's error feedback, continues)");
  const int64_t step = state.step;
  MINIDP_CHECK(step < o.steps, "--resume " << path << " is at step " << step << " already and --steps is " << o.steps
                                           << " (--steps counts the total): raise --steps");
}

void Trainer::saveState(const std::string& path, int64_t step) {
  const std::vector<std::pair<std::string, Tensor>> full = optimizer_->checkpointState();  // ZeRO-1: a collective
  distributed::HookState hook = ddp_->hookState();  // per-rank state is gathered: a collective
  // ZeRO-3: checkpointState gathered every unit exactly; they go once the file is written, so the next step
  // gathers them as a run that saved nothing does (in --zero-param-dtype).
  auto* sharded = dynamic_cast<distributed::ShardedOptimizer*>(optimizer_.get());
  if (session_.rank() != 0) {
    if (sharded) sharded->releaseAll();
    return;
  }
  // By name, so the file does not depend on the bucket plan the state was kept in (a re-plan, another cap).
  std::sort(hook.begin(), hook.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, SafeTensor>> state;
  for (const auto& [name, tensor] : full) state.emplace_back(nn::kOptimizerPrefix + name, nn::toSafeTensor(tensor));
  for (const auto& [name, tensor] : hook) state.emplace_back(nn::kCommHookPrefix + name, nn::toSafeTensor(tensor));
  const nlohmann::json meta = {{"format", kStateFormat},
                               {"step", step},
                               {"micro_batches", step * opts_.gradAccum},
                               {"optimizer_steps", optimizer_->stepCount()},
                               {"model", modelDescription(opts_)},
                               {"dtype", nameOf(precisionNames(), opts_.precision)},
                               {"optimizer", optimizerName(opts_)},
                               {"seed", opts_.seed},
                               {"global_batch", opts_.batchSize * session_.world()},
                               {"grad_accum", opts_.gradAccum},
                               {"comm_hook", ddp_->hookSignature()}};
  nn::saveCheckpoint(*model_, path, {{"format", "pt"}, {kStateKey, meta.dump()}}, state);
  if (sharded) sharded->releaseAll();
}

int64_t Trainer::resume(const std::string& path) {
  SafeTensorFile file;
  try {
    file = readSafetensorsHeader(path);
  } catch (const Error& e) {
    throw Error("--resume " + path + ": " + e.what());
  }
  const SavedState state = readState(file, path);  // before anything of the file is read or replayed
  try {
    // ZeRO-3: every unit gathered (a collective) so that the parameters load into them; restoreState keeps
    // this rank's shards.
    if (auto* sharded = dynamic_cast<distributed::ShardedOptimizer*>(optimizer_.get())) sharded->gatherAll();
    file = readSafetensors(path, stateFilter(*model_, state.globalBatch));
    checkStateTensors(file, *model_, *optimizer_, opts_, ddp_->hook(), session_.world(), state.step);
    nn::loadParameters(*model_, file);
    optimizer_->restoreState([&file](const std::string& name) {
      const std::string key = nn::kOptimizerPrefix + name;
      return nn::fromSafeTensor(file.at(key), key);
    });
    ddp_->restoreHookState(
        [&file](const std::string& name) { return storedTensor(file, nn::kCommHookPrefix + name); });
  } catch (const Error& e) {
    throw Error("--resume " + path + ": " + e.what());
  }
  optimizer_->setStepCount(state.optimizerSteps);
  if (copies_) copies_->refresh();  // the parameters came from the file
  batches_->skip(state.microBatches);
  return state.step;
}

}  // namespace minidp::train
