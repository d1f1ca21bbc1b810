#include "train/run_checks.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data/text.h"
#include "framework/distributed/gradient/bucket_plan.h"
#include "framework/distributed/job/launcher.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/io/atomic_file.h"
#include "framework/io/safetensors.h"
#include "framework/runtime/device.h"
#include "models/registry.h"
#include "train/input_files.h"
#include "train/repeated_flags.h"
#include "train/train_state.h"
#include "train/usage_rules.h"

namespace minidp::train {

namespace fs = std::filesystem;

namespace {

// The first rank under mpirun (or the only process) prints usage errors: every rank sees the same argv. Under
// Open MPI's MPMD launch ("mpirun -np 1 a : -np 1 b") the argv is one per app context: its first rank prints.
/// Who prints a usage error that every rank finds: rank 0; the first rank of another app context (mpirun's MPMD
/// form, whose contexts may differ in their flags) after rank 0 had time to end the job with the same line; the
/// others wait.
enum class UsageRole { Prints, PrintsAfterRankZero, Waits };

UsageRole usageRole() {
  if (const char* value = std::getenv("OMPI_COMM_WORLD_RANK")) {
    const int rank = std::atoi(value);
    if (rank == 0) return UsageRole::Prints;
    std::istringstream counts(std::getenv("OMPI_APP_CTX_NUM_PROCS") ? std::getenv("OMPI_APP_CTX_NUM_PROCS") : "");
    int first = 0;  // of each app context, in rank order
    for (int n = 0; counts >> n && first <= rank; first += n) {
      if (rank == first) return UsageRole::PrintsAfterRankZero;
    }
    return UsageRole::Waits;
  }
  for (const char* name : {"PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value) == 0 ? UsageRole::Prints : UsageRole::Waits;
  }
  return UsageRole::Prints;
}

bool firstRank() {
  const UsageRole role = usageRole();
  // Rank 0 exits at once with its own line when its context has a usage error too, and mpirun then ends the job:
  // one line from one rank. Otherwise rank 0 waits in MPI_Init and this line ends the job.
  if (role == UsageRole::PrintsAfterRankZero) std::this_thread::sleep_for(std::chrono::seconds(3));
  return role != UsageRole::Waits;
}

// A usage error every rank found: the first rank prints it; the others wait before they return
// kUsageExit, since mpirun ends the job as soon as one rank exits non-zero, and a rank exiting first
// would take the first rank down before its line is out (seen under load). The first rank's exit ends the
// wait (mpirun stops the others); without such a launcher the wait is a few seconds.
int usageExit() {
  if (usageRole() == UsageRole::Waits) std::this_thread::sleep_for(std::chrono::seconds(5));
  return kUsageExit;
}

/// An output of `flag` can be written at `path` now, not only after hours of training: nothing or a regular
/// file there (never a device, FIFO, link or folder), in a folder that takes a new file.
void checkWritable(const std::string& flag, const std::string& path) {
  try {
    checkWritableFile(path);
  } catch (const Error& e) {
    throw Error(flag + " " + e.what());
  }
}

// Fortune folders hold each text file F beside its strfile index F.dat.
bool looksLikeFortunes(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path p = entry.path();
    if (entry.is_regular_file() && !p.has_extension() && fs::exists(p.string() + ".dat")) return true;
  }
  return false;
}

/// The window sampler's need: one window of --context inputs and its shifted target (any batch is drawn
/// from the windows there are, with replacement).
void checkTokens(const char* part, int64_t tokens, const Options& o, const std::string& fix) {
  const int64_t context = o.context();
  MINIDP_CHECK(tokens >= context + 1, "the " << part << " text holds " << tokens << " tokens, fewer than --context "
                                             << context << " + 1 (one window and its target); " << fix);
}

/// What checkData found: the token data's vocabulary (0 for images), and the training images or tokens.
struct TrainingData {
  int64_t vocab = 0;
  int64_t items = 0;
};

/// A global step against the training data: it cannot take more images, or tokens (windows of --context),
/// than the data holds.
void checkStepSize(const Options& o, int world, const TrainingData& d) {
  const int64_t context = o.context();  // 0 for images
  const long double perStep = static_cast<long double>(o.batchSize) * static_cast<long double>(o.gradAccum) * world *
                              (context > 0 ? static_cast<long double>(context) : 1.0L);
  std::ostringstream os;
  os << std::fixed << std::setprecision(0) << perStep;
  MINIDP_CHECK(perStep <= static_cast<long double>(d.items),
               "one step takes " << os.str()
                                 << (context > 0 ? " tokens (--batch-size x --grad-accum x ranks x --context)"
                                                 : " images (--batch-size x --grad-accum x ranks)")
                                 << ", more than the " << d.items
                                 << (context > 0 ? " tokens of the training text" : " training images")
                                 << "; lower them");
}

/// Checks the data against the flags (but the size of a step: checkStepSize).
TrainingData checkData(const Options& o) {
  const DataSet set = o.dataSet();
  const std::string data = nameOf(dataSetNames(), set);
  if (set == DataSet::Llmc) {
    int64_t vocab = 0;  // max token + 1 over both files, as loadLlmcTokens computes it
    const auto tokens = [&vocab](const char* flag, const std::string& path) {
      try {
        const auto ids = readLlmcTokenFile(path);
        for (const auto id : ids) vocab = std::max<int64_t>(vocab, id + 1);
        return static_cast<int64_t>(ids.size());
      } catch (const Error& e) {
        throw Error(std::string(flag) + " " + path + ": " + e.what());
      }
    };
    const int64_t train = tokens("--llmc-train", o.llmcTrain);
    checkTokens("--llmc-train", train, o, "give a longer token file or a shorter --context");
    const int64_t val = tokens("--llmc-val", o.llmcVal);
    if (o.evalBatches > 0) {
      checkTokens("--llmc-val", val, o, "give a longer token file, a shorter --context or --eval-batches 0");
    }
    return {vocab, train};
  }
  const bool images = set == DataSet::FashionMnist;
  const std::string packageDir = images ? kFashionMnistDir : kFortunesDir;
  const std::string dir = o.dataDir.empty() ? packageDir : o.dataDir;
  const std::string flag = o.dataDir.empty() ? "the default data folder" : "--data-dir";
  const std::string package = images ? "dataset-fashion-mnist" : "fortunes";
  MINIDP_CHECK(fs::exists(dir) || !o.dataDir.empty(), flag << " " << dir << " does not exist; install the Debian "
                                                           << "package " << package << " or pass --data-dir");
  MINIDP_CHECK(fs::exists(dir), flag << " " << dir << ": there is no folder " << fs::absolute(dir).string()
                                     << "; pass the folder of the " << data << " files (the Debian package " << package
                                     << " installs them in " << packageDir << ")");
  MINIDP_CHECK(fs::is_directory(dir),
               flag << " " << dir << " is a file, not a folder; pass the folder of the " << data << " files");
  if (images) {
    for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                             "t10k-labels-idx1-ubyte.gz"}) {
      MINIDP_CHECK(fs::exists(fs::path(dir) / name), flag << " " << dir << " is not the Fashion-MNIST folder: it lacks "
                                                          << name << "; pass the folder of the package " << package);
    }
    return {0, readIdx((fs::path(dir) / "train-labels-idx1-ubyte.gz").string()).dims.at(0)};
  }
  MINIDP_CHECK(looksLikeFortunes(dir), flag << " " << dir << " is not a fortune folder (no text file beside its "
                                            << ".dat index); pass the folder of the package fortunes (" << kFortunesDir
                                            << ")");
  const TokenCorpus corpus = loadFortunes(dir);
  const int64_t train = static_cast<int64_t>(corpus.train.size());
  checkTokens("training", train, o, "give more text or a shorter --context");
  if (o.evalBatches > 0) {
    checkTokens("validation", static_cast<int64_t>(corpus.val.size()), o,
                "give more text, a shorter --context or --eval-batches 0");
  }
  return {corpus.vocab, train};
}

