// The training job shared by minidp-train and minidp-bench: model, data-parallel wrapper, optimizer,
// prefetched batches, and one step (its options: options.h; the process's session: session.h).
#pragma once

#include <memory>
#include <string>

#include "data/batches.h"
#include "data/text.h"
#include "framework/distributed/gradient/ddp.h"
#include "framework/distributed/gradient/zero.h"
#include "framework/ops/compute_copies.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/graph.h"
#include "framework/runtime/step_timer.h"
#include "models/registry.h"
#include "train/options.h"
#include "train/schedule.h"
#include "train/session.h"

namespace minidp::train {

/// Eager steps before --cuda-graph captures one: cuBLAS handles and workspaces, the optimizer's state and
/// chunk table, DDP's re-plans (an automatic bucket cap, a plan rebuilt from the ready order) all happen in them.
constexpr int kGraphWarmupSteps = 2;

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
  /// The steps --skip-nonfinite skipped so far (their gradient norm was NaN or infinite).
  int64_t skippedSteps() const { return skippedSteps_; }
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
  ops::WeightCopySource* copySource_ = nullptr;  // installed around the forwards: copies_, or ZeRO-3's bf16 units
  LrSchedule schedule_;
  std::unique_ptr<optim::GradClipper> clipper_;  // the gradient norm (and clip coefficient)
  bool normMeasured_ = false;                    // clipper_ holds the norm of the last step
  int64_t skippedSteps_ = 0;                     // --skip-nonfinite
  double lr_ = 0;
  std::unique_ptr<Prefetcher> batches_;
  // --cuda-graph: eager steps left, the captured step, the inputs it reads, its loss (rewritten by replays).
  int graphWarmup_ = kGraphWarmupSteps;
  std::unique_ptr<runtime::CapturedGraph> graph_;
  Batch graphInputs_;
  Tensor graphLoss_;
};

}  // namespace minidp::train
