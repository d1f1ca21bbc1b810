#include "train/trainer.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "framework/distributed/job/launcher.h"
#include "framework/nn/checkpoint.h"
#include "framework/ops/ops.h"
#include "framework/tensor/tensor_math.h"
#include "framework/runtime/device.h"
#include "models/registry.h"
#include "train/run_checks.h"
#include "train/sampling.h"

namespace minidp::train {

namespace fs = std::filesystem;

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

/// The flags of the model `name` (its defaults shown), then, hidden, a usage error for every flag that only
/// other registered models have.
void addModelOptions(CLI::App& app, Options& o, const std::string& name) {
  const models::ModelEntry& entry = models::findModel(name);
  for (const models::ModelFlag& flag : entry.flags) {
    CLI::Option* option = app.add_option_function<std::vector<std::string>>(
        "--" + flag.name,
        [&o, name = flag.name](const std::vector<std::string>& values) {
          std::string joined;
          for (const std::string& v : values) joined += (joined.empty() ? "" : " ") + v;
          o.modelFlags.set(name, joined);
        },
        flag.help);
    option->type_name(flagType(flag.kind))->default_str(flag.defaultValue)->group("Model " + name);
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
        ""));
  }
  std::map<std::string, std::vector<std::string>> others;  // flag -> the models that have it
  for (const std::string& other : models::registeredModels()) {
    if (other == name) continue;
    for (const models::ModelFlag& flag : models::findModel(other).flags) others["--" + flag.name].push_back(other);
  }
  for (const auto& [flag, owners] : others) {
    if (app.get_option_no_throw(flag) != nullptr) continue;  // this model's, or one of the trainer's
    std::string list;
    for (size_t i = 0; i < owners.size(); ++i) list += (i == 0 ? "" : i + 1 == owners.size() ? " or " : ", ") + owners[i];
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
  args.compute = o.dtype == "bf16" ? DType::BF16 : o.dtype == "fp64" ? DType::F64 : DType::F32;
  args.device = o.device == "cuda" ? Device::CUDA : Device::CPU;
  return args;
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
  app.add_option("--data", o.data,
                 "Dataset: fashion-mnist (image models), fortunes or llmc (token models); default: the model's" +
                     modelDefault(known ? entry->defaultData : ""))
      ->check(CLI::IsMember({"fashion-mnist", "fortunes", "llmc"}));
  app.add_option("--data-dir", o.dataDir, "Dataset folder (default: the Debian package's folder)")
      ->transform(nonEmptyPath());
  app.add_option("--llmc-train", o.llmcTrain, "llm.c token file for training (--data llmc)")->transform(nonEmptyPath());
  app.add_option("--llmc-val", o.llmcVal, "llm.c token file for validation (--data llmc)")->transform(nonEmptyPath());
  app.add_option("--dtype", o.dtype, "Precision: fp32, fp64, or bf16 (fp32 parameters, bf16 activations; CUDA)")
      ->check(CLI::IsMember({"fp32", "fp64", "bf16"}))
      ->capture_default_str();
  app.add_flag("--tf32", o.tf32, "CUDA fp32 GEMMs on TF32 tensor cores (default: exact fp32)");
  app.add_flag("--plain-gemms", o.plainGemms,
               "bf16 GEMMs in a slow plain kernel of minidp's own instead of cuBLASLt, for compute-sanitizer's "
               "initcheck (which does not see cuBLASLt's writes)");
  app.add_flag("--cast-weights", o.castWeights,
               "bf16: cast the fp32 weights in every forward instead of keeping bf16 copies that the optimizer "
               "updates (the same bits, slower; --zero 1 and 2 always cast)");
  app.add_option("--steps", o.steps,
                 "Optimizer steps (0: the model's default" + modelDefault(known ? std::to_string(entry->defaultSteps) : "") + ")")
      ->transform(numberIn(0, kMaxCount, true))
      ->capture_default_str();
  app.add_option("--batch-size", o.batchSize, "Samples per rank per micro-batch (global batch = this x ranks)")
      ->transform(numberIn(1, 1e7L, true))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Learning rate (default: the model's" + modelDefault(lrText.str()) + ")")
      ->transform(numberIn(0, 1e6L, false, true))
      ->default_str("");
  app.add_option("--optimizer", o.optimizer,
                 "sgd (momentum 0.9) or adamw; default: the model's" + modelDefault(known ? entry->defaultOptimizer : ""))
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--weight-decay", o.weightDecay, "Weight decay")
      ->transform(numberIn(0, 1e6L, false))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of initialisation and data order")
      ->transform(numberIn(0, 18446744073709551615.0L, true))
      ->capture_default_str();
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
  app.add_option("--grad-accum", o.gradAccum, "Micro-batches per step; all-reduce on the last only")
      ->transform(numberIn(1, 1e6L, true))
      ->capture_default_str();
  app.add_option("--load", o.load,
                 "Start from the parameters in this safetensors file (F32 or F64, converted to --dtype's "
                 "parameters: bit for bit, or exactly widened from F32; F64 into fp32 rounds to nearest)")
      ->transform(nonEmptyPath());
  app.add_option("--trace", o.trace, "Write a Chrome trace (JSON) of the last --trace-steps steps to this file")
      ->transform(nonEmptyPath());
  app.add_option("--trace-steps", o.traceSteps, "Steps in the trace")
      ->transform(numberIn(1, 1e6L, true))
      ->capture_default_str();
  app.add_option("--comm-hook", o.ddp.commHook.name, distributed::commHookHelp())
      ->check(CLI::IsMember(distributed::commHookNames()))
      ->capture_default_str();
  app.add_option("--powersgd-rank", o.ddp.commHook.powersgdRank, "--comm-hook powersgd: rank of the approximation")
      ->transform(numberIn(1, 1024, true))
      ->capture_default_str();
  app.add_option("--powersgd-start-iter", o.ddp.commHook.powersgdStartIter,
                 "--comm-hook powersgd: steps averaged uncompressed before compression starts")
      ->transform(numberIn(0, kMaxCount, true))
      ->capture_default_str();
  app.add_option("--zero", o.zero,
                 "ZeRO stage: 0 all-reduces gradients; 1 reduce-scatters them and shards the "
                 "optimizer state; 2 also keeps only this rank's shard of the gradients (each bucket "
                 "reduce-scattered from a reused scratch buffer as soon as it is complete); 3 also shards the "
                 "parameters, each unit (a block) all-gathered before its forward and again before its backward "
                 "and freed after use")
      ->check(CLI::IsMember({0, 1, 2, 3}))
      ->capture_default_str();
  app.add_option("--zero-gather", o.zeroGather,
                 "ZeRO-1/2 parameter all-gather: end (after every shard's update), "
                 "overlap (bucket by bucket, as each shard is updated) or forward (as overlap, in the "
                 "forward's order; each parameter waits for its gather where the next forward reads it)")
      ->check(CLI::IsMember({"end", "overlap", "forward"}))
      ->capture_default_str();
  app.add_option("--zero-prefetch", o.zeroPrefetch,
                 "ZeRO-3: units whose all-gather is in flight on the comm stream while one computes")
      ->transform(numberIn(1, 64, true))
      ->capture_default_str();
  app.add_flag("--zero-keep-gathered", o.zeroKeepGathered,
               "ZeRO-3: keep a unit gathered from its forward to its backward (FSDP2's reshard_after_forward=False): "
               "one gather per unit and step fewer, the memory of the gathered units");
  addModeOption(app, "--lr-schedule", o.lrSchedule, lrScheduleNames(),
                "Learning rate after the warm-up: constant, cosine or linear decay", "constant");
  app.add_option("--warmup-steps", o.warmupSteps, "Linear warm-up from lr/N to lr over the first N steps")
      ->transform(numberIn(0, kMaxCount, true))
      ->capture_default_str();
  app.add_option("--min-lr-frac", o.minLrFrac, "cosine/linear: decay to lr x this at the last step")
      ->transform(numberIn(0, 1, false))
      ->capture_default_str();
  app.add_option("--clip-grad-norm", o.clipGradNorm,
                 "Clip the global norm of the averaged gradients to this "
                 "(0: no clipping)")
      ->transform(numberIn(0, 1e9L, false))
      ->capture_default_str();
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

namespace {

/// --sparse-embedding-grad's refusals, as one line; empty when there is none.
std::string sparseUsageProblem(const Options& o) {
  if (!o.sparseEmbeddingGrad) return {};
  if (models::findModel(o.model).rowSparseParameter.empty())
    return "--sparse-embedding-grad: model " + o.model + " has no parameter indexed by its input tokens";
  if (o.zero != 0)
    return "--sparse-embedding-grad with --zero " + std::to_string(o.zero) +
           " is not supported (rows are all-reduced, not sharded)";
  if (o.cudaGraph) return "--sparse-embedding-grad with --cuda-graph is not supported (the row ids are not captured)";
  return {};
}

/// --comm-hook's refusals (the chosen hook's registry entry), as one line; empty when there is none.
std::string hookUsageProblem(const Options& o) {
  distributed::HookUsage usage;
  usage.zeroStage = o.zero;
  usage.cudaGraph = o.cudaGraph;
  usage.gradDType = o.dtype == "fp64" ? DType::F64 : DType::F32;  // --dtype bf16: fp32 parameters and gradients
  usage.device = o.device == "cuda" ? Device::CUDA : Device::CPU;
  usage.rowSparse = o.sparseEmbeddingGrad;
  return distributed::findCommHook(o.ddp.commHook.name).usageProblem(usage);
}

/// The communicator flags' refusals, as one line; empty when there is none: the backend's own
/// (commSettingsProblem: the device, NCCL's settings), then a backend's flags, given at any value or set, on
/// another backend. The communicator is resolved as makeCommunicator will (the launcher's world size; an
/// unknown one counts as several ranks), which checks again with the real one.
std::string commUsageProblem(const Options& o) {
  distributed::CommOptions comm = o.comm;
  comm.cuda = o.device == "cuda";
  if (comm.ncclBuffers != distributed::CommBuffers::Plain && o.zero != 0)
    return std::string("--nccl-buffers ") + distributed::commBuffersName(comm.ncclBuffers) +
           " with --zero " + std::to_string(o.zero) +
           " is not supported (its in-place reduce-scatter and all-gather address each rank's "
           "shard at another offset; registered and symmetric NCCL buffers want the same offset on every rank)";
  const distributed::LaunchInfo launch = distributed::detectLauncher();
  const int world = !launch.launched() ? 1 : launch.size > 0 ? launch.size : 2;
  const std::string backend = distributed::resolveCommBackend(comm, world, launch.launched());
  if (std::string problem = distributed::commSettingsProblem(comm, backend); !problem.empty()) return problem;
  const distributed::CommOptions defaults;
  struct BackendFlag {
    const char* flag;
    bool set;  // not its default
    std::vector<std::string> backends;
  };
  const BackendFlag flags[] = {
      {"--nccl-max-ctas", comm.ncclMaxCtas != defaults.ncclMaxCtas, {"nccl", "emulated"}},
      {"--nccl-min-ctas", comm.ncclMinCtas != defaults.ncclMinCtas, {"nccl"}},
      {"--nccl-cta-policy", comm.ncclCtaPolicy != defaults.ncclCtaPolicy, {"nccl"}},
      {"--nccl-buffers", comm.ncclBuffers != defaults.ncclBuffers, {"nccl"}},
      {"--emulated-world", comm.emulatedWorld != defaults.emulatedWorld, {"emulated"}},
      {"--emulated-gbps", comm.emulatedGBps != defaults.emulatedGBps, {"emulated"}},
      {"--emulated-latency-us", comm.emulatedLatencyUs != defaults.emulatedLatencyUs, {"emulated"}},
  };
  for (const BackendFlag& f : flags) {
    if (!f.set && !o.given(f.flag)) continue;
    if (std::find(f.backends.begin(), f.backends.end(), backend) != f.backends.end()) continue;
    std::string names;
    for (const std::string& name : f.backends) names += (names.empty() ? "" : " or ") + name;
    return std::string(f.flag) + " is a setting of --comm " + names + "; this run's communicator is " + backend;
  }
  return {};
}

/// Flags given (at any value) where nothing reads them: their files, modes and settings belong to another
/// --data, model, --zero or --comm-hook; periodic validation without validation batches. One line; empty
/// when there is none.
std::string unreadFlagProblem(const Options& o) {
  const models::ModelEntry& entry = models::findModel(o.model);
  const std::string data = o.data.empty() ? entry.defaultData : o.data;
  for (const char* flag : {"--llmc-train", "--llmc-val"}) {
    if (o.given(flag) && data != "llmc")
      return std::string(flag) + " is a file of --data llmc; this run's data is " + data;
  }
  for (const char* flag : {"--sample", "--temperature", "--top-k"}) {
    if (o.given(flag) && !entry.nextTokenLogits)  // the entry's sampling capability
      return std::string(flag) + ": --model " + o.model + " does not generate tokens";
  }
  if (o.given("--zero-gather") && o.zero != 1 && o.zero != 2)
    return "--zero-gather " + o.zeroGather + " gathers ZeRO-1/2's parameter shards: it needs --zero 1 or 2";
  for (const char* flag : {"--zero-prefetch", "--zero-keep-gathered"}) {
    if (o.given(flag) && o.zero != 3) return std::string(flag) + " is a setting of --zero 3";
  }
  for (const char* flag : {"--bucket-mb", "--first-bucket-mb"}) {
    if (o.given(flag) && o.zero == 3)
      return std::string(flag) + " caps the gradient buckets; --zero 3 has one per unit (a block), its gather's";
  }
  for (const char* flag : {"--powersgd-rank", "--powersgd-start-iter"}) {
    if (o.given(flag) && o.ddp.commHook.name != "powersgd")
      return std::string(flag) + " is a setting of --comm-hook powersgd; this run's hook is " + o.ddp.commHook.name;
  }
  if (entry.data == models::DataKind::Tokens && o.evalBatches == 0 && o.evalEvery > 0)
    return "--eval-every " + std::to_string(o.evalEvery) +
           " validates on --eval-batches batches: not with "
           "--eval-batches 0";
  return {};
}

/// Whether `a` and `b` name one file (the same text, or the same place once links and ".." are resolved).
bool sameFile(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code ea, eb;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a), ea), pb = fs::weakly_canonical(fs::absolute(b), eb);
  return !ea && !eb && pa == pb;
}

/// Two outputs of one run written to one file (the later would replace the earlier), as one line.
std::string outputUsageProblem(const Options& o, const std::vector<OutputFile>& more) {
  const std::vector<OutputFile> files = outputFiles(o, more);
  for (size_t i = 0; i < files.size(); ++i) {
    for (size_t j = i + 1; j < files.size(); ++j) {
      if (sameFile(files[i].path, files[j].path))
        return files[i].flag + " and " + files[j].flag + " both write " + files[j].path + ": give each its own file";
    }
  }
  return {};
}

/// The device's rules, before the model's refusals (which take the device as given): bf16 and TF32 are CUDA's.
std::string deviceUsageProblem(const Options& o) {
  if (o.device == "cuda") {
    if (o.plainGemms && o.dtype != "bf16") return "--plain-gemms needs --dtype bf16 (it replaces cuBLASLt's bf16 GEMMs)";
    if (o.castWeights && o.dtype != "bf16")
      return "--cast-weights needs --dtype bf16 (only bf16 forwards cast weights)";
    return {};
  }
  if (o.dtype == "bf16") return "--dtype bf16 needs --device cuda (bf16 kernels are CUDA-only)";
  if (o.tf32) return "--tf32 needs --device cuda (TF32 is a mode of CUDA's fp32 GEMMs)";
  if (o.plainGemms) return "--plain-gemms needs --device cuda (it replaces cuBLASLt's bf16 GEMMs)";
  if (o.castWeights) return "--cast-weights needs --device cuda and --dtype bf16 (only bf16 forwards cast weights)";
  return {};
}

/// The rules between the data, precision, bucket and file flags, as one line; empty when there is none.
std::string runUsageProblem(const Options& o) {
  const models::ModelEntry& entry = models::findModel(o.model);
  const std::string data = o.data.empty() ? entry.defaultData : o.data;
  if (entry.data == models::DataKind::Images && data != "fashion-mnist")
    return "--model " + o.model + " trains on images: --data fashion-mnist, not " + data;
  if (entry.data == models::DataKind::Tokens && data == "fashion-mnist")
    return "--model " + o.model + " trains on tokens: --data fortunes or llmc, not fashion-mnist";
  if (data == "llmc" && (o.llmcTrain.empty() || o.llmcVal.empty()))
    return "--data llmc needs " + std::string(o.llmcTrain.empty() ? "--llmc-train" : "--llmc-val") +
           " FILE (an llm.c .bin token file)";
  if (o.ddp.bucketCapBytes == 0 && (o.zero != 0 || o.ddp.rebuildBuckets))
    return "--bucket-mb auto re-plans after the first step: not with --zero 1, 2 or --rebuild-buckets";
  if (o.saveEvery > 0 && o.save.empty()) return "--save-every needs --save FILE (the file it rewrites)";
  if (!o.resume.empty() && !o.load.empty())
    return "--resume continues a saved run, its parameters included: not with --load";
  return {};
}

}  // namespace

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