std::string gigabytes(double bytes) {
  std::ostringstream os;
  os << std::fixed;
  os.precision(bytes < 1e9 ? 3 : 1);
  os << bytes / 1e9 << " GB";
  return os.str();
}

/// Host memory a new allocation can take now: MemAvailable, else the physical memory.
double hostAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
}

/// Refuses a run whose estimate, times the ranks that share the memory, exceeds what is available: the OS
/// would kill it (or CUDA fail) in the middle of the set-up instead.
void checkMemory(const Options& o, const Session& session, int64_t vocab) {
  const MemoryEstimate need =
      estimateMemory(o, vocab, session.device, session.dtype, session.compute, session.comm ? session.world() : 1);
  const int localRank = session.mpi ? session.mpi->localRank() : 0;
  const int localSize = session.mpi ? session.mpi->localSize() : 1;
  int sharing = localSize;  // the node's ranks share its host memory
  double available = 0;
  std::string where;
  if (session.device == Device::CUDA) {
    const int devices = runtime::cudaDeviceCount();
    const int mine = distributed::selectGpu(o.comm.gpu, localRank, devices);
    sharing = 0;
    for (int r = 0; r < localSize; ++r) sharing += distributed::selectGpu(o.comm.gpu, r, devices) == mine;
    available = static_cast<double>(runtime::deviceFreeBytes());
    where = "free on cuda:" + std::to_string(mine);
  } else {
    available = hostAvailableBytes();
    where = "of host memory available";
  }
  if (need.total() * sharing <= available) return;
  std::string advice = o.ddp.zeroStage < 3 && session.comm && session.world() > 1 ? "raise --zero, or lower --batch-size"
                                                                                   : "lower --batch-size";
  for (size_t i = 0; i < need.flagsToLower.size(); ++i) {
    advice += (i + 1 == need.flagsToLower.size() ? " or " : ", ") + need.flagsToLower[i];
  }
  std::ostringstream os;
  os << "the run needs up to " << gigabytes(need.total()) << " per rank (" << shortNumber(need.parameters)
     << " parameters: "
     << gigabytes(need.stateBytes) << " with gradients and optimizer state; activations " << gigabytes(need.activationBytes)
     << ")" << (sharing > 1 ? " x " + std::to_string(sharing) + " ranks" : std::string()) << ", more than the "
     << gigabytes(available) << " " << where << "; " << advice;
  throw Error(os.str());
}

}  // namespace

