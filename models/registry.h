// The model registry: name -> factory, with the data the model reads, its training defaults and how a run
// scores it. minidp-train's --model picks from it; a program registers its own models before calling
// train::runTraining (docs/extending.md). mlp and gpt are registered on first use.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace minidp::models {

/// What a model reads: Images gives float (B, pixels) inputs and int32 (B) labels (fashion-mnist);
/// Tokens gives int32 (B, T) windows and their next tokens (B, T) as targets (fortunes, llmc).
enum class DataKind { Images, Tokens };

/// How a run scores the trained model: Accuracy (share of argmax(logits) equal to the target, on the
/// test split) or MeanLoss (mean cross-entropy over the validation batches, nats per token).
enum class Evaluation { Accuracy, MeanLoss };

/// What a factory gets: sizes fixed by the data, and the size flags of the command line.
struct ModelArgs {
  uint64_t seed = 0;
  int64_t inputs = 0;                       // Images: pixels per image; Tokens: 0
  int64_t classes = 0;                      // Images: number of labels; Tokens: vocabulary size
  int64_t context = 0;                      // Tokens: window length (--context); Images: 0
  std::vector<int64_t> hidden;              // --hidden
  int64_t layers = 0, heads = 0, embd = 0;  // --layers, --heads, --embd
  DType compute = DType::F32;               // activations: F32, or BF16 for mixed precision (--dtype bf16)
  bool fp32Residual = false;                // GPT under mixed precision: the residual stream in fp32 (--residual)
};

/// One registered model.
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
  /// Builds the model on the CPU in float32 (the trainer moves and converts it).
  std::function<std::unique_ptr<Model>(const ModelArgs&)> make;
};

/// Adds (or replaces) the model `name`.
void registerModel(const std::string& name, ModelEntry entry);
/// The entry of `name`; an error listing the registered names when there is none.
const ModelEntry& findModel(const std::string& name);
/// Whether `name` is registered.
bool hasModel(const std::string& name);
/// The registered names, sorted.
std::vector<std::string> registeredModels();

}  // namespace minidp::models
