// DistributedDataParallel: the data-parallel wrapper of a parameter list. At construction it checks that
// every rank holds the same parameters, copies rank 0's values to every rank, plans the buckets and
// installs a grad-ready hook per parameter that feeds the reducer. Model-agnostic: it sees only
// (name, Variable) pairs. Optionally (rebuildBuckets), the first step's finalize re-plans the buckets in
// the order the gradients really became ready, so that buckets match the real backward.
#pragma once

#include <memory>

#include "framework/distributed/gradient/bucket_plan.h"
#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/gradient/hooks/row_sparse.h"
#include "framework/distributed/gradient/reducer.h"
#include "framework/optim/grad_clip.h"
#include "framework/nn/module.h"

namespace minidp::distributed {

/// Settings of the data-parallel wrapper, one type from the flags (train::Options holds one) to the reducer.
struct DdpOptions {
  /// When the buckets are all-reduced (reducer.h); the bits are the same either way.
  Overlap overlap = Overlap::DuringBackward;
  /// Bucket caps in bytes (bucket_plan.h); the flags' MiB are converted where they are parsed.
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

/// One step: prepareStep(); setRequireSync(...) and backward per micro-batch; finalize(); optimizer.
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

  /// Zeroes the gradient buckets; call before the first backward of a step.
  void prepareStep() { reducer_->prepareStep(); }
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
  /// The comm hook's checkpoint state (a collective; rank 0 gets it) and its restore (every rank).
  HookState hookState() { return reducer_->hook().checkpointState(*comm_); }
  void restoreHookState(const std::function<Tensor(const std::string&)>& find) {
    reducer_->hook().restoreState(find, *comm_);
  }
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
};

/// The lines DDP compares across ranks: "name dtype [shape]" per parameter, in registration order.
std::string parameterSignature(const nn::NamedParameters& params);
/// The DDP options as one line, compared across ranks with the bucket plan and the parameters.
std::string optionsSignature(const DdpOptions& opts);

}  // namespace minidp::distributed