// The bound, in elements of the parameter dtype (s bytes) and of the activation dtype (a bytes), over N ranks:
//   state       = 6 P s: the parameters, their gradient buckets, AdamW's two moments (SGD's one momentum
//                 leaves room), and two more for the copies some runs hold (bf16 wire, ZeRO gather, the
//                 fp32 model built before its fp64 conversion);
//                 --zero 1: (4 + 2/N) P s, the moments sharded;
//                 --zero 2: (3 + 3/N) P s + two buckets' scratch: the gradients kept are shards too, and those
//                 that backward made and whose bucket is not launched yet (all of them with --overlap off: P
//                 more) live as tensors of their own, counted as one P;
//                 --zero 3: 4 P s / N (parameter, gradient and moment shards) + the gathered units: with L
//                 blocks (the model's --layers), (--zero-prefetch + 4) P / L for the units gathered, in flight
//                 and in the scratch buffers, at most P, and P with --zero-keep-gathered (every unit gathered
//                 from its forward to its backward), plus one P / L of gradients in flight; the first unit
//                 (embeddings) and the last (last block, norm, head) are not counted apart, so a model with a
//                 large vocabulary and few blocks is underestimated; --zero-param-dtype bf16 adds each
//                 gathered unit's bf16 buffer, two bytes an element of the units counted (bf16 compute, whose
//                 ops view it) or of the (--zero-prefetch + 1) P / L in flight (otherwise);
//   activations = the model's count for one micro-batch (models::ModelEntry::memory: GPT's and the
//                 MLP's formulas are in models/registry.cpp), doubled by --cuda-graph (the capture's private
//                 pool beside the eager steps' blocks);
//   CUDA adds 256 MiB for cuBLAS workspaces and NCCL's buffers beyond what the context holds already.
MemoryEstimate estimateMemory(const Options& o, int64_t vocab, Device device, DType dtype, DType compute, int world) {
  const double s = static_cast<double>(dtypeSize(dtype)), a = static_cast<double>(dtypeSize(compute));
  const models::ModelEntry& entry = models::findModel(o.model);
  models::ModelArgs args = modelArgsBeforeData(o, vocab);
  args.device = device;
  args.compute = compute;
  const models::MemoryNeed need = entry.memory(args, o.batchSize);
  MemoryEstimate e;
  e.parameters = need.parameters;
  e.flagsToLower = need.flagsToLower;
  const double P = static_cast<double>(e.parameters), N = std::max(world, 1);
  const double layers = args.flags.has("layers") ? std::max<double>(1, args.flags.integer("layers")) : 1;
  const double bucket = static_cast<double>(o.ddp.bucketCapBytes > 0 ? o.ddp.bucketCapBytes : size_t(25) << 20);
  switch (o.ddp.zeroStage) {
    case 1: e.stateBytes = (4 + 2 / N) * P * s; break;
    case 2:
      e.stateBytes = (3 + 3 / N) * P * s + 2 * bucket + (o.ddp.overlap == distributed::Overlap::AfterBackward ? P * s : 0);
      break;
    case 3: {
      const double gathered = std::min(P, (o.zeroPrefetch + 5) * P / layers) + (o.zeroKeepGathered ? P : 0);
      double wire = 0;  // --zero-param-dtype bf16: the units' bf16 buffers
      if (o.zeroParamDType == ZeroParamDType::Bf16) {
        wire = compute == DType::BF16 && !o.castWeights ? gathered : std::min(P, (o.zeroPrefetch + 1) * P / layers);
      }
      e.stateBytes = 4 * P * s / N + gathered * s + wire * 2;
      break;
    }
    default: e.stateBytes = 6 * P * s;
  }
  e.activationBytes = need.activations * a * (o.cudaGraph ? 2 : 1) + (device == Device::CUDA ? 256.0 * (1 << 20) : 0);
  return e;
}

