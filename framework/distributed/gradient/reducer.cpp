#include "framework/distributed/gradient/reducer.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "framework/runtime/nvtx.h"

namespace minidp::distributed {

const std::map<std::string, Overlap>& overlapModes() {
  static const std::map<std::string, Overlap> modes = {{"on", Overlap::DuringBackward},
                                                       {"off", Overlap::AfterBackward}};
  return modes;
}

const char* overlapName(Overlap mode) {
  for (const auto& [name, m] : overlapModes()) {
    if (m == mode) return name.c_str();
  }
  throwError("unknown overlap mode " + std::to_string(static_cast<int>(mode)), __FILE__, __LINE__);
}

Reducer::Reducer(nn::NamedParameters params, BucketPlan plan, std::shared_ptr<Communicator> comm, Overlap overlap,
                 Reduction reduction, std::unique_ptr<CommHook> hook, bool shardGradients)
    : params_(std::move(params)),
      plan_(std::move(plan)),
      comm_(std::move(comm)),
      overlap_(overlap),
      reduction_(reduction),
      hook_(hook ? std::move(hook) : makeCommHook({})),
      shardGradients_(shardGradients) {
  MINIDP_CHECK(comm_, "reducer without a communicator");
  MINIDP_CHECK(!shardGradients_ || reduction_ == Reduction::ReduceScatter,
               "sharded gradients (ZeRO-2/3) are reduce-scattered: Reduction::ReduceScatter");
  MINIDP_CHECK(plan_.slots.size() == params_.size(),
               "bucket plan for " << plan_.slots.size() << " parameters, got " << params_.size());
  MINIDP_CHECK(!params_.empty(), "reducer with no parameters");
  const Device device = params_.front().second.device();
  MINIDP_CHECK(comm_->supports(device),
               "communicator " << comm_->name() << " cannot reduce " << deviceName(device) << " gradients");
  installBuckets(false);
  marked_.assign(params_.size(), false);
  readyOrder_.reserve(params_.size());
}

void Reducer::installBuckets(bool keepGradients) {
  const Device device = params_.front().second.device();
  const int world = comm_->worldSize();
  std::vector<GradBucket> buckets;
  if (shardGradients_) {
    // Two scratch buffers of the largest bucket, used in turn; a shard per bucket.
    MINIDP_CHECK(!keepGradients, "sharded gradients (ZeRO-2/3) keep the first plan: no rebuild");
    int64_t largest = 0;
    for (const Bucket& b : plan_.buckets) {
      MINIDP_CHECK(b.dtype == plan_.buckets.front().dtype, "sharded gradients need one gradient dtype, got "
                                                                << dtypeName(b.dtype) << " and "
                                                                << dtypeName(plan_.buckets.front().dtype));
      largest = std::max(largest, paddedNumel(b.numel, world));
    }
    scratch_.clear();
    shards_.clear();
    for (int s = 0; s < 2; ++s) {
      scratch_.push_back(comm_->allocateCommBuffer(largest, plan_.buckets.front().dtype, device));
      scratch_.back().zero();
    }
    scratchUse_.assign(scratch_.size(), {-1, nullptr});
  }
  for (size_t k = 0; k < plan_.buckets.size(); ++k) {
    const Bucket& b = plan_.buckets[k];
    const int64_t numel = reduction_ == Reduction::ReduceScatter ? paddedNumel(b.numel, world) : b.numel;
    GradBucket bucket;
    bucket.index = k;
    if (shardGradients_) {
      bucket.buffer = Tensor::alias(scratch_[k % scratch_.size()], 0, {numel});
      shards_.push_back(Tensor::zeros({numel / world}, b.dtype, device));
    } else {
      bucket.buffer = comm_->allocateCommBuffer(numel, b.dtype, device);  // NCCL: registered memory if asked
      bucket.buffer.zero();
    }
    bucket.reduction = reduction_;
    buckets.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& [name, param] = params_[i];
    const ParamSlot& slot = plan_.slots[i];
    MINIDP_CHECK(param.device() == device, "parameter '" << name << "' is on " << deviceName(param.device())
                                                         << ", the first on " << deviceName(device));
    MINIDP_CHECK(shapeNumel(param.shape()) == slot.numel && param.dtype() == plan_.buckets[slot.bucket].dtype,
                 "parameter '" << name << "' does not match its bucket slot");
    if (shardGradients_) {
      param.releaseGrad();  // backward's first contribution makes it
      continue;
    }
    GradBucket& bucket = buckets[slot.bucket];
    Tensor view = Tensor::alias(bucket.buffer, slot.offset, param.shape());
    if (keepGradients) view.copyFrom(param.grad());
    param.setGrad(std::move(view));
    if (!keepGradients) param.markGradZero();
  }
  for (GradBucket& bucket : buckets) {
    for (int i : plan_.buckets[bucket.index].params) {
      const ParamSlot& slot = plan_.slots[i];
      bucket.entries.push_back(BucketEntry{i, params_[i].first, slot.offset, params_[i].second.shape()});
    }
  }
  hook_->setup(buckets, *comm_);
  buckets_ = std::move(buckets);
  pending_.assign(plan_.buckets.size(), 0);
  nextLaunch_ = plan_.buckets.size();
}

void Reducer::rebuild(BucketPlan plan) {
  MINIDP_CHECK(!stepOpen_, "rebuild() inside a step: call it after finalize()");
  MINIDP_CHECK(plan.slots.size() == params_.size(),
               "bucket plan for " << plan.slots.size() << " parameters, got " << params_.size());
  plan_ = std::move(plan);
  // Safe to drop the old buckets here. CPU: finalize() waited for every all-reduce. CUDA: finalize() made
  // the compute stream wait on every all-reduce, so the copies into the new views (on the compute stream)
  // read averaged gradients; the allocator reuses the old blocks in compute-stream order, i.e. after
  // those copies; and each CudaWork (kept in timings_ too) holds its buffer until the collective completes.
  installBuckets(true);
}

Reducer::~Reducer() {
  // CPU: a queued all-reduce holds its buffer itself, and waiting would block the host.
  if (!buckets_.front().buffer.isCuda()) return;
  for (const BucketTiming& t : timings_) {
    const std::shared_ptr<Work>& work = t.work;
    if (!work) continue;
    try {
      work->wait();  // cudaStreamWaitEvent: no host synchronisation
    } catch (const std::exception& e) {
      std::fprintf(stderr, "minidp: reducer: ordering the release of '%s' after its collective failed: %s\n",
                   work->tag().c_str(), e.what());
    }
  }
}

void Reducer::prepareStep() {
  MINIDP_CHECK(!stepOpen_ || nextLaunch_ == 0,
               "prepareStep() while the previous step's all-reduces are in flight: call finalize() first");
  if (shardGradients_) {
    for (auto& [name, param] : params_) param.releaseGrad();  // the first contribution makes it
  } else {
    for (GradBucket& bucket : buckets_) bucket.buffer.zero();
    for (auto& [name, param] : params_) param.markGradZero();  // the first contribution may overwrite
  }
  marked_.assign(params_.size(), false);
  readyOrder_.clear();
  for (size_t b = 0; b < plan_.buckets.size(); ++b) pending_[b] = plan_.buckets[b].params.size();
  nextLaunch_ = 0;
  timings_.assign(plan_.buckets.size(), BucketTiming{});
  for (size_t b = 0; b < timings_.size(); ++b) {
    timings_[b].bucket = static_cast<int>(b);
    timings_[b].bytes = plan_.buckets[b].bytes();
  }
  stepOpen_ = true;
  hook_->beginStep();
}

void Reducer::markReady(size_t index) {
  if (!requireSync_) return;
  MINIDP_CHECK(index < params_.size(), "markReady(" << index << ") of " << params_.size() << " parameters");
  const std::string& name = params_[index].first;
  MINIDP_CHECK(stepOpen_, "gradient of parameter '" << name
                                                    << "' became ready outside a step: call prepareStep() "
                                                       "before backward");
  MINIDP_CHECK(!marked_[index], "parameter '" << name
                                              << "' was marked ready twice in one step (a second backward "
                                                 "with sync on? use setRequireSync(false) for micro-batches)");
  marked_[index] = true;
  readyOrder_.push_back(static_cast<int>(index));
  for (const auto& [handle, observer] : observers_) observer->gradReady(index);
  const int b = plan_.slots[index].bucket;
  if (--pending_[b] == 0) {
    timings_[b].readyMs = hostNowMs();
    if (overlap_ == Overlap::DuringBackward) launchCompleted();
  }
}

void Reducer::launchCompleted() {
  // Strictly in index order: every rank issues the same collectives in the same sequence, whatever
  // order its hooks fired in (different orders deadlock NCCL).
  while (nextLaunch_ < buckets_.size() && pending_[nextLaunch_] == 0) launch(nextLaunch_++);
}

void Reducer::launch(size_t b) {
  runtime::NvtxRange range(("bucket " + std::to_string(b)).c_str());
  timings_[b].launchMs = hostNowMs();
  const size_t slot = b % std::max<size_t>(scratch_.size(), 1);
  if (shardGradients_) {
    // The scratch is free once the reduce-scatter that read it is done and its shard copied out (in
    // compute-stream order on CUDA); then the bucket's gradients move in and go.
    drainScratch(slot);
    const GradBucket& bucket = buckets_[b];
    for (const BucketEntry& e : bucket.entries) {
      Variable& param = params_[e.param].second;
      Tensor::alias(bucket.buffer, e.offset, e.shape).copyFrom(param.grad());
      param.releaseGrad();
    }
    const int64_t used = plan_.buckets[b].numel, padding = bucket.buffer.numel() - used;
    if (padding > 0) Tensor::alias(bucket.buffer, used, {padding}).zero();
  }
  timings_[b].work = hook_->reduce(buckets_[b], *comm_);
  timings_[b].bytes = timings_[b].work->bytes();
  if (shardGradients_) scratchUse_[slot] = {static_cast<int>(b), timings_[b].work};
}

void Reducer::drainScratch(size_t slot) {
  auto& [bucket, work] = scratchUse_[slot];
  if (!work) return;
  work->wait();
  const int64_t n = shards_[bucket].numel();
  shards_[bucket].copyFrom(Tensor::alias(buckets_[bucket].buffer, comm_->rank() * n, {n}));
  work = nullptr;
}

Tensor Reducer::gradShard(size_t b) const {
  MINIDP_CHECK(reduction_ == Reduction::ReduceScatter, "gradShard: the buckets are all-reduced, not sharded");
  if (shardGradients_) return shards_.at(b);
  const Tensor& buffer = buckets_.at(b).buffer;
  const int64_t n = buffer.numel() / comm_->worldSize();
  return Tensor::alias(buffer, comm_->rank() * n, {n});
}

int64_t Reducer::gradientElements() const {
  int64_t n = 0;
  if (!shardGradients_) {
    for (const GradBucket& b : buckets_) n += b.buffer.numel();
    return n;
  }
  for (const std::vector<Tensor>* part : {&shards_, &scratch_}) {
    for (const Tensor& t : *part) n += t.numel();
  }
  return n;
}

uint64_t Reducer::subscribe(std::shared_ptr<ReducerObserver> observer) {
  MINIDP_CHECK(observer, "subscribe: no observer");
  observers_.emplace_back(nextObserver_, std::move(observer));
  return nextObserver_++;
}

void Reducer::unsubscribe(uint64_t handle) {
  const auto it = std::find_if(observers_.begin(), observers_.end(), [&](const auto& o) { return o.first == handle; });
  MINIDP_CHECK(it != observers_.end(), "unsubscribe: no observer with handle " << handle);
  observers_.erase(it);
}

void Reducer::finalize() {
  MINIDP_CHECK(stepOpen_, "finalize() without prepareStep()");
  MINIDP_CHECK(requireSync_, "finalize() with sync off: call setRequireSync(true) before the last backward");
  for (size_t i = 0; i < params_.size(); ++i) {
    MINIDP_CHECK(marked_[i], "parameter '" << params_[i].first
                                           << "' got no gradient in this step (unused in "
                                              "forward?); every parameter must get one on every rank");
  }
  launchCompleted();
  for (const auto& [handle, observer] : observers_) observer->waitsBegin();
  for (size_t slot = 0; slot < scratchUse_.size(); ++slot) drainScratch(slot);
  for (BucketTiming& t : timings_) t.work->wait();
  stepOpen_ = false;
  hook_->endStep();
}

}  // namespace minidp::distributed
