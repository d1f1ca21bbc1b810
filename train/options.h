// The options of a run (train::Options) and their flags (addOptions, addLoopOptions, addSessionOptions,
// addResumeOptions: each flag's range checked where it is registered); the rules between flags are
// usage_rules.h's usageProblem. The programs parse the command line into Options (run_checks.h's
// parseCommandLine), check the usage, then open a session (session.h) and build a Trainer (trainer.h).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/gradient/ddp.h"
#include "framework/distributed/gradient/zero.h"
#include "models/registry.h"
#include "train/schedule.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace minidp::train {

/// --dtype: fp32 or fp64 throughout, or bf16 (fp32 parameters, gradient buckets and optimizer state; bf16
/// activations, CUDA only).
enum class Precision { Fp32, Fp64, Bf16 };
/// --dtype's names.
const std::map<std::string, Precision>& precisionNames();
/// The dtype of the parameters, gradient buckets and optimizer state.
DType parameterDType(Precision precision);
/// The dtype of the activations.
DType computeDType(Precision precision);

/// --data: the dataset a run reads; ModelDefault: the model's (models::ModelEntry::defaultData).
enum class DataSet { ModelDefault, FashionMnist, Fortunes, Llmc };
/// --data's names (and those of ModelEntry::defaultData).
const std::map<std::string, DataSet>& dataSetNames();

/// --device's names.
const std::map<std::string, Device>& deviceNames();
/// --zero-gather's names.
const std::map<std::string, distributed::ZeroGather>& zeroGatherNames();

/// --zero-param-dtype: the dtype ZeRO-3 all-gathers the parameters in, and forward and backward read them in
/// (FSDP2's MixedPrecisionPolicy param_dtype): the parameters' own, or bf16.
enum class ZeroParamDType { Parameters, Bf16 };
/// --zero-param-dtype's names.
const std::map<std::string, ZeroParamDType>& zeroParamDTypeNames();

/// The name of `mode` in a flag's table of names (precisionNames(), ...).
template <typename Mode>
std::string nameOf(const std::map<std::string, Mode>& names, Mode mode) {
  for (const auto& [name, value] : names) {
    if (value == mode) return name;
  }
  return "?";
}

/// Every knob of a run; `addOptions` exposes them as command-line flags.
struct Options {
  std::string model = "mlp";
  DataSet data = DataSet::ModelDefault;
  std::string dataDir = "";
  std::string llmcTrain, llmcVal;
  Device device = Device::CPU;
  Precision precision = Precision::Fp32;  // --dtype
  int64_t steps = 0;                      // 0: the model's default
  int64_t batchSize = 64;                 // per rank
  double lr = 0;                          // 0: the model's default
  std::string optimizer = "";
  double weightDecay = 0;
  uint64_t seed = 1234;
  int64_t logEvery = 100;
  int64_t evalBatches = 20;  // token models; 0: no validation
  // The model's own flags (models::ModelEntry::flags) given on the command line, by name ("layers"); the
  // others take the model's defaults (models::flagValues).
  models::FlagValues modelFlags;
  // The data-parallel settings, typed as DDP takes them (distributed::DdpOptions): the overlap mode, the
  // bucket caps (MiB on the command line, bytes here; 0: auto, chosen by DDP after the first step), the
  // rebuild, the comm hook and its flags, the ZeRO stage (--zero).
  distributed::DdpOptions ddp;
  int64_t gradAccum = 1;
  std::string save, load;
  int64_t sample = 0;
  std::string trace;  // Chrome trace of the last traceSteps steps (bench: of each configuration)
  int64_t traceSteps = 3;
  distributed::CommOptions comm;
  // Precision: --dtype bf16 trains fp32 parameters with bf16 activations; --tf32 runs fp32 GEMMs on TF32.
  bool tf32 = false;
  // --plain-gemms: bf16 GEMMs in minidp's own plain kernel instead of cuBLASLt (for compute-sanitizer).
  bool plainGemms = false;
  // --cast-weights: bf16 forwards cast the fp32 weights every time instead of reading the bf16 copies the
  // optimizer keeps (ops::ComputeCopies): the same bits, slower. (ZeRO-1 always casts.)
  bool castWeights = false;
  // The schedule and clipping (addOptions); periodic validation, metrics, sampling (addLoopOptions).
  LrScheduleKind lrSchedule = LrScheduleKind::Constant;
  int64_t warmupSteps = 0;
  double minLrFrac = 0.1;   // nanoGPT: decay to lr / 10
  double clipGradNorm = 0;  // 0: no clipping
  int64_t evalEvery = 0;    // 0: validation at the end only
  std::string metrics;      // JSON lines, one per logged step
  double peakTflops = 790;  // MFU's reference: the H200's measured bf16 GEMM ceiling
  double temperature = 1;   // sampling; 0: greedy
  int64_t topK = 0;         // sampling; 0: the whole vocabulary
  // ZeRO-1's parameter gather.
  distributed::ZeroGather zeroGather = distributed::ZeroGather::End;
  // ZeRO-3: units gathered ahead of the one computing, and keeping a unit from forward to backward.
  int zeroPrefetch = 1;
  bool zeroKeepGathered = false;
  ZeroParamDType zeroParamDType = ZeroParamDType::Parameters;
  // Robustness (train/run_checks.h, train/train_state.h).
  int64_t saveEvery = 0;     // also write the training state to `save` every N steps
  std::string resume;        // continue the training state in this file
  bool checkFinite = false;  // check the loss every step, not only at log points
  bool skipNonFinite = false;  // skip the update of a step whose gradients are not finite, not stop (nonfinite_steps.h)
  bool verbose = false;      // errors keep their source locations
  // CUDA graphs: after kGraphWarmupSteps eager steps, one step captured and replayed (train/graph_step.cpp).
  bool cudaGraph = false;
  // --sparse-embedding-grad: the model's row-sparse parameter (models::ModelEntry) all-reduced by rows.
  bool sparseEmbeddingGrad = false;
  // What parseCommandLine read (empty in Options built in code): the flags the command line gave, for the
  // rules between flags, and every flag's value as one text ("steps=3" lines), which the ranks compare at
  // start-up (openSession, agreeOnOptions).
  std::set<std::string> givenFlags;
  std::string parsedFlags;

