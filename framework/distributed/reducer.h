// Reducer: gradients live in flat bucket buffers; each bucket is averaged over the ranks as soon as all
// of its gradients are final, strictly in bucket index order.
//
// Gradient convention (the one place it is stated for data-parallel training): prepareStep() zeroes
// every bucket, backward ACCUMULATES (+=) into each parameter's gradient, which is a view into its
// bucket (no copy), and finalize() leaves the rank-averaged gradients there (under reduce-scatter, ZeRO-1:
// only in this rank's shard of each bucket; see zero.h).
//
// A step: prepareStep(); [setRequireSync(false); backward of micro-batches 1..K-1;] setRequireSync(true);
// backward of the last micro-batch (hooks call markReady); finalize(). With K micro-batches each
// computing a mean loss, the caller scales the loss by 1/K; the reducer only averages over ranks.
//
// Row-sparse parameter (BucketReduction::rowSparse, --sparse-embedding-grad): a (V, C) parameter indexed by
// the input tokens, so only the rows of the step's tokens have a non-zero gradient on any rank. It has a
// bucket of its own. Every micro-batch, addRowIds keeps a copy of this rank's token ids. When its bucket is
// launched, this rank lists its distinct rows (increasing; padded with -1 to K, its number of ids in the
// step, which every rank shares) and packs them into (K, C) in the wire's type (fp32, or bf16 with bf16 on
// the wire), on the compute stream. The lists and the packed rows are all-gathered; then, on the comm stream
// (thread), inside the collective's work so that the usual wait covers it, every rank adds all ranks' rows
// into the zeroed gradient in rank order and scales it by 1 / world: the same bits on every rank, with
// overlap on or off. Each rank receives (world - 1) x K rows, where a ring all-reduce of the whole
// gradient moves 2 (world - 1) / world x V: when K x world >= 2 V (or alone) that step reduces the bucket
// densely. Every rank must pass as many ids per step (checked whenever K changes).
//
// Between two steps, rebuild() can replace the plan (DDP does it once, after the first step, from the
// ready order the reducer observed): the gradients move to new buckets with their values.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/distributed/bucket_plan.h"
#include "framework/distributed/communicator.h"
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

/// How the buckets are reduced: the wire precision, and all-reduce (DDP) or reduce-scatter (ZeRO-1, where
/// each bucket is padded to a multiple of the world size so that every rank's shard is contiguous).
struct BucketReduction {
  GradComm wire = GradComm::Fp32;
  Reduction reduction = Reduction::AllReduce;
  /// Registration index of the row-sparse parameter (reduced by rows, see above); -1: none.
  int rowSparse = -1;
};

/// When the buckets are all-reduced: each as soon as it is complete, during backward (--overlap on), or
/// all at finalize, after backward (--overlap off; PyTorch's delay_all_reduce). The bits are the same.
enum class Overlap { DuringBackward, AfterBackward };
/// The flag's name of `mode`: "on" or "off".
const char* overlapName(Overlap mode);
/// Name -> mode, the one table overlapName reads (CLI11's CheckedTransformer takes it).
const std::map<std::string, Overlap>& overlapModes();

/// Owns the bucket buffers for as long as it lives (a comm stream never reads memory the allocator
/// reused) and launches their all-reduces.
class Reducer {
 public:
  /// Allocates the buckets of `plan` on the parameters' device and installs each parameter's gradient
  /// as a view into its bucket; `overlap` says when the buckets are launched.
  /// bf16 on the wire allocates a bf16 copy of each bucket, once, for the collectives.
  Reducer(nn::NamedParameters params, BucketPlan plan, std::shared_ptr<Communicator> comm, Overlap overlap,
          BucketReduction reduction = {});
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
  /// Row-sparse parameter only: the row ids (int32, any shape, on the parameters' device) one micro-batch of
  /// this step indexes it with; starts their all-gather. Call it every micro-batch, before the row-sparse
  /// bucket is launched, with the same number of ids on every rank.
  void addRowIds(const Tensor& ids);
  /// Parameter `index` (registration order) has its final gradient enqueued. Launches every bucket that
  /// is complete and whose predecessors are launched. Throws if it was already marked in this step.
  void markReady(size_t index);
  /// Launches the buckets not launched yet (in order), and waits for every bucket's all-reduce (CUDA:
  /// the compute stream waits; CPU: the host waits). Throws, naming it, if a parameter got no gradient.
  /// `beforeWaits`, when set, runs after the last launch and just before the first wait: a timer mark
  /// there and one after finalize returns bracket exactly the wait, i.e. the exposed communication.
  void finalize(const std::function<void()>& beforeWaits = nullptr);

  /// Between steps: replaces the plan, allocates its buckets and moves every parameter's gradient, with
  /// its current values, into its new view; the old buckets go back once nothing uses them.
  void rebuild(BucketPlan plan);

  const BucketPlan& plan() const { return plan_; }
  /// Registration indices in the order markReady counted them in the current (or last) synced step.
  const std::vector<int>& readyOrder() const { return readyOrder_; }
  const BucketReduction& reduction() const { return reduction_; }
  /// The flat buffer of bucket `b`: plan().buckets[b].numel elements, padded to a multiple of the world
  /// size under reduce-scatter (the padding is zero before and after the reduction).
  const Tensor& bucketBuffer(size_t b) const { return buffers_.at(b); }
  /// The row-sparse parameter's bucket; -1 when there is none.
  int rowBucket() const { return reduction_.rowSparse < 0 ? -1 : plan_.slots[reduction_.rowSparse].bucket; }
  /// Timings of the buckets in the last step, indexed by bucket.
  const std::vector<BucketTiming>& lastStepTimings() const { return timings_; }

 private:
  /// Allocates the buckets of plan_ and installs each parameter's gradient as a view into its bucket,
  /// copying the current gradient into it when `keepGradients`.
  void installBuckets(bool keepGradients);
  void launchCompleted();
  void launch(size_t b);
  /// The row-sparse bucket's reduction: lists and packs this rank's rows, all-gathers every rank's, adds
  /// them (or reduces the whole bucket when that moves fewer bytes).
  std::shared_ptr<Work> reduceRows(size_t b, const Tensor& wire, const std::string& tag);
  nn::NamedParameters params_;
  BucketPlan plan_;
  std::shared_ptr<Communicator> comm_;
  Overlap overlap_;
  BucketReduction reduction_;
  bool requireSync_ = true;
  bool stepOpen_ = false;
  std::vector<Tensor> buffers_;
  std::vector<Tensor> wires_;  // bf16 on the wire: per bucket, the bf16 copy the collective sends
  std::vector<bool> marked_;
  std::vector<int> readyOrder_;
  std::vector<size_t> pending_;  // per bucket: gradients not yet ready in this step
  size_t nextLaunch_ = 0;        // buckets [0, nextLaunch_) are launched
  std::vector<BucketTiming> timings_;
  // Row-sparse parameter: this step's ids, a copy per micro-batch; the row marks (V), this rank's row list
  // (K) and packed rows (K x C, in the wire's type), and every rank's list and rows, all-gathered.
  std::vector<Tensor> rowIds_;
  Tensor rowMarks_, rowList_, packed_, gatheredIds_, gatheredRows_;
  std::shared_ptr<Work> rowIdsWork_;  // the ids' all-gather of this step, until finalize waited on it
};

}  // namespace minidp::distributed
