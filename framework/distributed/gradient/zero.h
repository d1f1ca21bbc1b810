// ZeRO-1: the optimizer state is sharded over the ranks. The reducer reduce-scatters each gradient bucket
// (DdpOptions::zeroStage = 1), so after finalize() each rank holds the averaged gradient of its shard of
// every bucket; ShardedOptimizer moves the parameters into flat buffers laid out like the gradient
// buckets (same offsets, same padding), updates only this rank's shard of each with an ordinary optimizer
// over shard views, and all-gathers the updated shards, so every rank ends the step with the same bits.
// Checkpoints hold plain DDP's full state tensors under the same names: the shards are all-gathered for
// rank 0 to write, and a restore keeps each rank's shard of them, so a state moves between ZeRO-1 and
// plain DDP and between rank counts.
//
// ZeRO-2 (DdpOptions::zeroStage = 2): the same optimizer; the reducer keeps only the gradient shards.
//
// ZeRO-3 (zeroStage = 3): the parameters are sharded too. The plan has one bucket per unit (planUnits: a
// block of a module list; the embeddings before the first block, the final norm and head with the last one).
// A rank keeps its shard of each unit; the unit's full buffer holds memory only while gathered
// (Tensor::releaseMemory keeps the block that the parameters' and autograd's tensors refer to).
// Forward: the first read of a parameter of unit u (Variable::setBeforeUse) gathers u if it is not gathered
// yet and waits for it, issues the gathers of the next `prefetch` units on the comm stream (thread), so that
// they run while u computes, and frees unit u-1 (not with keepGathered, FSDP2's reshard_after_forward=False,
// nor while micro-batches accumulate without sync, whose backward the reducer does not report). The last unit
// is never freed in forward: backward starts with it. Backward (a reducer observer): once every gradient of
// unit u is ready, unit u-1 computes next: gather it if it is not, issue the gathers of the `prefetch` units
// before it, wait for it, and free u. step() updates the shards and frees every unit; the next read gathers
// again. With a parameter dtype (FSDP2's MixedPrecisionPolicy param_dtype, bf16) each rank casts its shard into a
// wire buffer of that dtype, the wire buffer is gathered (half fp32's bytes), and the wait casts it back into the
// unit's buffer: forward and backward read every parameter rounded to bf16 on every rank, the shards and their
// update stay in the parameter dtype. Where the ops' bf16 copies of the weights come from weightCopies, they are
// views of the wire buffer, which then stays while the unit is gathered: no cast is made and none is kept from
// forward to backward (autograd keeps the view; backward gathers the unit again before it reads it); a copy with
// padding rows (the head's, at a vocabulary not a multiple of 64) is still a cast. Checkpoints gather every unit
// exactly, in the parameter dtype (a collective), and keep them until releaseAll (after the checkpoint) or the
// step. A gather is a collective:
// code that reads parameter values on some ranks only (rank 0 printing, saving) must gatherAll on every rank
// first; shapes, dtypes and counts never gather (Module::numParameters counts from the shapes).
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/distributed/gradient/ddp.h"
#include "framework/ops/compute_copies.h"
#include "framework/optim/optimizer.h"

namespace minidp::distributed {

/// When the updated parameter shards are all-gathered.
enum class ZeroGather {
  /// After every shard is updated: the gathers start at the end of the step.
  End,
  /// Bucket by bucket, each gather launched as soon as its shard is updated, so it runs while the next
  /// shards are updated (an event per bucket; step() waits on all of them).
  Overlap,
  /// As Overlap, in the forward's order (the last bucket, with the first-registered parameters, first),
  /// and step() returns at once: each parameter waits for its bucket's gather where the next forward
  /// (or anything else) first reads it (Variable::setBeforeUse), so the gathers run beside that forward.
  Forward,
};

/// The optimizer of a ZeRO-1 step, over the buckets of `ddp` (whose reducer must reduce-scatter).
class ShardedOptimizer : public optim::Optimizer {
 public:
  /// Moves every parameter of `ddp` into the flat parameter buffers (values kept) and builds optimizer
  /// `name` (optim::makeOptimizer) over this rank's shard of each bucket: state for 1/N of the elements.
  /// ZeRO-3 (ddp.zeroStage() == 3): `prefetch` units' gathers in flight ahead of the one computing (>= 1),
  /// `keepGathered`: a unit gathered in forward stays until its backward is done.
  /// `paramDType`: the dtype units are gathered and computed in (BF16, or none: the parameters' own).
  ShardedOptimizer(DistributedDataParallel& ddp, const std::string& name, double lr, double weightDecay,
                   ZeroGather gather, int prefetch = 1, bool keepGathered = false,
                   std::optional<DType> paramDType = std::nullopt);
  /// ZeRO-3: removes its observer from the reducer (by its handle); `ddp` must still be alive.
  ~ShardedOptimizer() override;
  /// Updates this rank's shards from the averaged gradient shards, then all-gathers the parameters; the
  /// compute stream (CPU: the host) waits for every gather before returning (ZeroGather::Forward: at the
  /// parameters' next use).
  void step() override;
  /// ZeRO-3: frees every unit and counts the next backward's gradients afresh, as step() does.
  void skipStep() override;
  /// Elements of optimizer state this rank holds, and what one unsharded optimizer would hold.
  int64_t stateElements() const { return stateElements_; }
  int64_t unshardedStateElements() const { return unshardedStateElements_; }
  /// The full state of every parameter, as plain DDP's optimizer names it, on rank 0 (host tensors; other
  /// ranks get none): each bucket's state shards all-gathered in turn. A collective.
  std::vector<std::pair<std::string, Tensor>> checkpointState() override;
  /// The per-bucket optimizers' state names (what checkpointState writes per parameter).
  const std::vector<std::string>& stateNames() const override {
    return inner_.empty() ? optim::Optimizer::stateNames() : inner_.front()->stateNames();
  }
  /// Keeps this rank's shard of the full state tensors `saved` returns (no communication). ZeRO-3: also takes
  /// this rank's parameter shards from the full parameters (gathered by gatherAll before they were loaded),
  /// then frees the units (releaseAll).
  void restoreState(const SavedState& saved) override;
  /// ZeRO-3: gathers every unit exactly (in the parameter dtype, whatever paramDType) and keeps them until
  /// releaseAll or the next step (a collective: before a checkpoint is written or loaded). Other stages: nothing.
  void gatherAll();
  /// ZeRO-3: frees every unit (after gatherAll's readers are done); the next read gathers it again, in
  /// paramDType. Other stages: nothing.
  void releaseAll();
  /// Elements of parameters this rank holds between steps (ZeRO-3: its shards).
  int64_t parameterElements() const;
  /// ZeRO-3 with a bf16 parameter dtype: the source of the ops' bf16 weight copies (ops::weightCopy), views of
  /// the gathered bf16 buffers, no cast; else null. From this call on a unit's bf16 buffer stays while the unit is
  /// gathered (without it the buffer goes once cast back): install the source (ops::WeightCopySource::Installed)
  /// around the forwards.
  ops::WeightCopySource* weightCopies() {
    keepWire_ = copies_ != nullptr;
    return copies_.get();
  }
  /// ZeRO-3: the units whose memory is there now (gathered, or a gather in flight).
  size_t gatheredUnits() const { return static_cast<size_t>(std::count(gathered_.begin(), gathered_.end(), true)); }

