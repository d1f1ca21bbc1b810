// The training job shared by minidp-train and minidp-bench: process setup (MPI, device, communicator),
// model, data-parallel wrapper, optimizer, prefetched batches, and one step.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/batches.h"
#include "data/text.h"
#include "framework/distributed/gradient/bucket_model.h"
#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/gradient/ddp.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/distributed/gradient/zero.h"
#include "framework/ops/compute_copies.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/graph.h"
#include "framework/runtime/step_timer.h"
#include "models/registry.h"
#include "train/schedule.h"

namespace CLI {
class App;
}

namespace minidp::train {

/// Every knob of a run; `addOptions` exposes them as command-line flags.
struct Options {
  std::string model = "mlp";
  std::string data = "";  // default: the model's (models::ModelEntry::defaultData)
  std::string dataDir = "";
  std::string llmcTrain, llmcVal;
  std::string device = "cpu";
  std::string dtype = "fp32";
  int64_t steps = 0;       // 0: the model's default
  int64_t batchSize = 64;  // per rank
  double lr = 0;           // 0: the model's default
  std::string optimizer = "";
  double weightDecay = 0;
  uint64_t seed = 1234;
  int64_t logEvery = 100;
  int64_t evalBatches = 20;  // token models; 0: no validation
  // The model's own flags (models::ModelEntry::flags) given on the command line, by name ("layers"); the
  // others take the model's defaults (models::flagValues).
  models::FlagValues modelFlags;
  // --overlap, --bucket-mb, --first-bucket-mb (MiB on the command line, bytes here), --rebuild-buckets.
  // ddp.bucketCapBytes 0: --bucket-mb auto, chosen by the cost model after the first step. ddp.commHook:
  // --comm-hook and its flags. zeroStage is set by the Trainer from --zero.
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
  // ZeRO-1 sharding and its parameter gather.
  int zero = 0;
  std::string zeroGather = "end";
  // ZeRO-3: units gathered ahead of the one computing, and keeping a unit from forward to backward.
  int zeroPrefetch = 1;
  bool zeroKeepGathered = false;
  // Robustness (train/run_checks.h, train/train_state.h).
  int64_t saveEvery = 0;     // also write the training state to `save` every N steps
  std::string resume;        // continue the training state in this file
  bool checkFinite = false;  // check the loss every step, not only at log points
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

/// Eager steps before --cuda-graph captures one: cuBLAS handles and workspaces, the optimizer's state and
/// chunk table, --bucket-mb auto's and --rebuild-buckets' re-plans all happen in them.
constexpr int kGraphWarmupSteps = 2;

/// Flag combinations that are usage errors (exit status 2), as one line; empty when there is none. Every
/// rule between flags is here, once (a single flag's range is checked where addOptions registers it);
/// `more`: the program's own output files, which must not be one of the others.
std::string usageProblem(const Options& opts, const std::vector<OutputFile>& more = {});
/// After parsing: prints "<program>: usage error: <problem>" to stderr (the first rank only, under mpirun)
/// and returns 2 when there is a problem, else 0 (train/run_checks.cpp). openSession and the Trainer refuse
/// the same problems (an Error), for programs that build them from Options of their own.
int checkUsage(const Options& opts, const std::string& program, const std::vector<OutputFile>& more = {});

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

/// This process's place in the job: MPI (when launched by mpirun), device, communicator.
struct Session {
  std::unique_ptr<distributed::MpiEnvironment> mpi;
  std::shared_ptr<distributed::Communicator> comm;
  Device device = Device::CPU;
  DType dtype = DType::F32;    // parameters, gradient buckets, optimizer state
  DType compute = DType::F32;  // activations: dtype, or BF16 (mixed precision, CUDA only)
  bool verbose = false;        // runGuarded prints source locations
  int rank() const { return comm->rank(); }
  int world() const { return comm->worldSize(); }
};

/// Initialises MPI if launched by mpirun, picks the GPU by node-local rank, builds the communicator.
/// Fills the caller's `session` as it goes, so that when a step throws, runGuarded still finds MPI and
/// can end the other ranks (which would otherwise wait in the communicator's setup).
void openSession(Options& opts, Session& session);

/// Validation numbers; NaN where the model has none (accuracy of the GPT).
struct Evaluation {
  double loss = 0;
  double accuracy = 0;
};

/// Model (by name from models/registry.h), data, DDP and optimizer of a run.
class Trainer {
 public:
  Trainer(const Options& opts, Session& session);
  /// One optimizer step over gradAccum micro-batches. Returns the loss tensor of the last micro-batch
  /// (on the device; reading it is the caller's choice, since it synchronises). Timed by timer():
  /// phases forward, backward, prefetch, finalize (exposed communication), optimizer, and the buckets.
  /// --cuda-graph, after the warm-up: one phase, "replay", and the same loss tensor every step, rewritten
  /// by each replay (read it before the next step).
  Tensor step();
  /// The mean of `loss` over all ranks: the loss of the global batch (a collective; synchronises).
  double globalLoss(const Tensor& loss);
  /// Validation, every rank on its shard, averaged over the ranks (a collective). image models: loss and
  /// accuracy on the test split; token models: mean loss (nats per token) over evalBatches global batches.
  /// NaN without validation (hasValidation), and no collective then.
  Evaluation evaluate();
  /// Whether evaluate() scores anything: not for a token model with --eval-batches 0.
  bool hasValidation() const;
  /// The learning rate of the last step (the schedule's value).
  double lr() const { return lr_; }
  /// The global norm of the last step's averaged gradients (computed on the device now unless clipping
  /// already did; reading it synchronises: log points only).
  double gradNorm();
  /// Token models only: `count` tokens continued from a prompt (bytes of "The " for byte vocabularies, else token 0
  /// or GPT-2's <|endoftext|>), drawn at opts.temperature from the opts.topK most likely, seeded by
  /// opts.seed: the same on every rank. Byte vocabularies give text, others token ids separated by spaces.
  std::string sample(int64_t count);
  models::Model& model() { return *model_; }
  /// What the model was built from (its flags with their defaults, the data's sizes).
  const models::ModelArgs& modelArgs() const { return args_; }
  /// Model FLOPs of one training step per item, token or sample (the entry's count, for MFU).
  double flopsPerItem() const;
  distributed::DistributedDataParallel& ddp() { return *ddp_; }
  int64_t samplesPerStep() const;  // global samples per optimizer step
  /// The timer of step(): collect() its records; setDetailed(true) for per-layer and copy spans.
  runtime::StepTimer& timer() { return timer_; }
  /// The bucket cap in use (bytes): --bucket-mb, or what --bucket-mb auto chose after the first step.
  size_t bucketCapBytes() const { return bucketCapBytes_; }
  /// Rank 0 writes parameters, optimizer state, `step` and the sampler position to `path` (train_state.cpp);
  /// every rank calls it (ZeRO-1 gathers the state shards).
  void saveState(const std::string& path, int64_t step);
  /// Restores what saveState wrote (on every rank); returns the step it was saved after.
  int64_t resume(const std::string& path);
  /// Whether the bf16 forwards read weight copies that the optimizer keeps (bf16, no ZeRO-1, no --cast-weights).
  bool keepsWeightCopies() const { return copies_ != nullptr; }

