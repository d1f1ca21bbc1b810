#include "framework/distributed/reducer.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "framework/ops/dispatch.h"
#include "framework/runtime/nvtx.h"
#include "kernels/elementwise.h"
#include "kernels/rows.h"

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
                 BucketReduction reduction)
    : params_(std::move(params)),
      plan_(std::move(plan)),
      comm_(std::move(comm)),
      overlap_(overlap),
      reduction_(reduction) {
  MINIDP_CHECK(comm_, "reducer without a communicator");
  MINIDP_CHECK(plan_.slots.size() == params_.size(),
               "bucket plan for " << plan_.slots.size() << " parameters, got " << params_.size());
  MINIDP_CHECK(!params_.empty(), "reducer with no parameters");
  const Device device = params_.front().second.device();
  MINIDP_CHECK(comm_->supports(device),
               "communicator " << comm_->name() << " cannot reduce " << deviceName(device) << " gradients");
  if (reduction_.rowSparse >= 0) {
    MINIDP_CHECK(static_cast<size_t>(reduction_.rowSparse) < params_.size(),
                 "row-sparse parameter #" << reduction_.rowSparse << " of " << params_.size());
    const auto& [name, p] = params_[reduction_.rowSparse];
    MINIDP_CHECK(reduction_.reduction == Reduction::AllReduce,
                 "row-sparse parameter '" << name << "': its rows are all-reduced, not reduce-scattered (ZeRO-1)");
    MINIDP_CHECK(p.shape().size() == 2,
                 "row-sparse parameter '" << name << "' must be 2-D (rows, columns), is " << shapeString(p.shape()));
  }
  installBuckets(false);
  marked_.assign(params_.size(), false);
  readyOrder_.reserve(params_.size());
}

