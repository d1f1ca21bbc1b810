// DistributedDataParallel: the data-parallel wrapper of a parameter list. At construction it checks that
// every rank holds the same parameters, copies rank 0's values to every rank, plans the buckets and
// installs a grad-ready hook per parameter that feeds the reducer. Model-agnostic: it sees only
// (name, Variable) pairs. Optionally (rebuildBuckets), the first step's finalize re-plans the buckets in
// the order the gradients really became ready, so that buckets match the real backward. With a bucket cap of 0
// (--bucket-mb auto) it measures the link at construction and re-plans after the first timed step under the
// cap its cost model chose (bucket_model.h). DDP owns the gradient path: a program gives it a step timer and
// each micro-batch's inputs, and prints what endStep() reports; it never reads a plan, a timing or a wire cost.
#pragma once

#include <memory>

#include "framework/distributed/gradient/bucket_model.h"
#include "framework/distributed/gradient/bucket_plan.h"
#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/gradient/hooks/row_sparse.h"
#include "framework/distributed/gradient/reducer.h"
#include "framework/distributed/gradient/step_timer_observer.h"
#include "framework/optim/grad_clip.h"
#include "framework/nn/module.h"

namespace minidp::distributed {

/// Settings of the data-parallel wrapper, one type from the flags (train::Options holds one) to the reducer.
struct DdpOptions {
  /// When the buckets are all-reduced (reducer.h); the bits are the same either way.
  Overlap overlap = Overlap::DuringBackward;
  /// Bucket caps in bytes (bucket_plan.h); the flags' MiB are converted where they are parsed. bucketCapBytes 0:
  /// auto (AutoBucketCap), a start plan of 25 MiB re-planned after the first step timed by observe().
  size_t bucketCapBytes = size_t(25) << 20;
  size_t firstBucketCapBytes = size_t(1) << 20;
  /// After the first step, re-plan the buckets in rank 0's observed ready order (once; same bits).
  bool rebuildBuckets = false;
  /// What a bucket becomes on the wire (comm_hook.h): allreduce, bf16, powersgd or a registered hook.
  CommHookOptions commHook;
  /// ZeRO stage: 0 all-reduces the buckets; 1 reduce-scatters them (ShardedOptimizer updates the shards);
  /// 2 as 1, and a rank keeps only its shard of the gradients (Reducer's sharded gradients); 3 as 2 with
  /// one bucket per unit (planUnits), the parameters sharded too (ShardedOptimizer).
  int zeroStage = 0;
  /// A parameter indexed by the input tokens (models::ModelEntry::rowSparseParameter), reduced by rows: it
  /// gets a bucket of its own and only the rows of the step's ids travel (hooks/row_sparse.h); empty: none.
  std::string rowSparseParameter;
};

/// One step: prepareStep(); beginMicroBatch(...) (or setRequireSync(...)) and backward per micro-batch;
/// finalize(); optimizer; endStep().
/// The gradient convention is the reducer's (reducer.h): buckets zeroed at prepareStep, backward adds.
class DistributedDataParallel {
 public:
  /// Collective: every rank must construct it with the same parameter names, shapes and dtypes, the same
  /// options and so the same bucket plan, else every rank throws an error naming the first difference.
  /// Then rank 0's values are broadcast.
  DistributedDataParallel(nn::NamedParameters params, std::shared_ptr<Communicator> comm, DdpOptions opts = {});
  /// Removes the grad-ready hooks it installed (by their handles; other hooks stay).
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Subscribes `timer` (which outlives DDP) to the reducer's events, with the parameter names of its marks:
  /// grad-ready marks, the finalize phase, the buckets' spans of every step it times; with bucketCapBytes 0, the first step is its profile.
  void observe(runtime::StepTimer& timer);
  /// Zeroes the gradient buckets; call before the first backward of a step.
  void prepareStep();
  /// Before a micro-batch's forward: whether its backward syncs (the last of a step), and its input ids (for a
  /// row-sparse parameter, RowSparseHook::addRowIds; ignored without one).
  void beginMicroBatch(const Tensor& inputs, bool requireSync);
  /// With a row-sparse parameter: this micro-batch's input ids, every micro-batch (RowSparseHook::addRowIds).
  void addRowIds(const Tensor& ids);
  /// false for micro-batches that only accumulate locally; true before the last one.
  void setRequireSync(bool sync) { reducer_->setRequireSync(sync); }
  /// Waits for the averaged gradients (see Reducer::finalize). With rebuildBuckets, the first call then
  /// rebuilds the buckets (a collective: every rank gets rank 0's ready order, so the plans stay
  /// identical); the averaged gradients keep their values.
  void finalize();
  /// After finalize: enqueues `clipper`'s global norm (and clip coefficient) of the averaged gradients, the
  /// same bits on every rank. ZeRO-1: each rank's partial sums over its gradient shards, all-gathered and
  /// added in rank order (a collective).
  void computeGradNorm(optim::GradClipper& clipper);
  /// After the step closed (the optimizer's update, the timer's endStep). With bucketCapBytes 0, the first
  /// call chooses the cap from the timed step (a collective; synchronises) and re-plans. Returns what changed
  /// in the plan since the last call, for the first rank to print (the cap chosen and the new plan, or the
  /// plan rebuilt from the ready order); empty when nothing did.
  std::string endStep();
  /// The bucket cap in use (bytes): the option's, or the one auto chose.
  size_t bucketCapBytes() const { return opts_.bucketCapBytes; }
  /// The bucket plan as text (bucket, bytes, parameter names), for printing.
  std::string describePlan() const { return plan().describe(); }
  /// The comm hook's checkpoint state (a collective; rank 0 gets it) and its restore (every rank).
  HookState hookState() { return reducer_->hook().checkpointState(*comm_); }
  /// The comm hook (its state schema, for the checks before a resume).
  const CommHook& hook() const { return reducer_->hook(); }
  void restoreHookState(const std::function<Tensor(const std::string&)>& find) {
    reducer_->hook().restoreState(find, *comm_);
  }
  /// The comm hook's signature (commHookSignature): what a saved state must match to continue.
  std::string hookSignature() const { return commHookSignature(opts_.commHook); }
  /// The row-sparse parameter's bucket; -1 when there is none.
  int rowBucket() const { return rows_ ? static_cast<int>(rows_->bucket()) : -1; }
  /// Between steps: re-plans the buckets in registration order under new caps (bytes); the gradients keep
  /// their values (--bucket-mb auto). Not with ZeRO-1, whose optimizer holds views of the buckets.
  void replan(size_t capBytes, size_t firstCapBytes);
  /// Name, size and dtype per parameter, in registration order: what the plans are computed from.
  const std::vector<ParamInfo>& parameterInfos() const { return infos_; }
  /// Whether the last finalize() rebuilt the buckets (plan() is the new plan then).
  bool rebuiltLastStep() const { return rebuiltLastStep_; }

