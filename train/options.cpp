#include "train/options.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "data/fashion_mnist.h"
#include "framework/distributed/gradient/comm_hook.h"
#include "models/registry.h"
#include "train/errors.h"
#include "train/path_text.h"

namespace minidp::train {

std::string shortNumber(long double v) {
  std::ostringstream os;
  os.precision(6);
  os << static_cast<double>(v);
  // A whole bound %g cannot hold (2^64 - 1) prints in full: a range must read back as itself.
  if (v == std::floor(v) && std::fabs(v) < 1e20L && std::strtold(os.str().c_str(), nullptr) != v) {
    return v < 0 ? std::to_string(static_cast<long long>(v)) : std::to_string(static_cast<unsigned long long>(v));
  }
  return os.str();
}

namespace {

/// A cap in bytes as the flags spell it (MiB, e.g. "25"), for --help's defaults.
std::string mibText(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", distributed::bytesToMib(bytes));
  return text;
}

const char* flagType(models::FlagKind kind) {
  switch (kind) {
    case models::FlagKind::Integer: return "INT";
    case models::FlagKind::Integers: return "INT";  // CLI11 adds " ..."
    case models::FlagKind::Number: return "FLOAT";
    case models::FlagKind::Text: return "TEXT";
  }
  return "TEXT";
}

/// What --help shows a declared flag takes, as the number flags show it: "[1, 1024]", "(0, 1]", "{fp32,bf16}".
std::string allowedValues(const Flag& flag) {
  if (flag.kind != FlagKind::Text) {
    return (flag.aboveMin ? "(" : "[") + shortNumber(flag.min) + ", " + shortNumber(flag.max) + "]";
  }
  std::string words;
  for (const std::string& c : flag.choices) words += (words.empty() ? "" : ",") + c;
  return words.empty() ? "" : "{" + words + "}";
}

/// Declared flags (a model's, a comm hook's) under `group` in --help, their defaults shown, each checked against
/// its declaration as it is parsed; the values given go to `target`.
void addDeclaredFlags(CLI::App& app, const std::vector<Flag>& flags, FlagValues& target, const std::string& group) {
  for (const Flag& flag : flags) {
    CLI::Option* option = app.add_option_function<std::vector<std::string>>(
        "--" + flag.name,
        [&target, name = flag.name](const std::vector<std::string>& values) {
          std::string joined;
          for (const std::string& v : values) joined += (joined.empty() ? "" : " ") + v;
          target.set(name, joined);
        },
        flag.help);
    option->type_name(flagType(flag.kind))->default_str(flag.defaultValue)->group(group);
    if (flag.kind == models::FlagKind::Integers) {
      option->expected(1, -1);
    } else {
      option->expected(1);
    }
    option->check(CLI::Validator(
        [flag](std::string& value) -> std::string {
          try {
            models::canonicalFlagValue(flag, value);
            return {};
          } catch (const Error& e) {  // CLI11 names the flag: "--heads: must be ..."
            const std::string message = userMessage(e.what(), false), name = "--" + flag.name + " ";
            return message.rfind(name, 0) == 0 ? message.substr(name.size()) : message;
          }
        },
        allowedValues(flag)));
  }
}

/// The flags of the model `name` (its defaults shown), then, hidden, a usage error for every flag that only
/// other registered models have.
void addModelOptions(CLI::App& app, Options& o, const std::string& name) {
  addDeclaredFlags(app, models::findModel(name).flags, o.modelFlags, "Model " + name);
  std::map<std::string, std::vector<std::string>> others;  // flag -> the models that have it
  for (const std::string& other : models::registeredModels()) {
    if (other == name) continue;
    for (const models::ModelFlag& flag : models::findModel(other).flags) others["--" + flag.name].push_back(other);
  }
  for (const auto& [flag, owners] : others) {
    if (app.get_option_no_throw(flag) != nullptr) continue;  // this model's, or one of the trainer's
    std::string list;
    for (size_t i = 0; i < owners.size(); ++i)
      list += (i == 0 ? "" : i + 1 == owners.size() ? " or " : ", ") + owners[i];
    app.add_option_function<std::vector<std::string>>(
           flag,
           [flag, list, name](const std::vector<std::string>&) {
             throw CLI::ValidationError(flag + " is a flag of --model " + list + ", not of --model " + name);
           },
           "")
        ->expected(0, -1)
        ->group("");
  }
}

/// A flag whose value is one name of `modes`, kept as its enum in `target` (names only, not the enum's numbers).
/// The parsed value stays the name: what config_to_str gives agreeOnOptions to compare and print.
template <typename Mode>
CLI::Option* addModeOption(CLI::App& app, const std::string& flag, Mode& target,
                           const std::map<std::string, Mode>& modes, const std::string& help, const char* current) {
  return app
      .add_option_function<std::string>(
          flag, [&target, modes](const std::string& name) { target = modes.at(name); }, help)
      ->check(CLI::IsMember(modes))
      ->type_name("TEXT")
      ->default_str(current);
}

/// A number flag: its range checked as it is parsed (numberIn's arguments after the help), its default shown.
template <typename T>
CLI::Option* addNumber(CLI::App& app, const std::string& flag, T& target, const std::string& help, long double lo,
                       long double hi, bool integer, bool openBelow = false) {
  return app.add_option(flag, target, help)->transform(numberIn(lo, hi, integer, openBelow))->capture_default_str();
}

/// --help's list of the registered models and their flags.
std::string modelsHelp() {
  std::string text = "Models (--model NAME; --model NAME --help shows its flags and defaults):\n";
  for (const std::string& name : models::registeredModels()) {
    const models::ModelEntry& entry = models::findModel(name);
    text += "  " + name + ": " + entry.description + "\n   ";
    for (const models::ModelFlag& flag : entry.flags) text += " --" + flag.name;
    text += "\n";
  }
  return text;
}

}  // namespace

const std::map<std::string, Precision>& precisionNames() {
  static const std::map<std::string, Precision> names = {
      {"fp32", Precision::Fp32}, {"fp64", Precision::Fp64}, {"bf16", Precision::Bf16}};
  return names;
}

DType parameterDType(Precision precision) { return precision == Precision::Fp64 ? DType::F64 : DType::F32; }

DType computeDType(Precision precision) {
  return precision == Precision::Bf16 ? DType::BF16 : parameterDType(precision);
}

const std::map<std::string, DataSet>& dataSetNames() {
  static const std::map<std::string, DataSet> names = {
      {"fashion-mnist", DataSet::FashionMnist}, {"fortunes", DataSet::Fortunes}, {"llmc", DataSet::Llmc}};
  return names;
}

const std::map<std::string, Device>& deviceNames() {
  static const std::map<std::string, Device> names = {{"cpu", Device::CPU}, {"cuda", Device::CUDA}};
  return names;
}

const std::map<std::string, distributed::ZeroGather>& zeroGatherNames() {
  static const std::map<std::string, distributed::ZeroGather> names = {{"end", distributed::ZeroGather::End},
                                                                       {"overlap", distributed::ZeroGather::Overlap},
                                                                       {"forward", distributed::ZeroGather::Forward}};
  return names;
}

const std::map<std::string, ZeroParamDType>& zeroParamDTypeNames() {
  static const std::map<std::string, ZeroParamDType> names = {{"param", ZeroParamDType::Parameters},
                                                              {"bf16", ZeroParamDType::Bf16}};
  return names;
}

DataSet Options::dataSet() const {
  if (data != DataSet::ModelDefault) return data;
  const std::string& name = models::findModel(model).defaultData;
  const auto it = dataSetNames().find(name);
  MINIDP_CHECK(it != dataSetNames().end(), "model " << model << "'s default data '" << name << "' is no --data");
  return it->second;
}

int64_t Options::context() const {
  const models::ModelEntry& entry = models::findModel(model);
  if (entry.data != models::DataKind::Tokens) return 0;
  return models::flagValues(model, entry, modelFlags).integer("context");
}

std::string modelFromCommandLine(int argc, char** argv, const std::string& fallback) {
  CLI::App pre;
  pre.allow_extras();
  pre.set_help_flag();
  std::string model = fallback;
  pre.add_option("--model", model);
  try {
    pre.parse(argc, argv);
  } catch (const CLI::ParseError&) {
    return fallback;  // the full parse reports it
  }
  return model;
}

models::ModelArgs modelArgs(const Options& o, int64_t inputs, int64_t classes) {
  const models::ModelEntry& entry = models::findModel(o.model);
  models::ModelArgs args;
  args.seed = o.seed;
  args.inputs = inputs;
  args.classes = classes;
  args.flags = models::flagValues(o.model, entry, o.modelFlags);
  if (entry.data == models::DataKind::Tokens) args.context = args.flags.integer("context");
  args.compute = computeDType(o.precision);
  args.device = o.device;
  return args;
}

models::ModelArgs modelArgsBeforeData(const Options& o, int64_t vocab) {
  if (models::findModel(o.model).data == models::DataKind::Tokens) return modelArgs(o, 0, vocab);
  return modelArgs(o, kFashionMnistPixels, kFashionMnistClasses);
}

void addOptions(CLI::App& app, Options& o) {
  const bool known = models::hasModel(o.model);  // else the parse reports --model
  const models::ModelEntry* entry = known ? &models::findModel(o.model) : nullptr;
  const auto modelDefault = [&](const std::string& text) { return known ? " (" + o.model + ": " + text + ")" : ""; };
  std::ostringstream lrText;
  if (known) lrText << entry->defaultLr;
  app.add_option("--model", o.model, "Model to train: a name of the model registry (listed below)")
      ->check(CLI::Validator([](std::string& name) { return models::hasModel(name) ? "" : "unknown model " + name; },
                             "MODEL"))
      ->capture_default_str();
  addModeOption(app, "--data", o.data, dataSetNames(),
                "Dataset: fashion-mnist (image models), fortunes or llmc (token models); default: the model's" +
                    modelDefault(known ? entry->defaultData : ""),
                "");
  app.add_option("--data-dir", o.dataDir, "Dataset folder (default: the Debian package's folder)")
      ->transform(nonEmptyPath());
  app.add_option("--llmc-train", o.llmcTrain, "llm.c token file for training (--data llmc)")->transform(nonEmptyPath());
  app.add_option("--llmc-val", o.llmcVal, "llm.c token file for validation (--data llmc)")->transform(nonEmptyPath());
  addModeOption(app, "--dtype", o.precision, precisionNames(),
                "Precision: fp32, fp64, or bf16 (fp32 parameters, bf16 activations; CUDA)",
                nameOf(precisionNames(), o.precision).c_str());
  app.add_flag("--tf32", o.tf32, "CUDA fp32 GEMMs on TF32 tensor cores (default: exact fp32)");
  app.add_flag("--plain-gemms", o.plainGemms,
               "bf16 GEMMs in a slow plain kernel of minidp's own instead of cuBLASLt, for compute-sanitizer's "
               "initcheck (which does not see cuBLASLt's writes)");
  app.add_flag("--cast-weights", o.castWeights,
               "bf16: cast the fp32 weights in every forward instead of keeping bf16 copies that the optimizer "
               "updates (the same bits, slower; --zero 1 and 2 always cast)");
  app.add_option("--steps", o.steps,
                 "Optimizer steps (0: the model's default" +
                     modelDefault(known ? std::to_string(entry->defaultSteps) : "") + ")")
      ->transform(numberIn(0, kMaxCount, true))
      ->capture_default_str();
  addNumber(app, "--batch-size", o.batchSize, "Samples per rank per micro-batch (global batch = this x ranks)", 1, 1e7L,
            true);
  app.add_option("--lr", o.lr, "Learning rate (default: the model's" + modelDefault(lrText.str()) + ")")
      ->transform(numberIn(0, 1e6L, false, true))
      ->default_str("");
  app.add_option(
         "--optimizer", o.optimizer,
         "sgd (momentum 0.9) or adamw; default: the model's" + modelDefault(known ? entry->defaultOptimizer : ""))
      ->check(CLI::IsMember({"sgd", "adamw"}));
  addNumber(app, "--weight-decay", o.weightDecay, "Weight decay", 0, 1e6L, false);
  addNumber(app, "--seed", o.seed, "Seed of initialisation and data order", 0, 18446744073709551615.0L, true);
  // The DDP options, typed at the flags: MiB converted to bytes here, once (the overlap mode: addLoopOptions).
  app.add_option_function<double>(
         "--bucket-mb", [&o](double mb) { o.ddp.bucketCapBytes = distributed::mibToBytes(mb); },
         "Gradient bucket cap (MB), or auto: chosen after the first step from the measured link and backward")
      ->transform(bucketMb(true))
      ->default_str(mibText(o.ddp.bucketCapBytes));
  app.add_option_function<double>(
         "--first-bucket-mb", [&o](double mb) { o.ddp.firstBucketCapBytes = distributed::mibToBytes(mb); },
         "Cap of the first bucket launched (MB)")
      ->transform(bucketMb(false))
      ->default_str(mibText(o.ddp.firstBucketCapBytes));
  app.add_flag("--rebuild-buckets", o.ddp.rebuildBuckets,
               "After the first step, re-plan the buckets in rank 0's "
               "observed gradient ready order");
  addNumber(app, "--grad-accum", o.gradAccum, "Micro-batches per step; all-reduce on the last only", 1, 1e6L, true);
  app.add_option("--load", o.load,
                 "Start from the parameters in this safetensors file (F32 or F64, converted to --dtype's "
                 "parameters: bit for bit, or exactly widened from F32; F64 into fp32 rounds to nearest)")
      ->transform(nonEmptyPath());
  app.add_option("--trace", o.trace, "Write a Chrome trace (JSON) of the last --trace-steps steps to this file")
      ->transform(nonEmptyPath());
  addNumber(app, "--trace-steps", o.traceSteps, "Steps in the trace", 1, 1e6L, true);
  app.add_option("--comm-hook", o.ddp.commHook.name, distributed::commHookHelp())
      ->check(CLI::IsMember(distributed::commHookNames()))
      ->capture_default_str();
  for (const distributed::CommHookEntry& hook : distributed::commHooks()) {
    addDeclaredFlags(app, hook.flags, o.ddp.commHook.flags, "Comm hook " + hook.name);
  }
  app.add_option("--zero", o.ddp.zeroStage,
                 "ZeRO stage: 0 all-reduces gradients; 1 reduce-scatters them and shards the "
                 "optimizer state; 2 also keeps only this rank's shard of the gradients (each bucket "
                 "reduce-scattered from a reused scratch buffer as soon as it is complete); 3 also shards the "
                 "parameters, each unit (a block) all-gathered before its forward and again before its backward "
                 "and freed after use")
      ->check(CLI::IsMember({0, 1, 2, 3}))
      ->capture_default_str();
  addModeOption(app, "--zero-gather", o.zeroGather, zeroGatherNames(),
                "ZeRO-1/2 parameter all-gather: end (after every shard's update), "
                "overlap (bucket by bucket, as each shard is updated) or forward (as overlap, in the "
                "forward's order; each parameter waits for its gather where the next forward reads it)",
                nameOf(zeroGatherNames(), o.zeroGather).c_str());
  addNumber(app, "--zero-prefetch", o.zeroPrefetch,
            "ZeRO-3: units whose all-gather is in flight on the comm stream while one computes", 1, 64, true);
  app.add_flag("--zero-keep-gathered", o.zeroKeepGathered,
               "ZeRO-3: keep a unit gathered from its forward to its backward (FSDP2's reshard_after_forward=False): "
               "one gather per unit and step fewer, the memory of the gathered units");
  addModeOption(app, "--zero-param-dtype", o.zeroParamDType, zeroParamDTypeNames(),
                "ZeRO-3: the dtype the parameters are all-gathered in and forward and backward read them in "
                "(FSDP2's param_dtype): param (the parameters' own: DDP's numbers) or bf16 (half fp32's gather "
                "bytes; every parameter rounded to bf16 where it is used, the shards and their update unrounded)",
                nameOf(zeroParamDTypeNames(), o.zeroParamDType).c_str());
  addModeOption(app, "--lr-schedule", o.lrSchedule, lrScheduleNames(),
                "Learning rate after the warm-up: constant, cosine or linear decay", "constant");
  addNumber(app, "--warmup-steps", o.warmupSteps, "Linear warm-up from lr/N to lr over the first N steps", 0, kMaxCount,
            true);
  addNumber(app, "--min-lr-frac", o.minLrFrac, "cosine/linear: decay to lr x this at the last step", 0, 1, false);
  addNumber(app, "--clip-grad-norm", o.clipGradNorm,
            "Clip the global norm of the averaged gradients to this (0: no clipping)", 0, 1e9L, false);
  addSessionOptions(app, o);
  app.add_flag("--cuda-graph", o.cudaGraph,
               "Capture the whole step (forward, backward with its all-reduces, "
               "optimizer) in a CUDA graph after warm-up steps and replay it");
  app.add_flag("--sparse-embedding-grad", o.sparseEmbeddingGrad,
               "Send only the rows of the token embedding's gradient that this rank's tokens touch, "
               "all-gathered (as nn.Embedding(sparse=True) under DDP)" +
                   modelDefault(known && !entry->rowSparseParameter.empty() ? entry->rowSparseParameter : "none"));
  if (known) addModelOptions(app, o, o.model);
  app.footer(modelsHelp());
}

std::vector<OutputFile> outputFiles(const Options& o, const std::vector<OutputFile>& more) {
  std::vector<OutputFile> files;
  for (const std::vector<OutputFile>& part :
       {std::vector<OutputFile>{{"--save", o.save}, {"--metrics", o.metrics}, {"--trace", o.trace}}, more}) {
    for (const OutputFile& file : part) {
      if (!file.path.empty()) files.push_back(file);
    }
  }
  return files;
}

void addLoopOptions(CLI::App& app, Options& o) {
  addModeOption(app, "--overlap", o.ddp.overlap, distributed::overlapModes(),
                "on: all-reduce buckets during backward; off: after it", distributed::overlapName(o.ddp.overlap));
  addNumber(app, "--log-every", o.logEvery, "Print the loss every N steps (synchronises then)", 1, kMaxCount, true);
  addNumber(app, "--eval-every", o.evalEvery, "Validate every N steps (0: at the end only)", 0, kMaxCount, true);
  addNumber(app, "--eval-batches", o.evalBatches, "Validation batches of a token model (0: no validation)", 0, 1e6L,
            true);
  app.add_option("--save", o.save,
                 "Write the parameters (and the training state) to this safetensors file at the end: a new file or "
                 "a regular one, replaced whole")
      ->transform(nonEmptyPath());
  app.add_option("--metrics", o.metrics, "Write one JSON line per logged step to this file (rank 0)")
      ->transform(nonEmptyPath());
  addNumber(app, "--peak-tflops", o.peakTflops, "Per-device peak TFLOP/s for MFU (default: H200 bf16 measured)", 0,
            1e9L, false, true);
  addNumber(app, "--sample", o.sample, "Token models: print this many generated tokens at the end", 0, 1e6L, true);
  addNumber(app, "--temperature", o.temperature, "Sampling temperature (0: greedy)", 0, 1e6L, false);
  addNumber(app, "--top-k", o.topK, "Sample from the K most likely tokens (0: all)", 0, kMaxCount, true);
}

void addSessionOptions(CLI::App& app, Options& o) {
  addModeOption(app, "--device", o.device, deviceNames(), "cpu or cuda", deviceName(o.device));
  app.add_option("--comm", o.comm.backend, distributed::commBackendHelp())
      ->check(CLI::IsMember(distributed::commBackendNames()))
      ->capture_default_str();
  addNumber(app, "--nccl-max-ctas", o.comm.ncclMaxCtas, "NCCL maxCTAs (0: NCCL's default)", 0, 1024, true);
  addNumber(app, "--nccl-min-ctas", o.comm.ncclMinCtas, "NCCL minCTAs (0: NCCL's default; at most --nccl-max-ctas)", 0,
            1024, true);
  addModeOption(app, "--nccl-cta-policy", o.comm.ncclCtaPolicy, distributed::ncclCtaPolicies(),
                "NCCL CTA policy: default (not set: NCCL's own, or NCCL_CTA_POLICY), efficiency (fewest CTAs "
                "for decent bandwidth) or zero (no CTAs where NCCL can: copy engines on symmetric buffers)",
                distributed::ncclCtaPolicyName(o.comm.ncclCtaPolicy));
  addModeOption(app, "--nccl-buffers", o.comm.ncclBuffers, distributed::commBuffersModes(),
                "Gradient bucket (and bf16 wire) buffers: plain (the caching allocator), registered "
                "(ncclMemAlloc + ncclCommRegister) or symmetric (ncclMemAlloc + a symmetric NCCL window)",
                distributed::commBuffersName(o.comm.ncclBuffers));
  app.add_flag("!--no-comm-priority", o.comm.commHighPriority, "Create the comm stream at default priority");
  // The link model's ranges: at least two ranks to move anything; from 1 MB/s to 100 TB/s; at most a second a
  // collective (beyond them the modelled times overflow or dwarf any step).
  addNumber(app, "--emulated-world", o.comm.emulatedWorld, "Emulated link: ranks modelled", 2, 1e5L, true);
  addNumber(app, "--emulated-gbps", o.comm.emulatedGBps, "Emulated link: bandwidth, GB/s", 1e-3L, 1e5L, false);
  addNumber(app, "--emulated-latency-us", o.comm.emulatedLatencyUs, "Emulated link: latency, us", 0, 1e6L, false);
  addNumber(app, "--gpu", o.comm.gpu, "CUDA device of this rank (-1: node-local rank modulo the visible devices)", -1,
            1e4L, true)
      ->configurable(false);  // each rank's own: not compared across ranks (agreeOnOptions)
  addNumber(app, "--watchdog-s", o.comm.watchdogSeconds, "Abort every rank if a collective takes longer", 0, 1e7L,
            false, true);
  app.add_flag("--verbose", o.verbose, "Errors name the source file and line");
}

CLI::Validator numberIn(long double lo, long double hi, bool integer, bool openBelow) {
  const std::string range = (openBelow ? "(" : "[") + shortNumber(lo) + ", " + shortNumber(hi) + "]";
  const std::string kind = integer ? "an integer" : "a number";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const long double v = std::strtold(text.c_str(), &end);
        const bool parsed = !text.empty() && end != text.c_str() && *end == '\0' && std::isfinite(v);
        if (!parsed || (integer && v != std::floor(v)))
          return "must be " + kind + " in " + range + ", got '" + text + "'";
        if (v < lo || v > hi || (openBelow && v == lo)) {
          return "must be in " + range + ", got " + (text.size() <= 24 ? text : shortNumber(v));
        }
        // CLI11 reads integers in decimal only: "1e9" becomes "1000000000" (exact: |v| < 2^64 here).
        if (integer)
          text = v < 0 ? std::to_string(static_cast<long long>(v)) : std::to_string(static_cast<unsigned long long>(v));
        return "";
      },
      range);
}

