// Reducer: gradients live in flat bucket buffers; each bucket is averaged over the ranks as soon as all
// of its gradients are final, strictly in bucket index order.
//
// Gradient convention (the one place it is stated for data-parallel training): prepareStep() zeroes
// every bucket, backward ACCUMULATES (+=) into each parameter's gradient, which is a view into its
// bucket (no copy; the zeroed views are marked, Variable::markGradZero, so an op's first contribution may
// overwrite the zeros, a GEMM with beta 0, which gives the same sums), and finalize() leaves the rank-averaged
// gradients there (under reduce-scatter, ZeRO-1: only in this rank's shard of each bucket; see zero.h).
//
// Sharded gradients (ZeRO-2 and 3, Reducer::shardGradients): the parameters' gradients are their own tensors
// (backward's first contribution makes them, later ones add), not views. When bucket b launches, its
// gradients are copied into a scratch buffer (two, used in turn by consecutive buckets) and released, and
// the scratch is reduce-scattered; before the scratch is used again, the compute stream (CPU: the host) waits
// for that reduce-scatter and copies this rank's shard out into gradShard(b), the only gradient kept.
//
// A step: prepareStep(); [setRequireSync(false); backward of micro-batches 1..K-1;] setRequireSync(true);
// backward of the last micro-batch (hooks call markReady); finalize(). With K micro-batches each
// computing a mean loss, the caller scales the loss by 1/K; the reducer only averages over ranks.
//
// What travels for a bucket is the comm hook's business (comm_hook.h): the reducer hands it each complete
// bucket, in bucket order, and waits for the work it returns. Observers (the step timer) subscribe to the
// reducer's events; nothing else installs grad-ready hooks or reaches into the buckets while a step runs.
//
// Between two steps, rebuild() can replace the plan (DDP does it once, after the first step, from the
// ready order the reducer observed): the gradients move to new buckets with their values.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/distributed/gradient/bucket_plan.h"
#include "framework/distributed/gradient/comm_hook.h"
#include "framework/distributed/comm/communicator.h"
#include "framework/nn/module.h"

namespace minidp::distributed {

/// What happened to one bucket in the last step (host ms, hostNowMs()); `work` gives the collective's
/// own timings once the step has been synchronised.
struct BucketTiming {
  int bucket = 0;
  size_t bytes = 0;
  double readyMs = -1;   // its last gradient became ready (the hook fired)
  double launchMs = -1;  // its all-reduce was issued
  std::shared_ptr<Work> work;
};

/// What a reducer's events reach (Reducer::subscribe): called on the thread that runs backward, in a synced
/// step. Must not block or read gradient values.
class ReducerObserver {
 public:
  virtual ~ReducerObserver() = default;
  /// Parameter `index`'s gradient is enqueued (its grad-ready hook fired).
  virtual void gradReady(size_t index) { (void)index; }
  /// finalize(): every bucket is launched and the waits begin; what follows until finalize returns is the
  /// exposed communication.
  virtual void waitsBegin() {}
};

/// When the buckets are all-reduced: each as soon as it is complete, during backward (--overlap on), or
/// all at finalize, after backward (--overlap off; PyTorch's delay_all_reduce). The bits are the same.
enum class Overlap { DuringBackward, AfterBackward };
/// The flag's name of `mode`: "on" or "off".
const char* overlapName(Overlap mode);
/// Name -> mode, the one table overlapName reads (and --overlap's parse).
const std::map<std::string, Overlap>& overlapModes();

/// Owns the bucket buffers for as long as it lives (a comm stream never reads memory the allocator
/// reused) and launches their all-reduces.
class Reducer {
 public:
  /// Allocates the buckets of `plan` on the parameters' device (Communicator::allocateCommBuffer) and
  /// installs each parameter's gradient as a view into its bucket (padded to a multiple of the world size
  /// under reduce-scatter); `overlap` says when the buckets are launched; `hook` (default: allreduce)
  /// reduces each bucket.
  /// `shardGradients` (ZeRO-2/3, with Reduction::ReduceScatter): the gradients are the parameters' own
  /// tensors and each bucket is reduce-scattered from a scratch buffer into gradShard(b) (above).
  Reducer(nn::NamedParameters params, BucketPlan plan, std::shared_ptr<Communicator> comm, Overlap overlap,
          Reduction reduction = Reduction::AllReduce, std::unique_ptr<CommHook> hook = nullptr,
          bool shardGradients = false);
  /// Destroyed between a launch and finalize() (an exception in backward or in finalize): CUDA makes the
  /// compute stream wait on every launched all-reduce, so the buckets go back to the allocator (which
  /// reuses blocks in compute-stream order) only after the comm stream is done with them. Logs errors.
  ~Reducer();
  Reducer(const Reducer&) = delete;  // hooks hold its address
  Reducer& operator=(const Reducer&) = delete;