std::string usageProblem(const Options& o, const std::vector<OutputFile>& more) {
  if (const std::string device = deviceUsageProblem(o); !device.empty()) return device;
  try {
    const models::ModelArgs args = modelArgs(o, 0, 0);  // no data read yet
    if (std::string refused = models::findModel(o.model).refuse(args); !refused.empty()) return refused;
  } catch (const Error& e) {
    return userMessage(e.what(), false);  // a flag the model does not have, or a value out of its range
  }
  if (const std::string run = runUsageProblem(o); !run.empty()) return run;
  if (const std::string unread = unreadFlagProblem(o); !unread.empty()) return unread;
  if (const std::string sparse = sparseUsageProblem(o); !sparse.empty()) return sparse;
  if (const std::string hook = hookUsageProblem(o); !hook.empty()) return hook;
  if (const std::string comm = commUsageProblem(o); !comm.empty()) return comm;
  if (const std::string outputs = outputUsageProblem(o, more); !outputs.empty()) return outputs;
  if (!o.cudaGraph) return {};
  if (o.device != "cuda") return "--cuda-graph needs --device cuda";
  if (o.gradAccum != 1) return "--cuda-graph captures one micro-batch per step: not with --grad-accum > 1";
  if (o.zero != 0)
    return "--cuda-graph with --zero " + std::to_string(o.zero) +
           " is not supported (the sharded optimizer gathers outside the graph)";
  if (o.comm.backend == "mpi")
    return "--cuda-graph with --comm mpi is not supported (its collectives run on the host, outside the graph)";
  return {};
}