int parseCommandLine(CLI::App& app, Options& opts, int argc, char** argv, const char* program) {
  if (const std::string twice = repeatedFlagProblem(app, argc, argv); !twice.empty()) {
    if (firstRank()) std::fprintf(stderr, "%s: usage error: %s\n", program, twice.c_str());
    return usageExit();
  }
  try {
    app.parse(argc, argv);
    recordParsedFlags(app, opts);
    return -1;
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help: the usage text, exit 0
  } catch (const CLI::ExtrasError&) {
    // CLI11's text lists them last first ("x --save"): here in command-line order.
    std::string extras;
    for (const std::string& arg : app.remaining()) extras += (extras.empty() ? "" : " ") + arg;
    if (firstRank()) std::fprintf(stderr, "%s: error: %s: no such flag (see --help)\n", program, extras.c_str());
    return usageExit();
  } catch (const CLI::ParseError& e) {
    if (firstRank()) {
      std::fprintf(stderr, "%s: error: %s (see --help)\n", program, userMessage(e.what(), false).c_str());
    }
    return usageExit();
  }
}

int checkUsage(const Options& o, const std::string& program, const std::vector<OutputFile>& more) {
  const std::string problem = usageProblem(o, more);
  if (problem.empty()) return 0;
  if (firstRank()) std::fprintf(stderr, "%s: usage error: %s\n", program.c_str(), problem.c_str());
  return usageExit();
}

void agreeOnChecks(distributed::Communicator& comm, const std::function<void()>& check) {
  std::string problem;
  try {
    check();
  } catch (const std::exception& e) {
    problem = e.what();
    if (problem.empty()) problem = "check failed";
  }
  const distributed::ExchangeLabel label("start-up checks agreement");
  const std::vector<std::string> problems = comm.allGather(problem);
  int failed = 0, first = -1;
  for (int r = 0; r < static_cast<int>(problems.size()); ++r) {
    if (problems[r].empty()) continue;
    ++failed;
    if (first < 0) first = r;
  }
  if (failed == 0) return;
  const bool alike = failed == static_cast<int>(problems.size());
  throw AgreedError(alike ? problems[first] : "rank " + std::to_string(first) + ": " + problems[first]);
}

namespace {

/// The temporaries a save killed midway left (their writer gone): beside every output and the --resume file, and
/// any in the folder the run starts in.
void removeStrayFiles(const Options& o, const std::vector<OutputFile>& more) {
  for (const OutputFile& file : outputFiles(o, more)) removeStrayTemporaries(file.path);
  if (!o.resume.empty()) removeStrayTemporaries(o.resume);
  removeStrayTemporariesIn(".");
}

}  // namespace

void checkTrainingRun(const Options& o, Session& session, const std::vector<OutputFile>& more) {
  agreeOnChecks(*session.comm, [&] {
    if (session.rank() == 0) {
      checkInputFiles(o);  // before anything reads them: links that loop, FIFOs and devices named as such
      // Rank 0 writes the outputs: their folders must take a file now, not after hours of training.
      for (const OutputFile& file : outputFiles(o, more)) checkWritable(file.flag, file.path);
      removeStrayFiles(o, more);
    }
    const TrainingData data = checkData(o);
    checkMemory(o, session, data.vocab);  // one micro-batch's, then the size of a whole step
    checkStepSize(o, session.world(), data);
    if (!o.resume.empty()) checkResumeFile(o, o.resume, session.world());
    if (!o.load.empty()) {
      try {
        readSafetensorsHeader(o.load);
      } catch (const Error& e) {
        throw Error("--load " + o.load + ": " + e.what());
      }
    }
  });
}

}  // namespace minidp::train