void Reducer::installBuckets(bool keepGradients) {
  const Device device = params_.front().second.device();
  std::vector<Tensor> buffers, wires;
  for (const Bucket& b : plan_.buckets) {
    const int64_t numel =
        reduction_.reduction == Reduction::ReduceScatter ? paddedNumel(b.numel, comm_->worldSize()) : b.numel;
    buffers.push_back(Tensor::zeros({numel}, b.dtype, device));
    if (reduction_.wire == GradComm::Bf16) {
      MINIDP_CHECK(b.dtype == DType::F32,
                   "bf16 gradient communication needs fp32 gradients, bucket of " << dtypeName(b.dtype));
      wires.push_back(Tensor::empty({numel}, DType::BF16, device));
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& [name, param] = params_[i];
    const ParamSlot& slot = plan_.slots[i];
    MINIDP_CHECK(param.device() == device, "parameter '" << name << "' is on " << deviceName(param.device())
                                                         << ", the first on " << deviceName(device));
    MINIDP_CHECK(param.data().numel() == slot.numel && param.dtype() == plan_.buckets[slot.bucket].dtype,
                 "parameter '" << name << "' does not match its bucket slot");
    Tensor view = Tensor::alias(buffers[slot.bucket], slot.offset, param.shape());
    if (keepGradients) view.copyFrom(param.grad());
    param.setGrad(std::move(view));
  }
  if (rowBucket() >= 0) {
    MINIDP_CHECK(plan_.buckets[rowBucket()].params.size() == 1,
                 "row-sparse parameter '" << params_[reduction_.rowSparse].first
                                          << "' must have a bucket of its own (ParamInfo::solo)");
  }
  buffers_ = std::move(buffers);
  wires_ = std::move(wires);
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
  if (!buffers_.front().isCuda()) return;
  std::vector<std::shared_ptr<Work>> works = {rowIdsWork_};
  for (BucketTiming& t : timings_) works.push_back(t.work);
  for (const std::shared_ptr<Work>& work : works) {
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
  for (Tensor& buffer : buffers_) buffer.zero();
  marked_.assign(params_.size(), false);
  readyOrder_.clear();
  rowIds_.clear();
  for (size_t b = 0; b < plan_.buckets.size(); ++b) pending_[b] = plan_.buckets[b].params.size();
  nextLaunch_ = 0;
  timings_.assign(plan_.buckets.size(), BucketTiming{});
  for (size_t b = 0; b < timings_.size(); ++b) {
    timings_[b].bucket = static_cast<int>(b);
    timings_[b].bytes = plan_.buckets[b].bytes();
  }
  stepOpen_ = true;
}

void Reducer::addRowIds(const Tensor& ids) {
  MINIDP_CHECK(reduction_.rowSparse >= 0, "addRowIds: no parameter is reduced by rows");
  MINIDP_CHECK(stepOpen_ && nextLaunch_ == 0,
               "addRowIds outside a step or after a bucket was launched: call it after prepareStep(), before the "
               "micro-batch's backward");
  const Device device = buffers_.front().device();
  MINIDP_CHECK(ids.defined() && ids.dtype() == DType::I32 && ids.device() == device,
               "row ids must be an int32 tensor on " << deviceName(device));
  // A copy (on the compute stream, like the row listing that reads it): the batch's own memory is refilled
  // with the next batch before this step's bucket is launched.
  rowIds_.push_back(Tensor::alias(ids.clone(), 0, {ids.numel()}));
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
  const int b = plan_.slots[index].bucket;
  if (--pending_[b] == 0) {
    timings_[b].readyMs = hostNowMs();
    if (overlap_ == Overlap::DuringBackward) launchCompleted();
  }
}

void Reducer::launchCompleted() {
  // Strictly in index order: every rank issues the same collectives in the same sequence, whatever
  // order its hooks fired in (different orders deadlock NCCL).
  while (nextLaunch_ < buffers_.size() && pending_[nextLaunch_] == 0) launch(nextLaunch_++);
}

void Reducer::launch(size_t b) {
  const std::string tag = "bucket " + std::to_string(b);
  runtime::NvtxRange range(tag.c_str());
  timings_[b].launchMs = hostNowMs();
  const Tensor wire = wires_.empty() ? Tensor() : wires_[b];
  timings_[b].work = static_cast<int>(b) == rowBucket()
                         ? reduceRows(b, wire, tag)
                         : comm_->reduceGradients(buffers_[b], wire, reduction_.reduction, tag);
}

namespace {

/// The row-sparse bucket's last step, on the comm stream (CPU: thread) after the all-gather: `grad` = the
/// average over the ranks of their gathered rows (world x K rows of C, listed by `ids`; -1: padding), each
/// rank's rows added in rank order into zeros, then scaled by 1 / world: the same bits on every rank.
template <typename T, typename W>
void addGatheredRows(const Tensor& grad, const Tensor& ids, const Tensor& rows, int64_t K, int64_t C, int world,
                     cudaStream_t stream) {
  T* g = grad.data<T>();
  const int64_t n = grad.numel();
  const T inverse = T(1) / T(world);
  const auto ranksIds = [&](int r) { return ids.data<int32_t>() + r * K; };
  const auto ranksRows = [&](int r) { return rows.data<W>() + r * K * C; };
  if (!grad.isCuda()) {
    kernels::cpu::fill<T>(g, T(0), n);
    for (int r = 0; r < world; ++r) kernels::cpu::scatterAddRows<W, T>(ranksRows(r), ranksIds(r), K, C, g);
    kernels::cpu::scale<T>(g, inverse, g, n);
    return;
  }
  MINIDP_ON_CUDA({
    kernels::cuda::fill<T>(g, T(0), n, stream);
    for (int r = 0; r < world; ++r) kernels::cuda::scatterAddRows<W, T>(ranksRows(r), ranksIds(r), K, C, g, stream);
    kernels::cuda::scale<T>(g, inverse, g, n, stream);
  });
}

}  // namespace

std::shared_ptr<Work> Reducer::reduceRows(size_t b, const Tensor& wire, const std::string& tag) {
  const auto& [name, param] = params_[reduction_.rowSparse];
  MINIDP_CHECK(!rowIds_.empty(), "no row ids for the row-sparse parameter '"
                                     << name << "' in this step: call addRowIds every micro-batch");
  const int world = comm_->worldSize();
  const int64_t V = param.shape()[0], C = param.shape()[1];
  // K, the rows each rank sends: its ids in the step (the same count on every rank), at most V.
  int64_t K = 0;
  for (const Tensor& ids : rowIds_) K += ids.numel();
  K = std::min(K, V);
  Tensor grad = buffers_[b];
  // Each rank receives (world - 1) x K rows; a ring all-reduce moves 2 (world - 1) / world x V rows. Alone,
  // there is nothing to send: the dense path (a bf16 round trip at most) is the cheaper one.
  if (world == 1 || K * world >= 2 * V) return comm_->reduceGradients(grad, wire, reduction_.reduction, tag);
  const Device device = grad.device();
  const DType wireType = wire.defined() ? DType::BF16 : grad.dtype();
  if (!rowList_.defined() || rowList_.numel() != K || rowMarks_.numel() != V || packed_.dtype() != wireType) {
    // The gathers' sizes, and the branch above, need the same K on every rank: checked whenever K changes
    // (a blocking exchange, once in a run with fixed batches).
    const std::vector<std::string> all = comm_->allGather(std::to_string(K));
    for (int r = 0; r < world; ++r) {
      MINIDP_CHECK(all[r] == all[0], "row-sparse parameter '" << name << "': rank " << r << " has " << all[r]
                                                              << " row ids in this step, rank 0 " << all[0]
                                                              << "; every rank must pass as many");
    }
    rowMarks_ = Tensor::empty({V}, DType::I32, device);
    rowList_ = Tensor::empty({K}, DType::I32, device);
    packed_ = Tensor::empty({K * C}, wireType, device);
    // -1 (padding) until the first gather fills it: nothing is added for an id that never arrived.
    gatheredIds_ = Tensor::fromVector(std::vector<int32_t>(world * K, -1), {world * K}).to(device);
    gatheredRows_ = Tensor::empty({world * K * C}, wireType, device);
  }
  // On the compute stream (CPU: here): this rank's distinct rows, increasing, padded with -1 to K; packed.
  rowMarks_.zero();
  for (const Tensor& ids : rowIds_) {
    MINIDP_LAUNCH(rowMarks_, markRows, ids.data<int32_t>(), ids.numel(), V, rowMarks_.data<int32_t>());
  }
  MINIDP_LAUNCH(rowList_, listMarkedRows, rowMarks_.data<int32_t>(), V, rowList_.data<int32_t>(), K);
  const int32_t* list = rowList_.data<int32_t>();
  if (wire.defined()) {
    MINIDP_LAUNCH(packed_, gatherRows, grad.data<float>(), list, K, C, packed_.data<bf16>());
  } else {
    MINIDP_DISPATCH_FLOAT(grad.dtype(), T,
                          { MINIDP_LAUNCH(packed_, gatherRows, grad.data<T>(), list, K, C, packed_.data<T>()); });
  }
  timings_[b].bytes = static_cast<size_t>(K * C) * dtypeSize(grad.dtype());  // as a bucket's: its dtype
  // Two all-gathers in comm order: the ids, then the rows, after which every rank adds all of them. The ids'
  // work is waited on in finalize too, so that its failure is reported.
  rowIdsWork_ = comm_->allGatherInto(rowList_, gatheredIds_, tag + " ids");
  const Tensor ids = gatheredIds_, rows = gatheredRows_;
  return comm_->allGatherInto(packed_, gatheredRows_, tag, [grad, ids, rows, K, C, world](cudaStream_t stream) {
    if (rows.dtype() == DType::BF16) {
      addGatheredRows<float, bf16>(grad, ids, rows, K, C, world, stream);
    } else {
      MINIDP_DISPATCH_FLOAT(grad.dtype(), T, { addGatheredRows<T, T>(grad, ids, rows, K, C, world, stream); });
    }
  });
}

void Reducer::finalize(const std::function<void()>& beforeWaits) {
  MINIDP_CHECK(stepOpen_, "finalize() without prepareStep()");
  MINIDP_CHECK(requireSync_, "finalize() with sync off: call setRequireSync(true) before the last backward");
  for (size_t i = 0; i < params_.size(); ++i) {
    MINIDP_CHECK(marked_[i], "parameter '" << params_[i].first
                                           << "' got no gradient in this step (unused in "
                                              "forward?); every parameter must get one on every rank");
  }
  launchCompleted();
  if (beforeWaits) beforeWaits();
  for (BucketTiming& t : timings_) t.work->wait();
  if (rowIdsWork_) std::exchange(rowIdsWork_, nullptr)->wait();
  stepOpen_ = false;
}

}  // namespace minidp::distributed