void addLoopOptions(CLI::App& app, Options& o) {
  addModeOption(app, "--overlap", o.ddp.overlap, distributed::overlapModes(),
                "on: all-reduce buckets during backward; off: after it", distributed::overlapName(o.ddp.overlap));
  app.add_option("--log-every", o.logEvery, "Print the loss every N steps (synchronises then)")
      ->transform(numberIn(1, kMaxCount, true))
      ->capture_default_str();
  app.add_option("--eval-every", o.evalEvery, "Validate every N steps (0: at the end only)")
      ->transform(numberIn(0, kMaxCount, true))
      ->capture_default_str();
  app.add_option("--eval-batches", o.evalBatches, "Validation batches of a token model (0: no validation)")
      ->transform(numberIn(0, 1e6L, true))
      ->capture_default_str();
  app.add_option("--save", o.save,
                 "Write the parameters (and the training state) to this safetensors file at the end: a new file or "
                 "a regular one, replaced whole")
      ->transform(nonEmptyPath());
  app.add_option("--metrics", o.metrics, "Write one JSON line per logged step to this file (rank 0)")
      ->transform(nonEmptyPath());
  app.add_option("--peak-tflops", o.peakTflops, "Per-device peak TFLOP/s for MFU (default: H200 bf16 measured)")
      ->transform(numberIn(0, 1e9L, false, true))
      ->capture_default_str();
  app.add_option("--sample", o.sample, "Token models: print this many generated tokens at the end")
      ->transform(numberIn(0, 1e6L, true))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "Sampling temperature (0: greedy)")
      ->transform(numberIn(0, 1e6L, false))
      ->capture_default_str();
  app.add_option("--top-k", o.topK, "Sample from the K most likely tokens (0: all)")
      ->transform(numberIn(0, kMaxCount, true))
      ->capture_default_str();
}

