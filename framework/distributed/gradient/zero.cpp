#include "framework/distributed/gradient/zero.h"

#include <algorithm>
#include <utility>

#include "framework/autograd/variable.h"
#include "framework/runtime/nvtx.h"
#include "framework/tensor/tensor_math.h"

namespace minidp::distributed {

namespace {

/// State tensors per parameter of the optimizers makeOptimizer builds: SGD's momentum, AdamW's moments.
int64_t stateTensors(const std::string& name) { return name == "adamw" ? 2 : 1; }

}  // namespace

/// ZeRO-3's backward trigger: counts each unit's ready gradients (the reducer's events, synced backward only).
class ShardedOptimizer::BackwardObserver : public ReducerObserver {
 public:
  explicit BackwardObserver(ShardedOptimizer& owner) : owner_(owner) {}
  void gradReady(size_t index) override {
    const size_t b = static_cast<size_t>(owner_.unitOfParam_[index]);
    if (--owner_.gradsPending_[b] == 0) owner_.unitGradsReady(b);
  }

 private:
  ShardedOptimizer& owner_;
};

/// The ops' bf16 copies of the parameters: views of the units' gathered bf16 buffers.
class ShardedOptimizer::GatheredCopies : public ops::WeightCopySource {
 public:
  explicit GatheredCopies(const ShardedOptimizer& owner) : owner_(owner) {}
  Tensor get(const Tensor& param, int64_t rows) override { return owner_.gatheredCopy(param, rows); }

 private:
  const ShardedOptimizer& owner_;
};

ShardedOptimizer::ShardedOptimizer(DistributedDataParallel& ddp, const std::string& name, double lr, double weightDecay,
                                   ZeroGather gather, int prefetch, bool keepGathered,
                                   std::optional<DType> paramDType)
    : Optimizer({}, lr),
      comm_(ddp.communicator()),
      gather_(gather),
      plan_(ddp.reducer().plan()),
      sharded_(ddp.zeroStage() == 3),
      prefetch_(std::max(prefetch, 1)),
      keepGathered_(keepGathered),
      ddp_(&ddp) {
  const Reducer& reducer = ddp.reducer();
  MINIDP_CHECK(reducer.reduction() == Reduction::ReduceScatter,
               "ShardedOptimizer needs a reducer that reduce-scatters (DdpOptions::zeroStage 1, 2 or 3)");
  const nn::NamedParameters& params = ddp.parameters();
  const Device device = params.front().second.device();
  if (paramDType && *paramDType != plan_.buckets.front().dtype) {
    MINIDP_CHECK(sharded_, "ShardedOptimizer: a parameter dtype for the gathers needs ZeRO-3 (zeroStage 3)");
    MINIDP_CHECK(*paramDType == DType::BF16, "ShardedOptimizer: parameters gathered in "
                                                 << dtypeName(*paramDType) << "; BF16 or the parameters' own dtype");
    paramDType_ = paramDType;
  }
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    flat_.push_back(Tensor::zeros({reducer.bucketBuffer(b).numel()}, plan_.buckets[b].dtype, device));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Variable p = params[i].second;  // shares the parameter: its data moves into the flat buffer
    params_.push_back(p);
    shapes_.push_back(p.shape());
    const ParamSlot& slot = plan_.slots[i];
    Tensor view = Tensor::alias(flat_[slot.bucket], slot.offset, p.shape());
    view.copyFrom(p.data());
    p.data() = view;
  }
  const int rank = comm_.rank(), world = comm_.worldSize();
  for (size_t b = 0; b < flat_.size(); ++b) {
    const int64_t shard = flat_[b].numel() / world;
    Tensor mine = Tensor::alias(flat_[b], rank * shard, {shard});
    if (sharded_) {
      shardData_.push_back(mine.clone());  // memory of its own: the unit's buffer comes and goes
      mine = shardData_.back();
    }
    Variable v(mine, true);
    v.setGrad(reducer.gradShard(b));
    shards_.push_back(v);
    inner_.push_back(optim::makeOptimizer(name, {v}, lr, weightDecay));
    stateElements_ += stateTensors(name) * shard;
    unshardedStateElements_ += stateTensors(name) * plan_.buckets[b].numel;
  }
  if (!sharded_) return;
  // ZeRO-3: units in forward order (planUnits lists them as backward completes them: the last unit first).
  unitOfParam_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) unitOfParam_[i] = plan_.slots[i].bucket;
  forwardPosition_.assign(flat_.size(), -1);
  for (int b = static_cast<int>(flat_.size()) - 1; b >= 0; --b) {
    forwardPosition_[b] = static_cast<int>(forwardOrder_.size());
    forwardOrder_.push_back(b);
  }
  gathered_.assign(flat_.size(), true);
  pending_.assign(flat_.size(), nullptr);
  onWire_.assign(flat_.size(), false);
  if (paramDType_) {
    for (const Tensor& unit : flat_) {
      wire_.push_back(Tensor::empty({unit.numel()}, *paramDType_, device));
      wire_.back().releaseMemory();
    }
    copies_ = std::make_unique<GatheredCopies>(*this);
  }
  for (const Bucket& b : plan_.buckets) gradsPending_.push_back(b.params.size());
  for (size_t b = 0; b < flat_.size(); ++b) release(b);
  observer_ = ddp.reducer().subscribe(std::make_shared<BackwardObserver>(*this));
}

