#include "framework/distributed/gradient/zero.h"

#include <algorithm>
#include <utility>

#include "framework/runtime/nvtx.h"

namespace minidp::distributed {

namespace {

/// State tensors per parameter of the optimizers makeOptimizer builds: SGD's momentum, AdamW's moments.
int64_t stateTensors(const std::string& name) { return name == "adamw" ? 2 : 1; }

}  // namespace

ShardedOptimizer::ShardedOptimizer(DistributedDataParallel& ddp, const std::string& name, double lr, double weightDecay,
                                   ZeroGather gather)
    : Optimizer({}, lr), comm_(ddp.communicator()), gather_(gather), plan_(ddp.reducer().plan()) {
  const Reducer& reducer = ddp.reducer();
  MINIDP_CHECK(reducer.reduction() == Reduction::ReduceScatter,
               "ShardedOptimizer needs a reducer that reduce-scatters (DdpOptions::zeroStage = 1)");
  const nn::NamedParameters& params = ddp.parameters();
  const Device device = params.front().second.device();
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
    Variable v(Tensor::alias(flat_[b], rank * shard, {shard}), true);
    v.setGrad(Tensor::alias(reducer.bucketBuffer(b), rank * shard, {shard}));
    shards_.push_back(v);
    inner_.push_back(optim::makeOptimizer(name, {v}, lr, weightDecay));
    stateElements_ += stateTensors(name) * shard;
    unshardedStateElements_ += stateTensors(name) * plan_.buckets[b].numel;
  }
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
  const bool forward = gather_ == ZeroGather::Forward;
  for (size_t k = 0; k < n; ++k) {
    const size_t b = forward ? n - 1 - k : k;
    // The last step's gather of this bucket reads the shard that the update writes (normally the forward
    // waited on it already).
    if (pending_[b]) std::exchange(pending_[b], nullptr)->wait();
    inner_[b]->setLr(lr_);  // the schedule's rate, set on this optimizer
    inner_[b]->setStepCount(done);  // its step() counts this one (a resumed run restored only this count)
    inner_[b]->setGradScale(gradScale());
    inner_[b]->step();
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
}

}  // namespace minidp::distributed