  const BucketPlan& plan() const { return reducer_->plan(); }
  int zeroStage() const { return opts_.zeroStage; }
  const nn::NamedParameters& parameters() const { return params_; }
  Communicator& communicator() const { return *comm_; }
  /// Elements of gradient this rank holds between steps (ZeRO-2/3: its shards).
  int64_t gradientElements() const { return reducer_->gradientElements(); }
  Reducer& reducer() { return *reducer_; }
  const Reducer& reducer() const { return *reducer_; }

 private:
  nn::NamedParameters params_;
  std::shared_ptr<Communicator> comm_;
  DdpOptions opts_;
  std::vector<ParamInfo> infos_;
  std::unique_ptr<Reducer> reducer_;
  RowSparseHook* rows_ = nullptr;                  // the reducer's hook, with a row-sparse parameter
  std::vector<Variable::HookHandle> gradHooks_;  // per parameter: its grad-ready hook that feeds the reducer
  bool rebuildPending_;
  bool rebuiltLastStep_ = false;
  std::shared_ptr<StepTimerObserver> timerObserver_;  // observe()
  runtime::StepTimer* timer_ = nullptr;
  std::unique_ptr<AutoBucketCap> autoCap_;    // bucketCapBytes 0, until the first endStep()
  std::string report_;                        // endStep()'s
};

/// The lines DDP compares across ranks: "name dtype [shape]" per parameter, in registration order.
std::string parameterSignature(const nn::NamedParameters& params);
/// The DDP options as one line, compared across ranks with the bucket plan and the parameters.
std::string optionsSignature(const DdpOptions& opts);

}  // namespace minidp::distributed