void addSessionOptions(CLI::App& app, Options& o) {
  app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--comm", o.comm.backend, distributed::commBackendHelp())
      ->check(CLI::IsMember(distributed::commBackendNames()))
      ->capture_default_str();
  app.add_option("--nccl-max-ctas", o.comm.ncclMaxCtas, "NCCL maxCTAs (0: NCCL's default)")
      ->transform(numberIn(0, 1024, true))
      ->capture_default_str();
  app.add_option("--nccl-min-ctas", o.comm.ncclMinCtas, "NCCL minCTAs (0: NCCL's default; at most --nccl-max-ctas)")
      ->transform(numberIn(0, 1024, true))
      ->capture_default_str();
  addModeOption(app, "--nccl-cta-policy", o.comm.ncclCtaPolicy, distributed::ncclCtaPolicies(),
                "NCCL CTA policy: default (not set: NCCL's own, or NCCL_CTA_POLICY), efficiency (fewest CTAs "
                "for decent bandwidth) or zero (no CTAs where NCCL can: copy engines on symmetric buffers)",
                distributed::ncclCtaPolicyName(o.comm.ncclCtaPolicy));
  addModeOption(app, "--nccl-buffers", o.comm.ncclBuffers, distributed::commBuffersModes(),
                "Gradient bucket (and bf16 wire) buffers: plain (the caching allocator), registered "
                "(ncclMemAlloc + ncclCommRegister) or symmetric (ncclMemAlloc + a symmetric NCCL window)",
                distributed::commBuffersName(o.comm.ncclBuffers));
  app.add_flag("!--no-comm-priority", o.comm.commHighPriority, "Create the comm stream at default priority");
  app.add_option("--emulated-world", o.comm.emulatedWorld, "Emulated link: ranks modelled")
      ->transform(numberIn(1, 1e6L, true))
      ->capture_default_str();
  app.add_option("--emulated-gbps", o.comm.emulatedGBps, "Emulated link: bandwidth, GB/s")
      ->transform(numberIn(0, 1e6L, false, true))
      ->capture_default_str();
  app.add_option("--emulated-latency-us", o.comm.emulatedLatencyUs, "Emulated link: latency, us")
      ->transform(numberIn(0, 1e9L, false))
      ->capture_default_str();
  app.add_option("--gpu", o.comm.gpu, "CUDA device of this rank (-1: node-local rank modulo the visible devices)")
      ->transform(numberIn(-1, 1e4L, true))
      ->capture_default_str()
      ->configurable(false);  // each rank's own: not compared across ranks (agreeOnOptions)
  app.add_option("--watchdog-s", o.comm.watchdogSeconds, "Abort every rank if a collective takes longer")
      ->transform(numberIn(0, 1e7L, false, true))
      ->capture_default_str();
  app.add_flag("--verbose", o.verbose, "Errors name the source file and line");
}

