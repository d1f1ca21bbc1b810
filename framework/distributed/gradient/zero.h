// ZeRO-1: the optimizer state is sharded over the ranks. The reducer reduce-scatters each gradient bucket
// (DdpOptions::zeroStage = 1), so after finalize() each rank holds the averaged gradient of its shard of
// every bucket; ShardedOptimizer moves the parameters into flat buffers laid out like the gradient
// buckets (same offsets, same padding), updates only this rank's shard of each with an ordinary optimizer
// over shard views, and all-gathers the updated shards, so every rank ends the step with the same bits.
// Checkpoints hold plain DDP's full state tensors under the same names: the shards are all-gathered for
// rank 0 to write, and a restore keeps each rank's shard of them, so a state moves between ZeRO-1 and
// plain DDP and between rank counts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/distributed/gradient/ddp.h"
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
  ShardedOptimizer(DistributedDataParallel& ddp, const std::string& name, double lr, double weightDecay,
                   ZeroGather gather);
  /// Updates this rank's shards from the averaged gradient shards, then all-gathers the parameters; the
  /// compute stream (CPU: the host) waits for every gather before returning (ZeroGather::Forward: at the
  /// parameters' next use).
  void step() override;
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
  /// Keeps this rank's shard of the full state tensors `saved` returns (no communication).
  void restoreState(const SavedState& saved) override;

 protected:
  /// Holds no parameters of its own: the per-bucket optimizers launch the updates.
  void launch(const Tensor&, int64_t) override {}

 private:
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
