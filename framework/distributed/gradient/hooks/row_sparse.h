// The row-sparse comm hook (--sparse-embedding-grad): a (V, C) parameter indexed by the input tokens, so
// only the rows of the step's tokens have a non-zero gradient on any rank. It has a bucket of its own
// (ParamInfo::solo); every other bucket goes to the wrapped hook. Every micro-batch, addRowIds keeps a copy
// of this rank's token ids. When its bucket is reduced, this rank lists its distinct rows (increasing; padded
// with -1 to K, its number of ids in the step, which every rank shares) and packs them into (K, C) in the
// wrapped hook's wire type (CommHook::wireDType: bf16 under bf16), on the comm stream (thread). The lists and the
// packed rows are all-gathered; then every rank adds all ranks' rows into the zeroed gradient in rank order
// and scales it by 1 / world: the same bits on every rank, with overlap on or off. Each rank receives
// (world - 1) x K rows, where a ring all-reduce of the whole gradient moves 2 (world - 1) / world x V: when
// K x world >= 2 V (or alone) that step's bucket goes to the wrapped hook. Every rank must pass as many ids
// per step (checked whenever K changes).
#pragma once

#include <memory>

#include "framework/distributed/gradient/comm_hook.h"

namespace minidp::distributed {

class RowSparseHook : public CommHook {
 public:
  /// `param`: the row-sparse parameter's registration index; `inner` reduces every other bucket.
  RowSparseHook(std::unique_ptr<CommHook> inner, int param);
  std::string name() const override { return "rows+" + inner_->name(); }
  /// The wrapped hook's: the rows travel in it too.
  DType wireDType(DType grad) const override { return inner_->wireDType(grad); }
  /// The wrapped hook's (the row bucket's cost depends on the step's tokens: the trainer models it from the
  /// rows its first step moved).
  WireCost wireCost(const std::vector<Shape>& shapes, DType grad, int world) const override {
    return inner_->wireCost(shapes, grad, world);
  }
  /// Finds the parameter's bucket (which it must have alone, under all-reduce) and sets up the inner hook.
  void setup(const std::vector<GradBucket>& buckets, Communicator& comm) override;
  void beginStep() override;
  /// The ids (int32, any shape, on the parameters' device) one micro-batch of this step indexes the
  /// parameter with. Call it every micro-batch, before its bucket is reduced, with as many ids on every rank.
  void addRowIds(const Tensor& ids);
  std::shared_ptr<Work> reduce(const GradBucket& bucket, Communicator& comm) override;
  void endStep() override { inner_->endStep(); }
  HookState checkpointState(Communicator& comm) override { return inner_->checkpointState(comm); }
  std::vector<nn::StateRule> stateSchema(int world, int64_t steps) const override {
    return inner_->stateSchema(world, steps);
  }
  void restoreState(const std::function<Tensor(const std::string&)>& find, Communicator& comm) override {
    inner_->restoreState(find, comm);
  }
  /// The row bucket's index in the current plan.
  size_t bucket() const { return bucket_; }

 private:
  std::unique_ptr<CommHook> inner_;
  int param_;
  size_t bucket_ = 0;
  bool open_ = false;    // between beginStep and the reduction of the row bucket: ids may be added
  int64_t agreedK_ = -1;  // the ids per step every rank was checked to pass
  // This step's ids, a copy per micro-batch; the row marks (V), this rank's row list (K) and packed rows
  // (K x C, in the wire's type), and every rank's list and rows, all-gathered.
  std::vector<Tensor> rowIds_;
  Tensor rowMarks_, rowList_, packed_, gatheredIds_, gatheredRows_;
};

}  // namespace minidp::distributed