 private:
  /// Enqueues clipper_'s norm of the averaged gradients (ZeRO-1: from every rank's shards; a collective).
  void computeGradNorm();
  /// Adds the buckets' all-reduce spans to the open step's record (read once the step completed).
  void timeBuckets();
  /// --bucket-mb auto, after the first (detailed) step: model the caps, re-plan with rank 0's choice.
  void chooseBucketCap();
  /// --cuda-graph after the warm-up: copies the batch into graphInputs_, stages the optimizer's scalars,
  /// captures the step on the first call, and replays it (train/graph_step.cpp).
  Tensor graphStep();
  const Options& opts_;
  Session& session_;
  runtime::StepTimer timer_;  // before DDP: its reducer's observer points at it
  ImageDataset trainImages_, testImages_;
  TokenCorpus corpus_;
  const models::ModelEntry& entry_;
  models::ModelArgs args_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<distributed::DistributedDataParallel> ddp_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  // bf16 compute: the weights' bf16 copies that the optimizer keeps current, installed for the ops around
  // each forward of step(), evaluate() and sample() (not with ZeRO-1, whose gather writes the parameters
  // after the update).
  std::unique_ptr<ops::ComputeCopies> copies_;
  LrSchedule schedule_;
  std::unique_ptr<optim::GradClipper> clipper_;  // the gradient norm (and clip coefficient)
  bool normMeasured_ = false;                    // clipper_ holds the norm of the last step
  double lr_ = 0;
  std::unique_ptr<Prefetcher> batches_;
  distributed::LinkCost link_;  // --bucket-mb auto: measured at construction
  bool autoCapPending_ = false;
  size_t bucketCapBytes_ = 0;
  // --cuda-graph: eager steps left, the captured step, the inputs it reads, its loss (rewritten by replays).
  int graphWarmup_ = kGraphWarmupSteps;
  std::unique_ptr<runtime::CapturedGraph> graph_;
  Batch graphInputs_;
  Tensor graphLoss_;
};

/// Runs `body`; on an exception, one line (train/run_checks.h's userMessage) and exit status 1. Under
/// mpirun with more than one rank (even when the communicator was never built), every rank ends and one
/// rank prints the line (distributed::MpiEnvironment::endJob: no MPI_Abort banner); before MPI started,
/// the first rank prints it. An AgreedError, which every rank threw alike, is printed by rank 0 alone and
/// ends no one: every rank returns its status (1, or kUsageExit for flags the ranks disagree on) and
/// finalises MPI cleanly.
int runGuarded(const char* program, Session& session, const std::function<int()>& body);

}  // namespace minidp::train