 protected:
  /// Holds no parameters of its own: the per-bucket optimizers launch the updates.
  void launch(const Tensor&, int64_t) override {}

 private:
  class BackwardObserver;
  class GatheredCopies;
  // The bf16 view of `param` in its unit's gathered bf16 buffer (`rows` as ops::weightCopy: 0 or param's own),
  // or undefined where there is none (not a parameter, a unit gathered exactly, another row count).
  Tensor gatheredCopy(const Tensor& param, int64_t rows) const;
  // ZeRO-3.
  void gather(size_t b, bool exact = false);  // issues the gather of bucket b's unit (its memory back, its
                                              // shard in place; exact: in the parameter dtype)
  void waitGathered(size_t b);    // orders the compute stream (CPU: the host) after that gather (a wire
                                  // gather: casts the wire buffer into the unit's)
  void release(size_t b);         // frees the unit's memory; the next read of its parameters gathers again
  void armForward(size_t b);      // the before-use hooks of the unit's parameters
  void forwardUse(size_t b);      // a parameter of unit b is read (forward, evaluation, a copy)
  void unitGradsReady(size_t b);  // every gradient of unit b is ready in this backward
  bool sharded_ = false;          // ZeRO-3
  int prefetch_ = 1;
  bool keepGathered_ = false;
  bool holdAll_ = false;                 // gatherAll: every unit stays until the step
  uint64_t observer_ = 0;                // ZeRO-3: its BackwardObserver's handle
  DistributedDataParallel* ddp_ = nullptr;
  std::vector<int> forwardOrder_;        // ZeRO-3: the units' buckets, in forward order
  std::vector<int> forwardPosition_;     // per bucket: its place in forwardOrder_
  std::vector<bool> gathered_;           // per bucket: its memory is there (a gather issued or done)
  std::vector<Tensor> shardData_;        // ZeRO-3, per bucket: this rank's parameter shard (own memory)
  std::optional<DType> paramDType_;      // ZeRO-3: the gathers' dtype where not the parameters'
  std::vector<Tensor> wire_;             // per bucket (paramDType_): the gather's buffer (memory: see keepWire_)
  std::vector<bool> onWire_;             // per bucket: its pending gather is into wire_ (cast back at the wait)
  std::unique_ptr<ops::WeightCopySource> copies_;  // bf16 paramDType_: gatheredCopy for the ops
  bool keepWire_ = false;                          // weightCopies() was asked for: wire_ stays while gathered
  std::vector<int> unitOfParam_;         // per parameter: its bucket
  std::vector<size_t> gradsPending_;     // per bucket: gradients not ready yet in this backward
  Communicator& comm_;
  ZeroGather gather_;
  std::vector<Variable> params_;                  // registration order (ZeroGather::Forward's hooks)
  std::vector<std::shared_ptr<Work>> pending_;    // per bucket: its last gather, until a step waited on it
  BucketPlan plan_;
  std::vector<Shape> shapes_;                             // per parameter, registration order
  std::vector<Tensor> flat_;                              // per bucket: the parameters, padded
  std::vector<Variable> shards_;                          // per bucket: this rank's shard, grad = gradient shard
  std::vector<std::unique_ptr<optim::Optimizer>> inner_;  // per bucket: the optimizer of its shard
  int64_t stateElements_ = 0, unshardedStateElements_ = 0;
};

}  // namespace minidp::distributed