ShardedOptimizer::~ShardedOptimizer() {
  if (!sharded_) return;
  ddp_->reducer().unsubscribe(observer_);
  for (Variable& p : params_) p.setBeforeUse({});  // they call this optimizer; a released unit stays so
}

void ShardedOptimizer::gather(size_t b, bool exact) {
  if (gathered_[b]) return;
  const std::string tag = "gather unit " + std::to_string(b);
  runtime::NvtxRange range(tag.c_str());
  flat_[b].reacquireMemory();
  const int64_t n = shardData_[b].numel();
  if (paramDType_ && !exact) {
    // The shard rounded into the wire buffer (compute stream, before the gather); waitGathered casts back.
    wire_[b].reacquireMemory();
    Tensor mine = Tensor::alias(wire_[b], comm_.rank() * n, {n});
    ops::castInto(shardData_[b], mine);
    pending_[b] = comm_.allGatherShards(wire_[b], tag);
    onWire_[b] = true;
  } else {
    Tensor::alias(flat_[b], comm_.rank() * n, {n}).copyFrom(shardData_[b]);  // compute stream, before the gather
    pending_[b] = comm_.allGatherShards(flat_[b], tag);
  }
  gathered_[b] = true;
}

void ShardedOptimizer::waitGathered(size_t b) {
  if (pending_[b]) std::exchange(pending_[b], nullptr)->wait();
  if (!onWire_[b]) return;
  onWire_[b] = false;
  ops::castInto(wire_[b], flat_[b]);  // every rank's slice, its own too: the same rounded values everywhere
  if (!keepWire_) wire_[b].releaseMemory();  // no op views it: reused in compute-stream order, after the cast
}

void ShardedOptimizer::release(size_t b) {
  if (!gathered_[b]) return;
  // A gather still writing into it finishes first (CUDA: the compute stream waits; the allocator reuses the
  // block in compute-stream order, after every kernel enqueued so far that reads it); a bf16 gather's values are
  // not cast back: nothing reads them.
  onWire_[b] = false;
  waitGathered(b);
  flat_[b].releaseMemory();
  if (!wire_.empty() && wire_[b].memoryResident()) wire_[b].releaseMemory();
  gathered_[b] = false;
  armForward(b);
}

void ShardedOptimizer::armForward(size_t b) {
  for (int p : plan_.buckets[b].params) params_[p].setBeforeUse([this, b] { forwardUse(b); });
}

void ShardedOptimizer::forwardUse(size_t b) {
  if (holdAll_) return;
  // Disarm the unit's other parameters: one call per unit per forward.
  for (int p : plan_.buckets[b].params) params_[p].setBeforeUse({});
  gather(b);
  waitGathered(b);
  const int at = forwardPosition_[b];
  for (int k = 1; k <= prefetch_ && at + k < static_cast<int>(forwardOrder_.size()); ++k) gather(forwardOrder_[at + k]);
  // The unit before this one is done with its forward: free it, unless its backward needs it back soon
  // (kept gathered, or accumulating micro-batches, whose backward the reducer does not report).
  const bool training = gradModeEnabled();
  const bool keep = training && (keepGathered_ || !ddp_->reducer().requireSync());
  if (at > 0 && !keep) release(forwardOrder_[at - 1]);
}

