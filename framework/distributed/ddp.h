// DistributedDataParallel: the data-parallel wrapper of a parameter list. At construction it checks that
// every rank holds the same parameters, copies rank 0's values to every rank, plans the buckets and
// installs a grad-ready hook per parameter that feeds the reducer. Model-agnostic: it sees only
// (name, Variable) pairs.
#pragma once

#include <memory>

#include "framework/distributed/bucket_plan.h"
#include "framework/distributed/communicator.h"
#include "framework/distributed/reducer.h"
#include "framework/nn/module.h"

namespace minidp::distributed {

/// Settings of the data-parallel wrapper (caps in MiB, see bucket_plan.h).
struct DdpOptions {
  /// All-reduce buckets during backward (on) or after it (off); the bits are the same either way.
  bool overlap = true;
  double bucketMb = 25;
  double firstBucketMb = 1;
};

/// One step: prepareStep(); setRequireSync(...) and backward per micro-batch; finalize(); optimizer.
/// The gradient convention is the reducer's (reducer.h): buckets zeroed at prepareStep, backward adds.
class DistributedDataParallel {
 public:
  /// Collective: every rank must construct it with the same parameter names, shapes and dtypes, else
  /// every rank throws an error naming the first difference. Then rank 0's values are broadcast.
  DistributedDataParallel(nn::NamedParameters params, std::shared_ptr<Communicator> comm, DdpOptions opts = {});
  /// Removes the grad-ready hooks from the parameters (all of their hooks: DDP owns them while alive).
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Zeroes the gradient buckets; call before the first backward of a step.
  void prepareStep() { reducer_->prepareStep(); }
  /// false for micro-batches that only accumulate locally; true before the last one.
  void setRequireSync(bool sync) { reducer_->setRequireSync(sync); }
  /// Waits for the averaged gradients (see Reducer::finalize, also for `beforeWaits`).
  void finalize(const std::function<void()>& beforeWaits = nullptr) { reducer_->finalize(beforeWaits); }

  const BucketPlan& plan() const { return reducer_->plan(); }
  Communicator& communicator() const { return *comm_; }
  Reducer& reducer() { return *reducer_; }
  const Reducer& reducer() const { return *reducer_; }

 private:
  nn::NamedParameters params_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<Reducer> reducer_;
};

/// The lines DDP compares across ranks: "name dtype [shape]" per parameter, in registration order.
std::string parameterSignature(const nn::NamedParameters& params);

}  // namespace minidp::distributed