void openSession(Options& opts, Session& s) {
  if (opts.steps == 0) opts.steps = models::findModel(opts.model).defaultSteps;
  s.device = opts.device == "cuda" ? Device::CUDA : Device::CPU;
  s.dtype = opts.dtype == "fp64" ? DType::F64 : DType::F32;
  s.compute = opts.dtype == "bf16" ? DType::BF16 : s.dtype;
  if (const std::string problem = usageProblem(opts); !problem.empty()) throw Error(problem);  // checkUsage's rules
  ops::setFp32Gemm(opts.tf32 ? ops::Fp32Gemm::Tf32 : ops::Fp32Gemm::Exact);
  ops::setBf16Gemm(opts.plainGemms ? ops::Bf16Gemm::Plain : ops::Bf16Gemm::CublasLt);
  // MPI first: any failure after it (on any rank) ends every rank through runGuarded.
  s.verbose = opts.verbose;
  if (distributed::MpiEnvironment::launchedByMpirun()) {
    s.mpi = std::make_unique<distributed::MpiEnvironment>(opts.comm.watchdogSeconds);
    agreeOnOptions(*s.mpi, opts.parsedFlags);  // before the communicator, whose set-up they may differ in
  }
  if (s.device == Device::CUDA) {
    MINIDP_CHECK(runtime::cudaAvailable(),
                 "--device cuda, but no CUDA device is available (or minidp was built "
                 "without CUDA)");
    runtime::setDevice(
        distributed::selectGpu(opts.comm.gpu, s.mpi ? s.mpi->localRank() : 0, runtime::cudaDeviceCount()));
  }
  opts.comm.cuda = s.device == Device::CUDA;
  s.comm = distributed::makeCommunicator(opts.comm, s.mpi.get());
}

namespace {

std::string defaultDir(const std::string& data) { return data == "fashion-mnist" ? kFashionMnistDir : kFortunesDir; }

/// The step timer as an observer of the reducer: grad-ready marks (detailed steps), and the finalize phase
/// from the moment the waits begin. A captured step (CUDA graph) runs with the timer closed: no marks.
class StepTimerObserver : public distributed::ReducerObserver {
 public:
  explicit StepTimerObserver(runtime::StepTimer& timer) : timer_(timer) {}
  void gradReady(size_t index) override { timer_.markGradReady(index); }
  void waitsBegin() override {
    if (timer_.isOpen()) timer_.phase(runtime::Phase::Finalize);
  }

 private:
  runtime::StepTimer& timer_;
};

}  // namespace