void ShardedOptimizer::unitGradsReady(size_t b) {
  const int at = forwardPosition_[b];
  // Unit b's backward is done; the unit before it computes next.
  if (at > 0) {
    const size_t previous = forwardOrder_[at - 1];
    gather(previous);
    for (int k = 2; k <= prefetch_ + 1 && at - k >= 0; ++k) gather(forwardOrder_[at - k]);
    waitGathered(previous);
  }
  if (!holdAll_) release(b);
}

void ShardedOptimizer::gatherAll() {
  if (!sharded_) return;
  if (paramDType_ && !holdAll_) releaseAll();  // units gathered in paramDType hold rounded values
  for (size_t b = 0; b < flat_.size(); ++b) gather(b, true);
  for (size_t b = 0; b < flat_.size(); ++b) {
    waitGathered(b);
    for (int p : plan_.buckets[b].params) params_[p].setBeforeUse({});
  }
  holdAll_ = true;
}

Tensor ShardedOptimizer::gatheredCopy(const Tensor& param, int64_t rows) const {
  if (!param.defined() || param.dtype() == DType::BF16) return {};
  const auto* at = static_cast<const char*>(param.raw());
  for (size_t b = 0; b < wire_.size(); ++b) {
    // A unit gathered in bf16 and waited on (an exact gather, gatherAll's, leaves the wire buffer empty).
    if (!gathered_[b] || onWire_[b] || !wire_[b].memoryResident() || !flat_[b].memoryResident()) continue;
    const auto* base = static_cast<const char*>(flat_[b].raw());
    if (at < base || at >= base + flat_[b].nbytes()) continue;
    const int64_t offset = (at - base) / static_cast<int64_t>(dtypeSize(flat_[b].dtype()));
    for (int p : plan_.buckets[b].params) {
      const ParamSlot& slot = plan_.slots[p];
      if (slot.offset != offset || slot.numel != param.numel()) continue;
      const Shape& shape = shapes_[p];
      if (rows == 0) return Tensor::alias(wire_[b], offset, param.shape());  // the caller's shape, as a cast's
      if (shape.size() != 2 || rows != shape[0]) return {};                 // padding rows: a cast
      return Tensor::alias(wire_[b], offset, {rows, shape[1]});
    }
    return {};
  }
  return {};
}

void ShardedOptimizer::skipStep() {
  if (!sharded_) return;
  releaseAll();
  for (size_t b = 0; b < flat_.size(); ++b) gradsPending_[b] = plan_.buckets[b].params.size();
}

void ShardedOptimizer::releaseAll() {
  if (!sharded_) return;
  holdAll_ = false;
  for (size_t b = 0; b < flat_.size(); ++b) release(b);
}

int64_t ShardedOptimizer::parameterElements() const {
  int64_t n = 0;
  for (size_t b = 0; b < flat_.size(); ++b) n += sharded_ ? shardData_[b].numel() : flat_[b].numel();
  return n;
}

void ShardedOptimizer::step() {
  const size_t n = inner_.size();
  pending_.resize(n);
  std::vector<std::shared_ptr<Work>> gathers(n);
  const auto gatherBucket = [&](size_t b) {
    const std::string tag = "gather " + std::to_string(b);
    runtime::NvtxRange range(tag.c_str());
    gathers[b] = comm_.allGatherShards(flat_[b], tag);
  };
  const int64_t done = stepCount();
  setStepCount(done + 1);
  const auto update = [&](size_t b) {
    inner_[b]->setLr(lr_);          // the schedule's rate, set on this optimizer
    inner_[b]->setStepCount(done);  // its step() counts this one (a resumed run restored only this count)
    inner_[b]->setGradScale(gradScale());
    inner_[b]->step();
  };
  if (sharded_) {
    // ZeRO-3: the shards are the parameters; every unit's buffer goes, the next read gathers it again.
    for (size_t b = 0; b < n; ++b) update(b);
    skipStep();  // what a step does besides the update
    return;
  }
  const bool forward = gather_ == ZeroGather::Forward;
  for (size_t k = 0; k < n; ++k) {
    const size_t b = forward ? n - 1 - k : k;
    // The last step's gather of this bucket reads the shard that the update writes (normally the forward
    // waited on it already).
    if (pending_[b]) std::exchange(pending_[b], nullptr)->wait();
    update(b);
    if (gather_ != ZeroGather::End) gatherBucket(b);
  }
  if (gather_ == ZeroGather::End) {
    for (size_t b = 0; b < n; ++b) gatherBucket(b);
  }
  if (!forward) {
    for (const std::shared_ptr<Work>& work : gathers) work->wait();
    return;
  }
  for (size_t b = 0; b < n; ++b) {
    pending_[b] = gathers[b];
    for (int p : plan_.buckets[b].params) params_[p].setBeforeUse([work = gathers[b]] { work->wait(); });
  }
}