  /// Starts a step: zeroes the buckets and forgets which gradients were ready (and their order).
  void prepareStep();
  /// false: markReady does nothing (micro-batches accumulate locally); true: the next backward syncs.
  void setRequireSync(bool sync) { requireSync_ = sync; }
  bool requireSync() const { return requireSync_; }
  /// Parameter `index` (registration order) has its final gradient enqueued. Launches every bucket that
  /// is complete and whose predecessors are launched. Throws if it was already marked in this step.
  void markReady(size_t index);
  /// Launches the buckets not launched yet (in order), tells the observers the waits begin, and waits for
  /// every bucket's reduction (CUDA: the compute stream waits; CPU: the host waits). Throws, naming it, if a
  /// parameter got no gradient.
  void finalize();

  /// Adds an observer of the reducer's events; returns the handle that removes it.
  uint64_t subscribe(std::shared_ptr<ReducerObserver> observer);
  /// Removes the observer `handle` names (an unknown handle is an error).
  void unsubscribe(uint64_t handle);
  /// The comm hook that reduces the buckets.
  CommHook& hook() { return *hook_; }
  const CommHook& hook() const { return *hook_; }

  /// Between steps: replaces the plan, allocates its buckets and moves every parameter's gradient, with
  /// its current values, into its new view; the old buckets go back once nothing uses them.
  void rebuild(BucketPlan plan);

  const BucketPlan& plan() const { return plan_; }
  /// Registration indices in the order markReady counted them in the current (or last) synced step.
  const std::vector<int>& readyOrder() const { return readyOrder_; }
  Reduction reduction() const { return reduction_; }
  /// The flat buffer of bucket `b`: plan().buckets[b].numel elements, padded to a multiple of the world
  /// size under reduce-scatter (the padding is zero before and after the reduction).
  /// Sharded gradients: the scratch buffer bucket `b` is reduced in (shared with other buckets).
  const Tensor& bucketBuffer(size_t b) const { return buckets_.at(b).buffer; }
  /// After finalize, under reduce-scatter: this rank's shard of bucket `b`'s averaged gradients (a view of the
  /// bucket, or with sharded gradients the shard the reducer keeps).
  Tensor gradShard(size_t b) const;
  bool shardsGradients() const { return shardGradients_; }
  /// Elements of gradient this rank holds between steps: the buckets, or the shards and the scratch buffers.
  int64_t gradientElements() const;
  /// Timings of the buckets in the last step, indexed by bucket (bytes: what the hook says it stands for).
  const std::vector<BucketTiming>& lastStepTimings() const { return timings_; }

 private:
  /// Allocates the buckets of plan_ and installs each parameter's gradient as a view into its bucket,
  /// copying the current gradient into it when `keepGradients`; hands the buckets to the hook.
  void installBuckets(bool keepGradients);
  void launchCompleted();
  void launch(size_t b);
  /// Sharded gradients: waits for the reduce-scatter that last used scratch `slot` and copies its shard out.
  void drainScratch(size_t slot);
  nn::NamedParameters params_;
  BucketPlan plan_;
  std::shared_ptr<Communicator> comm_;
  Overlap overlap_;
  Reduction reduction_;
  std::unique_ptr<CommHook> hook_;
  bool requireSync_ = true;
  bool stepOpen_ = false;
  bool shardGradients_ = false;
  std::vector<GradBucket> buckets_;
  std::vector<Tensor> scratch_;                     // sharded gradients: the buffers buckets are reduced in
  std::vector<Tensor> shards_;                      // sharded gradients: per bucket, this rank's shard
  std::vector<std::pair<int, std::shared_ptr<Work>>> scratchUse_;  // per scratch: bucket and its reduction
  std::vector<bool> marked_;
  std::vector<int> readyOrder_;
  std::vector<size_t> pending_;  // per bucket: gradients not yet ready in this step
  size_t nextLaunch_ = 0;        // buckets [0, nextLaunch_) are launched
  std::vector<BucketTiming> timings_;
  std::vector<std::pair<uint64_t, std::shared_ptr<ReducerObserver>>> observers_;
  uint64_t nextObserver_ = 0;
};

}  // namespace minidp::distributed
