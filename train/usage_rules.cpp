#include "train/usage_rules.h"

#include <algorithm>
#include <filesystem>

#include "framework/distributed/gradient/comm_hook.h"
#include "framework/distributed/job/launcher.h"
#include "models/registry.h"
#include "train/errors.h"
#include "train/nonfinite_steps.h"
#include "train/output_clash.h"

namespace minidp::train {

namespace fs = std::filesystem;

namespace {

/// --sparse-embedding-grad's refusals, as one line; empty when there is none.
std::string sparseUsageProblem(const Options& o) {
  if (!o.sparseEmbeddingGrad) return {};
  if (models::findModel(o.model).rowSparseParameter.empty())
    return "--sparse-embedding-grad: model " + o.model + " has no parameter indexed by its input tokens";
  if (o.ddp.zeroStage != 0)
    return "--sparse-embedding-grad with --zero " + std::to_string(o.ddp.zeroStage) +
           " is not supported (rows are all-reduced, not sharded)";
  if (o.cudaGraph) return "--sparse-embedding-grad with --cuda-graph is not supported (the row ids are not captured)";
  return {};
}

/// --comm-hook's refusals (the chosen hook's registry entry), as one line; empty when there is none.
std::string hookUsageProblem(const Options& o) {
  distributed::HookUsage usage;
  usage.zeroStage = o.ddp.zeroStage;
  usage.cudaGraph = o.cudaGraph;
  usage.gradDType = parameterDType(o.precision);  // --dtype bf16: fp32 parameters and gradients
  usage.device = o.device;
  usage.rowSparse = o.sparseEmbeddingGrad;
  return distributed::findCommHook(o.ddp.commHook.name).usageProblem(usage);
}

/// The communicator flags' refusals, as one line; empty when there is none: the backend's own
/// (commSettingsProblem: the device, NCCL's settings), then a backend's flags, given at any value or set, on
/// another backend. The communicator is resolved as makeCommunicator will (the launcher's world size; an
/// unknown one counts as several ranks), which checks again with the real one.
std::string commUsageProblem(const Options& o) {
  distributed::CommOptions comm = o.comm;
  comm.cuda = o.device == Device::CUDA;
  if (comm.ncclBuffers != distributed::CommBuffers::Plain && o.ddp.zeroStage != 0)
    return std::string("--nccl-buffers ") + distributed::commBuffersName(comm.ncclBuffers) + " with --zero " +
           std::to_string(o.ddp.zeroStage) +
           " is not supported (its in-place reduce-scatter and all-gather address each rank's "
           "shard at another offset; registered and symmetric NCCL buffers want the same offset on every rank)";
  const distributed::LaunchInfo launch = distributed::detectLauncher();
  const int world = !launch.launched() ? 1 : launch.size > 0 ? launch.size : 2;
  const std::string backend = distributed::resolveCommBackend(comm, world, launch.launched());
  if (std::string problem = distributed::commSettingsProblem(comm, backend); !problem.empty()) return problem;
  if (backend == "emulated" && o.ddp.zeroStage != 0 && !o.save.empty())
    return "--save with --comm emulated --zero " + std::to_string(o.ddp.zeroStage) +
           ": the emulated gathers repeat rank 0's shard, so the parameters are not a real run's (only time and "
           "memory are)";
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
  const DataSet data = o.dataSet();
  for (const char* flag : {"--llmc-train", "--llmc-val"}) {
    if (o.given(flag) && data != DataSet::Llmc)
      return std::string(flag) + " is a file of --data llmc; this run's data is " + nameOf(dataSetNames(), data);
  }
  for (const char* flag : {"--sample", "--temperature", "--top-k"}) {
    if (o.given(flag) && !entry.nextTokenLogits)  // the entry's sampling capability
      return std::string(flag) + ": --model " + o.model + " does not generate tokens";
  }
  if (o.given("--zero-gather") && o.ddp.zeroStage != 1 && o.ddp.zeroStage != 2)
    return "--zero-gather " + nameOf(zeroGatherNames(), o.zeroGather) +
           " gathers ZeRO-1/2's parameter shards: it needs --zero 1 or 2";
  for (const char* flag : {"--zero-prefetch", "--zero-keep-gathered", "--zero-param-dtype"}) {
    if (o.given(flag) && o.ddp.zeroStage != 3) return std::string(flag) + " is a setting of --zero 3";
  }
  for (const char* flag : {"--bucket-mb", "--first-bucket-mb"}) {
    if (o.given(flag) && o.ddp.zeroStage == 3)
      return std::string(flag) + " caps the gradient buckets; --zero 3 has one per unit (a block), its gather's";
  }
  for (const distributed::CommHookEntry& hook : distributed::commHooks()) {
    for (const Flag& flag : hook.flags) {
      if (o.ddp.commHook.flags.has(flag.name) && hook.name != o.ddp.commHook.name)
        return "--" + flag.name + " is a setting of --comm-hook " + hook.name + "; this run's hook is " +
               o.ddp.commHook.name;
    }
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
  const bool bf16 = o.precision == Precision::Bf16;
  if (o.device == Device::CUDA) {
    if (o.plainGemms && !bf16) return "--plain-gemms needs --dtype bf16 (it replaces cuBLASLt's bf16 GEMMs)";
    if (o.castWeights && !bf16) return "--cast-weights needs --dtype bf16 (only bf16 forwards cast weights)";
    return {};
  }
  if (bf16) return "--dtype bf16 needs --device cuda (bf16 kernels are CUDA-only)";
  if (o.tf32) return "--tf32 needs --device cuda (TF32 is a mode of CUDA's fp32 GEMMs)";
  if (o.plainGemms) return "--plain-gemms needs --device cuda (it replaces cuBLASLt's bf16 GEMMs)";
  if (o.castWeights) return "--cast-weights needs --device cuda and --dtype bf16 (only bf16 forwards cast weights)";
  return {};
}

/// The rules between the data, precision, bucket and file flags, as one line; empty when there is none.
std::string runUsageProblem(const Options& o) {
  const models::ModelEntry& entry = models::findModel(o.model);
  const DataSet data = o.dataSet();
  if (entry.data == models::DataKind::Images && data != DataSet::FashionMnist)
    return "--model " + o.model + " trains on images: --data fashion-mnist, not " + nameOf(dataSetNames(), data);
  if (entry.data == models::DataKind::Tokens && data == DataSet::FashionMnist)
    return "--model " + o.model + " trains on tokens: --data fortunes or llmc, not fashion-mnist";
  if (data == DataSet::Llmc && (o.llmcTrain.empty() || o.llmcVal.empty()))
    return "--data llmc needs " + std::string(o.llmcTrain.empty() ? "--llmc-train" : "--llmc-val") +
           " FILE (an llm.c .bin token file)";
  if (o.ddp.bucketCapBytes == 0 && o.ddp.zeroStage != 0)
    return "--bucket-mb auto re-plans after the first step: not with --zero " + std::to_string(o.ddp.zeroStage) +
           " (ZeRO keeps its first plan's buckets)";
  if (o.ddp.bucketCapBytes == 0 && o.ddp.rebuildBuckets)
    return "--bucket-mb auto re-plans after the first step: not with --rebuild-buckets";
  if (o.ddp.rebuildBuckets && o.ddp.zeroStage != 0)
    return "--rebuild-buckets re-plans after the first step: not with --zero " + std::to_string(o.ddp.zeroStage) +
           " (ZeRO keeps its first plan's buckets)";
  if (o.saveEvery > 0 && o.save.empty()) return "--save-every needs --save FILE (the file it rewrites)";
  if (!o.resume.empty() && !o.load.empty())
    return "--resume continues a saved run, its parameters included: not with --load";
  return {};
}

}  // namespace

std::string usageProblem(const Options& o, const std::vector<OutputFile>& more) {
  if (const std::string device = deviceUsageProblem(o); !device.empty()) return device;
  try {
    const models::ModelArgs args = modelArgsBeforeData(o, 0);  // the vocabulary is read later
    if (std::string refused = models::findModel(o.model).refuse(args); !refused.empty()) return refused;
    o.dataSet();
  } catch (const Error& e) {
    // A flag the model does not have, a value out of its range, a default data that is no --data.
    return userMessage(e.what(), false);
  }
  if (const std::string run = runUsageProblem(o); !run.empty()) return run;
  if (const std::string unread = unreadFlagProblem(o); !unread.empty()) return unread;
  if (const std::string sparse = sparseUsageProblem(o); !sparse.empty()) return sparse;
  if (const std::string hook = hookUsageProblem(o); !hook.empty()) return hook;
  if (const std::string comm = commUsageProblem(o); !comm.empty()) return comm;
  if (const std::string outputs = outputUsageProblem(o, more); !outputs.empty()) return outputs;
  if (const std::string clash = outputClashProblem(o, more); !clash.empty()) return clash;
  if (const std::string nonFinite = nonFiniteUsageProblem(o); !nonFinite.empty()) return nonFinite;
  if (!o.cudaGraph) return {};
  if (o.device != Device::CUDA) return "--cuda-graph needs --device cuda";
  if (o.gradAccum != 1) return "--cuda-graph captures one micro-batch per step: not with --grad-accum > 1";
  if (o.ddp.zeroStage != 0)
    return "--cuda-graph with --zero " + std::to_string(o.ddp.zeroStage) +
           " is not supported (the sharded optimizer gathers outside the graph)";
  if (o.comm.backend == "mpi")
    return "--cuda-graph with --comm mpi is not supported (its collectives run on the host, outside the graph)";
  return {};
}

}  // namespace minidp::train