Trainer::Trainer(const Options& o, Session& session)
    : opts_(o), session_(session), timer_(session.device), entry_(models::findModel(o.model)) {
  if (const std::string problem = usageProblem(o); !problem.empty()) throw Error(problem);  // checkUsage's rules
  const models::ModelEntry& entry = entry_;
  const std::string data = o.data.empty() ? entry.defaultData : o.data;
  const std::string dir = o.dataDir.empty() ? defaultDir(data) : o.dataDir;
  const int rank = session.rank(), world = session.world();
  std::unique_ptr<BatchSource> source;
  if (entry.data == models::DataKind::Images) {
    trainImages_ = loadFashionMnist(dir, "train");
    testImages_ = loadFashionMnist(dir, "test");
    args_ = train::modelArgs(o, trainImages_.rows * trainImages_.cols, 10);
    source = imageBatches(trainImages_, o.batchSize, rank, world, o.seed, session.dtype);
  } else {
    corpus_ = data == "llmc" ? loadLlmcTokens(o.llmcTrain, o.llmcVal) : loadFortunes(dir);
    args_ = train::modelArgs(o, 0, std::max<int64_t>(corpus_.vocab, 1));
    source = windowBatches(corpus_.train, o.batchSize, static_cast<int>(args_.context), rank, world, o.seed);
  }
  args_.compute = session.compute;
  args_.device = session.device;
  model_ = entry.make(args_);
  model_->to(session.device, session.dtype);
  // Into the parameters' own dtype: an F64 file keeps every bit in an fp64 run.
  std::string converted;
  try {
    if (!o.load.empty()) converted = nn::loadCheckpoint(*model_, o.load);
  } catch (const Error& e) {
    throw Error("--load " + std::string(e.what()));
  }
  if (!converted.empty() && rank == 0) std::printf("--load %s: %s\n", o.load.c_str(), converted.c_str());
  std::vector<std::string> names;
  for (const auto& [name, p] : model_->namedParameters()) names.push_back(name);
  timer_.setParameterNames(std::move(names));
  distributed::DdpOptions ddpOptions = o.ddp;
  ddpOptions.zeroStage = o.zero;
  ddpOptions.commHook.seed = o.seed;
  if (o.sparseEmbeddingGrad) ddpOptions.rowSparseParameter = entry.rowSparseParameter;
  // --bucket-mb auto: a start plan of 25 MB, re-planned after the first step from the link measured here
  // and that step's backward.
  autoCapPending_ = o.ddp.bucketCapBytes == 0;
  if (autoCapPending_) {
    ddpOptions.bucketCapBytes = distributed::DdpOptions{}.bucketCapBytes;
    link_ = distributed::measureLinkCost(*session.comm, session.device, 256 << 10, 32 << 20, 3);
  }
  bucketCapBytes_ = ddpOptions.bucketCapBytes;
  ddp_ = std::make_unique<distributed::DistributedDataParallel>(model_->namedParameters(), session.comm, ddpOptions);
  ddp_->reducer().subscribe(std::make_shared<StepTimerObserver>(timer_));
  if (o.sparseEmbeddingGrad && rank == 0) {
    std::printf("sparse embedding gradient: %s's rows all-gathered (a bucket of its own)\n",
                entry.rowSparseParameter.c_str());
  }
  const std::string optName = o.optimizer.empty() ? entry.defaultOptimizer : o.optimizer;
  const double lr = o.lr > 0 ? o.lr : entry.defaultLr;
  if (o.zero >= 1) {
    const auto gather = o.zeroGather == "overlap"   ? distributed::ZeroGather::Overlap
                        : o.zeroGather == "forward" ? distributed::ZeroGather::Forward
                                                    : distributed::ZeroGather::End;
    auto sharded = std::make_unique<distributed::ShardedOptimizer>(*ddp_, optName, lr, o.weightDecay, gather,
                                                                   o.zeroPrefetch, o.zeroKeepGathered);
    if (session.rank() == 0) {
      const double bytes = static_cast<double>(dtypeSize(session.dtype));
      std::printf("ZeRO-%d: optimizer state %.2f MB per rank (%.2f MB unsharded), gradients %.2f MB and "
                  "parameters %.2f MB between steps\n",
                  o.zero, sharded->stateElements() * bytes / 1e6, sharded->unshardedStateElements() * bytes / 1e6,
                  ddp_->reducer().gradientElements() * bytes / 1e6, sharded->parameterElements() * bytes / 1e6);
    }
    optimizer_ = std::move(sharded);
  } else {
    optimizer_ = optim::makeOptimizer(optName, model_->namedParameters(), lr, o.weightDecay);
  }
  if (session.compute == DType::BF16 && o.zero == 0 && !o.castWeights) {
    std::vector<Tensor> params;
    for (const Variable& p : model_->parameters()) params.push_back(p.data());
    copies_ = std::make_unique<ops::ComputeCopies>(params);
    optimizer_->setComputeCopies([copies = copies_.get()](const Tensor& param) { return copies->find(param); });
  }
  schedule_ = LrSchedule{o.lrSchedule, lr, o.warmupSteps, o.steps, o.minLrFrac};
  clipper_ = std::make_unique<optim::GradClipper>(o.clipGradNorm, model_->parameters().front().dtype(), session.device);
  if (o.clipGradNorm > 0) optimizer_->setGradScale(clipper_->scale());
  batches_ = std::make_unique<Prefetcher>(std::move(source), session.device);
  batches_->setTimer(&timer_);
}

int64_t Trainer::samplesPerStep() const { return opts_.batchSize * opts_.gradAccum * session_.world(); }

double Trainer::flopsPerItem() const { return entry_.flopsPerItem(args_, *model_); }

