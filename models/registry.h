// The model registry: name -> factory, with everything the trainer needs to know of a model: the data it
// reads, its training defaults, its own command-line flags, the refusals and memory estimate checked
// before a run, its FLOPs, how a run scores it and samples from it. train/ asks the entry and names no
// model. minidp-train's --model picks from it; a program registers its own models before calling
// train::runTraining or train::runBench (docs/extending.md). mlp, gpt and llama are registered on first use.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/config/flags.h"
#include "models/model.h"

namespace minidp::models {

/// What a model reads: Images gives float (B, pixels) inputs and int32 (B) labels (fashion-mnist);
/// Tokens gives int32 (B, T) windows and their next tokens (B, T) as targets (fortunes, llmc).
enum class DataKind { Images, Tokens };

/// How a run scores the trained model: Accuracy (share of argmax(logits) equal to the target, on the
/// test split) or MeanLoss (mean cross-entropy over the validation batches, nats per token).
enum class Evaluation { Accuracy, MeanLoss };

/// One command-line flag a model brings (config/flags.h). minidp-train and minidp-bench show the flags of the
/// model --model names in --help and parse them; a flag of another model is a usage error that names the model
/// it belongs to.
using ModelFlag = Flag;
using minidp::canonicalFlagValue;
using minidp::FlagKind;
using minidp::FlagValues;

/// What a factory (and the entry's other functions) get: the sizes fixed by the data, the model's flags,
/// and where the run computes.
struct ModelArgs {
  uint64_t seed = 0;
  int64_t inputs = 0;   // Images: pixels per image; Tokens: 0
  int64_t classes = 0;  // Images: number of labels; Tokens: vocabulary size
  int64_t context = 0;  // Tokens: window length (the model's --context flag); Images: 0
  FlagValues flags;     // every flag of the model (ModelEntry::flags): defaults, overridden by the command line
  DType compute = DType::F32;  // activations: F32 or F64, or BF16 for mixed precision (--dtype bf16)
  Device device = Device::CPU;  // where the run trains (factories build on the CPU; the trainer moves it)
};

/// What one rank's model needs in memory, before anything is allocated (train/run_checks.h adds the
/// optimizer state and copies): its parameters, and the activations of one micro-batch.
struct MemoryNeed {
  int64_t parameters = 0;
  double activations = 0;  // elements of the compute dtype: kept for backward, and backward's in flight
  /// The flags that lower the need, besides --batch-size, for the message that refuses a run: "--embd".
  std::vector<std::string> flagsToLower;
};

/// Validation sums of one batch: the loss summed over its items, the items classified right, the items.
/// A run reports loss / count and, for Evaluation::Accuracy, correct / count; summed over batches and ranks.
struct EvalSums {
  double loss = 0, correct = 0, count = 0;
};

/// One registered model. Only `make` is required: registerModel fills the functions left empty with the
/// defaults each names.
struct ModelEntry {
  std::string description;
  DataKind data = DataKind::Images;
  std::string defaultData;  // dataset when --data is not given: fashion-mnist, fortunes or llmc
  Evaluation evaluation = Evaluation::Accuracy;
  int64_t defaultSteps = 1000;           // when --steps is 0
  std::string defaultOptimizer = "sgd";  // when --optimizer is not given: sgd or adamw
  double defaultLr = 0.05;               // when --lr is 0
  /// A (V, C) parameter indexed by the input tokens, whose gradient is zero outside the batch's rows
  /// (--sparse-embedding-grad reduces only those rows); empty: none.
  std::string rowSparseParameter;
  /// The model's own command-line flags, in the order --help lists them. A Tokens model declares an Integer
  /// "context": the length of the windows the trainer cuts from the text.
  std::vector<ModelFlag> flags;
  /// Builds the model on the CPU in float32 (the trainer moves and converts it).
  std::function<std::unique_ptr<Model>(const ModelArgs&)> make;
  /// A run the model cannot do with `args` (its flags, device, compute dtype, and the data's shape: an image
  /// model's pixels and classes; a token model's vocabulary is 0 at the usage check, before the text is read,
  /// and the real one when the trainer checks again after reading it), as one line naming the flags; empty
  /// when it can. Checked before any work (a usage error). Default: none refused.
  std::function<std::string(const ModelArgs&)> refuse;
  /// The memory of a run with micro-batches of `batch` rows (train/run_checks.cpp). Default: the
  /// parameters of the model built from `args`, no activations.
  std::function<MemoryNeed(const ModelArgs&, int64_t batch)> memory;
  /// Model FLOPs of one training step per item (token or sample) for MFU. Default: 6 x parameters.
  std::function<double(const ModelArgs&, const Model&)> flopsPerItem;
  /// Validation of one batch. Default by `evaluation`: Accuracy runs forward and counts argmax == target
  /// (loss: cross-entropy times rows); MeanLoss takes loss() as one item.
  std::function<EvalSums(const Model&, const Tensor& inputs, const Tensor& targets)> score;
  /// Sampling: the logits (V) of the token after `window`, int32 (1, t) with t <= context. Default for a
  /// Tokens model: the last row of forward(window); empty: the model cannot sample (--sample is refused).
  std::function<Tensor(const Model&, const Tensor& window)> nextTokenLogits;
};

/// Every flag of `entry` (the model `model`): its default, or the canonical form of `given`'s value. A
/// name in `given` that the model does not declare is an error naming the model.
FlagValues flagValues(const std::string& model, const ModelEntry& entry, const FlagValues& given);

/// Adds (or replaces) the model `name`, filling the entry's functions left empty with their defaults. An
/// error for an entry without a factory, with two flags of one name, or reading tokens without an Integer
/// flag "context".
void registerModel(const std::string& name, ModelEntry entry);
/// The entry of `name`; an error listing the registered names when there is none.
const ModelEntry& findModel(const std::string& name);
/// Whether `name` is registered.
bool hasModel(const std::string& name);
/// The registered names, sorted.
std::vector<std::string> registeredModels();

}  // namespace minidp::models