  /// The dataset: --data, or the model's default.
  DataSet dataSet() const;
  /// Token models: the window length, the model's --context (given or its default); 0 for image models.
  int64_t context() const;
  /// Whether the command line gave `flag` ("--zero-gather"), whatever its value.
  bool given(const std::string& flag) const { return givenFlags.count(flag) > 0; }
};

/// An output file a program writes besides those of Options (--save, --metrics, --trace): minidp-bench's --json.
struct OutputFile {
  std::string flag, path;
};
/// The output files of a run: --save, --metrics and --trace where given, then `more`.
std::vector<OutputFile> outputFiles(const Options& opts, const std::vector<OutputFile>& more = {});

/// The model --model names on the command line, read before the flags are registered (which flags there
/// are depends on it); `fallback` when it is not given.
std::string modelFromCommandLine(int argc, char** argv, const std::string& fallback);
/// The factory arguments of opts.model: the seed, the data's sizes (`inputs` per image and `classes`, or
/// the vocabulary of a token model; the context is the model's), every flag of the model (defaults
/// overridden by opts.modelFlags), the compute dtype and the device of --dtype and --device.
models::ModelArgs modelArgs(const Options& opts, int64_t inputs, int64_t classes);
/// modelArgs with the data's shape known before it is read: an image model's Fashion-MNIST pixels and
/// classes, a token model's vocabulary `vocab` (0 where the text is not read yet).
models::ModelArgs modelArgsBeforeData(const Options& opts, int64_t vocab);

/// Registers the flags of the Trainer and the session (addSessionOptions included), with the flags of the
/// model opts.model names, its defaults in their help (set opts.model first: modelFromCommandLine); another
/// registered model's flag is a usage error naming that model. --help lists every registered model.
void addOptions(CLI::App& app, Options& opts);
/// Registers the flags of minidp-train's loop around the Trainer (runTraining; minidp-bench has none of
/// them): --overlap, --log-every, --eval-every, --eval-batches, --save, --metrics, --peak-tflops, --sample,
/// --temperature, --top-k.
void addLoopOptions(CLI::App& app, Options& opts);
/// Registers the device and communicator flags (--device, --comm, --nccl-max-ctas, ..., --watchdog-s).
void addSessionOptions(CLI::App& app, Options& opts);

/// Steps and batches a run may count to: beyond any run on one machine's clock.
inline constexpr long double kMaxCount = 1e9L;
/// The one check of a number flag, added where the flag is registered with `->transform(...)` (so that it
/// runs before CLI11 converts the text): a finite number, a whole one when `integer`, in [lo, hi], or
/// (lo, hi] when `openBelow`; NaN, infinities and text are refused. An integer is rewritten in decimal,
/// so "1e9" reads as 1000000000. --help shows the range as the messages do, in short numbers.
CLI::Validator numberIn(long double lo, long double hi, bool integer, bool openBelow = false);
/// The check of a bucket cap flag (the bucket and first-bucket caps): MB in (0, 1e6] holding at least one
/// byte, or with `orAuto` the word "auto", rewritten as 0.
CLI::Validator bucketMb(bool orAuto);
/// The check of a file or folder flag: not empty, no control characters, within PATH_MAX and NAME_MAX
/// (pathTextProblem).
CLI::Validator nonEmptyPath();
/// minidp-train's own flags: --save-every, --resume, --check-finite, --skip-nonfinite.
void addResumeOptions(CLI::App& app, Options& opts);
/// After `app` parsed: the flags given (CLI11's count) into opts.givenFlags, every configurable flag's value
/// (CLI11's config_to_str, defaults included) into opts.parsedFlags.
void recordParsedFlags(const CLI::App& app, Options& opts);

/// A number as --help's ranges and the messages print it: 6 significant digits, or every digit of a whole
/// number that 6 cannot hold.
std::string shortNumber(long double v);

}  // namespace minidp::train