std::vector<std::pair<std::string, Tensor>> ShardedOptimizer::checkpointState() {
  gatherAll();  // ZeRO-3: rank 0 writes the parameters next
  const int rank = comm_.rank();
  const std::vector<std::string>& kinds = inner_.front()->stateNames();
  std::vector<std::vector<Tensor>> full(flat_.size());  // rank 0: [bucket][kind] the gathered state, on the host
  for (size_t b = 0; b < flat_.size(); ++b) {
    const std::vector<std::pair<std::string, Tensor>> shard = inner_[b]->state();  // one tensor per kind
    for (size_t k = 0; k < kinds.size(); ++k) {
      Tensor bucket = Tensor::zeros({flat_[b].numel()}, flat_[b].dtype(), flat_[b].device());
      const int64_t n = shard[k].second.numel();
      Tensor::alias(bucket, rank * n, {n}).copyFrom(shard[k].second);
      comm_.allGatherShards(bucket, "gather state " + std::to_string(b))->wait();
      if (rank == 0) full[b].push_back(bucket.to(Device::CPU));
    }
  }
  std::vector<std::pair<std::string, Tensor>> out;
  if (rank != 0) return out;
  for (size_t i = 0; i < plan_.slots.size(); ++i) {
    const ParamSlot& slot = plan_.slots[i];
    for (size_t k = 0; k < kinds.size(); ++k) {
      out.emplace_back(plan_.names[i] + "." + kinds[k], Tensor::alias(full[slot.bucket][k], slot.offset, shapes_[i]));
    }
  }
  return out;
}

void ShardedOptimizer::restoreState(const SavedState& saved) {
  const int world = comm_.worldSize(), rank = comm_.rank();
  const std::vector<std::string>& kinds = inner_.front()->stateNames();
  for (size_t b = 0; b < inner_.size(); ++b) {
    std::vector<std::pair<std::string, Tensor>> shard = inner_[b]->state();  // one tensor per kind
    for (auto& [name, tensor] : shard) tensor.zero();                        // the padding
    const int64_t n = flat_[b].numel() / world, first = rank * n;            // this rank's elements of the bucket
    for (int p : plan_.buckets[b].params) {
      const ParamSlot& slot = plan_.slots[p];
      const int64_t begin = std::max(first, slot.offset), end = std::min(first + n, slot.offset + slot.numel);
      if (begin >= end) continue;
      for (size_t k = 0; k < kinds.size(); ++k) {
        const Tensor whole = savedTensor(saved, plan_.names[p] + "." + kinds[k], shapes_[p]);
        const Tensor piece = Tensor::alias(whole, begin - slot.offset, {end - begin});
        Tensor::alias(shard[k].second, begin - first, {end - begin})
            .copyFrom(piece.toDType(flat_[b].dtype()).to(flat_[b].device()));
      }
    }
  }
  // ZeRO-3: the parameters were loaded into the gathered units (gatherAll before the load): keep the shards.
  if (!sharded_) return;
  MINIDP_CHECK(holdAll_, "ZeRO-3 restore: gather every unit (gatherAll) before loading the parameters");
  for (size_t b = 0; b < flat_.size(); ++b) {
    const int64_t n = shardData_[b].numel();
    shardData_[b].copyFrom(Tensor::alias(flat_[b], rank * n, {n}));
  }
  releaseAll();  // the next read gathers each unit again, as a step that was never interrupted does
}

}  // namespace minidp::distributed