Tensor Trainer::step() {
  const ops::ComputeCopies::Installed copies(copies_.get());
  if (opts_.cudaGraph) {
    if (graphWarmup_ == 0) return graphStep();
    --graphWarmup_;
  }
  const bool profiled = autoCapPending_, detailed = timer_.detailed();
  if (profiled) timer_.setDetailed(true);  // per-layer backward spans for the cost model
  timer_.beginStep(runtime::Phase::Forward);
  ddp_->prepareStep();
  Tensor last;
  for (int64_t micro = 0; micro < opts_.gradAccum; ++micro) {
    if (micro > 0) timer_.phase(runtime::Phase::Forward);
    Batch batch = batches_->next();
    ddp_->setRequireSync(micro + 1 == opts_.gradAccum);
    if (opts_.sparseEmbeddingGrad) ddp_->addRowIds(batch.inputs);
    Variable loss = model_->loss(batch.inputs, batch.targets);
    // Micro-batch means, averaged over the step: the gradient equals one batch of gradAccum x batchSize.
    Variable scaled = opts_.gradAccum > 1 ? ops::scale(loss, 1.0 / static_cast<double>(opts_.gradAccum)) : loss;
    timer_.phase(runtime::Phase::Backward);
    scaled.backward();
    last = loss.data();
    timer_.phase(runtime::Phase::Prefetch);
    batches_->prefetch();  // the host gathers the next batch while the device runs this one
  }
  // The finalize phase (opened by StepTimerObserver::waitsBegin) is the compute stream's wait on the buckets,
  // nothing else: exposed communication (and, in the first step with --rebuild-buckets, the rebuild).
  ddp_->finalize();
  if (ddp_->rebuiltLastStep() && session_.rank() == 0) {
    std::printf("bucket plan rebuilt from the observed ready order:\n%s", ddp_->plan().describe().c_str());
  }
  timer_.phase(runtime::Phase::Optimizer);
  // Clipping reads the averaged gradients in the buckets: the same bits, so the same norm, on every rank.
  normMeasured_ = opts_.clipGradNorm > 0;
  if (normMeasured_) computeGradNorm();
  lr_ = schedule_.at(optimizer_->stepCount());
  optimizer_->setLr(lr_);
  optimizer_->step();
  timeBuckets();
  timer_.endStep();
  if (profiled) {
    chooseBucketCap();
    timer_.setDetailed(detailed);
  }
  return last;
}

void Trainer::chooseBucketCap() {
  std::vector<std::string> names;
  for (const distributed::ParamInfo& p : ddp_->parameterInfos()) names.push_back(p.name);
  const distributed::BackwardProfile profile = distributed::profileFromStep(timer_.peek(true).back(), names);
  std::string report;
  const distributed::Reducer& reducer = ddp_->reducer();
  // A bucket costs what its hook puts on the link (bf16: half the bytes; PowerSGD: its factors, in two
  // collectives).
  std::vector<Shape> shapes;
  for (const auto& [name, param] : ddp_->parameters()) shapes.push_back(param.data().shape());
  const distributed::CommHook& hook = reducer.hook();
  int rowParam = -1;
  distributed::WireCost rowCost;
  if (const int row = ddp_->rowBucket(); row >= 0) {
    // The row gather of the first step: each rank's rows (in the wire's dtype) all-gathered, the (world - 1) x
    // rows that an all-reduce of world / 2 x rows moves, and the ids' gather.
    const distributed::BucketTiming& t = reducer.lastStepTimings()[row];
    if (t.bytes < reducer.plan().buckets[row].bytes()) {
      rowParam = reducer.plan().buckets[row].params.front();
      const double wire = static_cast<double>(dtypeSize(hook.wireDType(session_.dtype))) /
                          static_cast<double>(dtypeSize(session_.dtype));
      rowCost = {2, static_cast<double>(t.bytes) * session_.comm->worldSize() / 2 * wire};
    }
  }
  const distributed::BucketWire wire = [&](const distributed::Bucket& bucket) {
    if (bucket.params.size() == 1 && bucket.params[0] == rowParam) return rowCost;
    std::vector<Shape> of;
    for (int p : bucket.params) of.push_back(shapes[p]);
    return hook.wireCost(of, session_.dtype, session_.comm->worldSize());
  };
  const std::vector<distributed::ParamInfo>& infos = ddp_->parameterInfos();
  bucketCapBytes_ = distributed::chooseBucketCap(*session_.comm, infos, profile, link_,
                                                 opts_.ddp.firstBucketCapBytes, wire, report);
  ddp_->replan(bucketCapBytes_, std::min(opts_.ddp.firstBucketCapBytes, bucketCapBytes_));
  autoCapPending_ = false;
  if (session_.rank() == 0) std::printf("%s\n%s", report.c_str(), ddp_->plan().describe().c_str());
}

void Trainer::timeBuckets() {
  // Host times are on hostNowMs()'s clock. CUDA: Work::timing is relative to the step's start event;
  // CPU: it is host time too.
  const double hostStart = timer_.hostStartMs();
  cudaEvent_t start = timer_.startEvent();
  timer_.atResolve([timings = ddp_->reducer().lastStepTimings(), hostStart, start](runtime::StepRecord& r) {
    const double origin = start ? 0 : hostStart;
    for (const distributed::BucketTiming& t : timings) {
      const distributed::WorkTiming w = t.work->timing(start);
      r.buckets.push_back(runtime::BucketSpan{t.bucket, t.bytes, t.readyMs - hostStart, t.launchMs - hostStart,
                                              w.startedMs - origin, w.finishedMs - origin});
    }
  });
}

double Trainer::globalLoss(const Tensor& loss) {
  Tensor mean = loss.clone();
  session_.comm->allReduce(mean, distributed::ReduceOp::Avg, "loss")->wait();
  return mean.dtype() == DType::F32 ? mean.toVector<float>()[0] : mean.toVector<double>()[0];
}

void Trainer::computeGradNorm() { ddp_->computeGradNorm(*clipper_); }

double Trainer::gradNorm() {
  if (!normMeasured_) computeGradNorm();  // the buckets still hold the last step's gradients
  normMeasured_ = true;
  return clipper_->norm();
}

bool Trainer::hasValidation() const { return entry_.data != models::DataKind::Tokens || opts_.evalBatches > 0; }

