#include "framework/distributed/zero.h"

#include "framework/runtime/nvtx.h"

namespace minidp::distributed {

namespace {

/// State tensors per parameter of the optimizers makeOptimizer builds: SGD's momentum, AdamW's moments.
int64_t stateTensors(const std::string& name) { return name == "adamw" ? 2 : 1; }

}  // namespace

ShardedOptimizer::ShardedOptimizer(DistributedDataParallel& ddp, const std::string& name, double lr, double weightDecay,
                                   ZeroGather gather)
    : Optimizer({}, lr), comm_(ddp.communicator()), gather_(gather) {
  const Reducer& reducer = ddp.reducer();
  MINIDP_CHECK(reducer.reduction().reduction == Reduction::ReduceScatter,
               "ShardedOptimizer needs a reducer that reduce-scatters (DdpOptions::zeroStage = 1)");
  const BucketPlan& plan = reducer.plan();
  const nn::NamedParameters& params = ddp.parameters();
  const Device device = params.front().second.device();
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    flat_.push_back(Tensor::zeros({reducer.bucketBuffer(b).numel()}, plan.buckets[b].dtype, device));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Variable p = params[i].second;  // shares the parameter: its data moves into the flat buffer
    const ParamSlot& slot = plan.slots[i];
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
    unshardedStateElements_ += stateTensors(name) * plan.buckets[b].numel;
  }
}

void ShardedOptimizer::step() {
  std::vector<std::shared_ptr<Work>> gathers;
  const auto gatherBucket = [&](size_t b) {
    const std::string tag = "gather " + std::to_string(b);
    runtime::NvtxRange range(tag.c_str());
    gathers.push_back(comm_.allGatherShards(flat_[b], tag));
  };
  setStepCount(stepCount() + 1);
  for (size_t b = 0; b < inner_.size(); ++b) {
    inner_[b]->setLr(lr_);  // the schedule's rate, set on this optimizer
    inner_[b]->setGradScale(gradScale());
    inner_[b]->step();
    if (gather_ == ZeroGather::Overlap) gatherBucket(b);
  }
  if (gather_ == ZeroGather::End) {
    for (size_t b = 0; b < flat_.size(); ++b) gatherBucket(b);
  }
  for (const std::shared_ptr<Work>& work : gathers) work->wait();
}

double ShardedOptimizer::gradSquaredNorm() {
  double partial = 0;
  for (const Variable& shard : shards_) {
    for (double g : shard.grad().toDType(DType::F64).toVector<double>()) partial += g * g;
  }
  Tensor sum = Tensor::fromVector(std::vector<double>{partial}, {1}, shards_.front().device());
  comm_.allReduceAverage(sum, "grad norm")->wait();
  return sum.toVector<double>()[0] * comm_.worldSize();
}

}  // namespace minidp::distributed