CLI::Validator bucketMb(bool orAuto) {
  const CLI::Validator number = numberIn(0, 1e6L, false, true);
  return CLI::Validator(
      [number, orAuto](std::string& value) -> std::string {
        if (orAuto && value == "auto") {
          value = "0";
          return {};
        }
        const std::string problem = number(value);
        const std::string must = "must be ";
        if (!problem.empty()) return orAuto ? must + "auto or " + problem.substr(must.size()) : problem;
        if (distributed::mibToBytes(std::stod(value)) == 0) return "must hold at least one byte, got " + value + " MB";
        return problem;
      },
      orAuto ? "auto|(0, 1e+06]" : "(0, 1e+06]");
}

CLI::Validator nonEmptyPath() {
  return CLI::Validator([](std::string& text) -> std::string { return pathTextProblem(text); }, "");
}

void addResumeOptions(CLI::App& app, Options& o) {
  addNumber(app, "--save-every", o.saveEvery,
            "Also write the full training state to --save every N steps (0: only at the end)", 0, kMaxCount, true);
  app.add_option("--resume", o.resume,
                 "Continue the run saved in this file (--steps counts the total; not with --load)")
      ->transform(nonEmptyPath());
  app.add_flag("--check-finite", o.checkFinite,
               "Check the loss for NaN/inf every step (synchronises); by default "
               "at --log-every steps");
  app.add_flag("--skip-nonfinite", o.skipNonFinite,
               "A step whose gradient norm is NaN/inf leaves the parameters as they were (checked every step: "
               "synchronises) and is counted in the log; by default it stops the run");
}

void recordParsedFlags(const CLI::App& app, Options& opts) {
  opts.givenFlags.clear();
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() > 0) opts.givenFlags.insert(option->get_name());
  }
  opts.parsedFlags = app.config_to_str(true, false);
}

}  // namespace minidp::train