Evaluation Trainer::evaluate() {
  if (!hasValidation()) return {NAN, NAN};  // the same on every rank: no collective
  NoGradGuard noGrad;
  const ops::ComputeCopies::Installed copies(copies_.get());
  const int rank = session_.rank(), world = session_.world();
  // Sums over this rank's shard, then averaged over the ranks: [loss sum, correct, count].
  std::vector<double> sums(3, 0.0);
  const auto add = [&sums](const models::EvalSums& s) {
    sums[0] += s.loss;
    sums[1] += s.correct;
    sums[2] += s.count;
  };
  if (entry_.data == models::DataKind::Images) {
    const int64_t chunk = 1000, pixels = testImages_.rows * testImages_.cols;
    const int64_t first = testImages_.count * rank / world, end = testImages_.count * (rank + 1) / world;
    for (int64_t start = first; start < end; start += chunk) {
      const int64_t n = std::min(chunk, end - start);
      Tensor x = Tensor::fromHost(testImages_.images.data() + start * pixels, {n, pixels}, DType::F32, Device::CPU);
      std::vector<int32_t> labels(testImages_.labels.begin() + start, testImages_.labels.begin() + start + n);
      add(entry_.score(*model_, x.toDType(session_.dtype).to(session_.device),
                       Tensor::fromVector(labels, {n}, session_.device)));
    }
  } else {
    // Validation windows drawn with a fixed seed, each rank its rows of the global batch: the same windows
    // for every run with the same global batch.
    const int context = static_cast<int>(args_.context);
    auto source = windowBatches(corpus_.val, opts_.batchSize, context, rank, world, 7);
    std::vector<int32_t> inputs(opts_.batchSize * context), targets(inputs.size());
    for (int64_t b = 0; b < opts_.evalBatches; ++b) {
      source->fill(inputs.data(), targets.data());
      add(entry_.score(*model_, Tensor::fromVector(inputs, {opts_.batchSize, context}, session_.device),
                       Tensor::fromVector(targets, {opts_.batchSize, context}, session_.device)));
    }
  }
  Tensor total = Tensor::fromVector(sums, {3}, session_.device);
  session_.comm->allReduce(total, distributed::ReduceOp::Avg, "validation")->wait();
  const std::vector<double> mean = total.toVector<double>();
  const double count = mean[2];  // 0: nothing scored, no loss (NaN)
  return {count > 0 ? mean[0] / count : NAN,
          entry_.evaluation == models::Evaluation::Accuracy && count > 0 ? mean[1] / count : NAN};
}

std::string Trainer::sample(int64_t count) {
  NoGradGuard noGrad;
  const ops::ComputeCopies::Installed copies(copies_.get());
  MINIDP_CHECK(entry_.data == models::DataKind::Tokens, "sample: --model " << opts_.model << " does not read tokens");
  const int64_t context = args_.context, vocab = std::max<int64_t>(corpus_.vocab, 1);
  const bool bytes = opts_.data != "llmc";  // fortunes: one token per byte
  const std::string prompt = "The ";
  std::vector<int32_t> tokens =
      bytes ? std::vector<int32_t>(prompt.begin(), prompt.end()) : std::vector<int32_t>{vocab > 50256 ? 50256 : 0};
  std::mt19937_64 rng(opts_.seed);
  std::string out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - context);
    std::vector<int32_t> window(tokens.begin() + start, tokens.end());
    const int64_t t = static_cast<int64_t>(window.size());
    const std::vector<double> last =
        entry_.nextTokenLogits(*model_, Tensor::fromVector(window, {1, t}, session_.device))
            .toDType(DType::F64)
            .toVector<double>();
    MINIDP_CHECK(static_cast<int64_t>(last.size()) == vocab,
                 "sample: --model " << opts_.model << " gave " << last.size() << " logits for a vocabulary of " << vocab);
    // 53 random bits: the same draw on every platform (std::uniform_real_distribution is not specified).
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const int32_t next = sampleToken(last, opts_.temperature, opts_.topK, u);
    tokens.push_back(next);
    if (bytes) {
      out.push_back(static_cast<char>(next));
    } else {
      out += (out.empty() ? "" : " ") + std::to_string(next);
    }
  }
  return out;
}

int runGuarded(const char* program, Session& session, const std::function<int()>& body) {
  try {
    return body();
  } catch (const AgreedError& e) {
    const int rank = session.comm ? session.rank() : session.mpi ? session.mpi->rank() : 0;
    if (rank == 0) {
      std::fprintf(stderr, "%s: %s: %s\n", program, e.status() == kUsageExit ? "usage error" : "error",
                   userMessage(e.what(), session.verbose).c_str());
    }
    return e.status();
  } catch (const std::exception& e) {
    const std::string head = std::string(program) + ": error: ", message = userMessage(e.what(), session.verbose);
    if (session.mpi && session.mpi->worldSize() > 1) {
      // Found on one rank or on several: every rank ends, and one line says why (MpiEnvironment::endJob): the
      // message alone when every rank failed alike, else naming the lowest rank that failed.
      const std::string rank = "rank " + std::to_string(session.mpi->rank()) + ": ";
      session.mpi->endJob(1, message, [&](bool alike) { return head + (alike ? "" : rank) + message; });
    }
    // Alone, or before MPI started (from the flags, which every rank shares): the first rank says it.
    if (distributed::detectLauncher().rank <= 0) std::fprintf(stderr, "%s%s\n", head.c_str(), message.c_str());
    return 1;
  }
}

}  // namespace minidp::train
