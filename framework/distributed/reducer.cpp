#include "framework/distributed/reducer.h"

#include <cstdio>

#include "framework/ops/dispatch.h"
#include "framework/runtime/nvtx.h"
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
  std::vector<std::shared_ptr<Work>> works = rowIdWorks_;
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
  rowIdWorks_.clear();
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
  const size_t k = rowIdWorks_.size();
  const int64_t gathered = ids.numel() * comm_->worldSize();
  if (k == rowIds_.size()) rowIds_.push_back(Tensor());
  if (rowIds_[k].numel() != gathered) rowIds_[k] = Tensor::empty({gathered}, DType::I32, device);
  // A copy (on the compute stream): the batch's own memory is refilled with the next batch, unordered with
  // the comm stream (thread) that reads it; the work holds the copy until the all-gather completed.
  const Tensor flat = Tensor::alias(ids.clone(), 0, {ids.numel()});
  rowIdWorks_.push_back(comm_->allGatherInto(flat, rowIds_[k], "row ids " + std::to_string(k)));
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

/// The rows `ids` (concatenated) of `grad` (V, C) into `packed` (n, C), on the compute stream; or, with
/// `scatter`, `packed` back into those rows, on `stream` (CPU: null).
void copyRows(const Tensor& grad, const std::vector<Tensor>& ids, int64_t C, const Tensor& packed, bool scatter,
              cudaStream_t stream) {
  int64_t row = 0;
  for (const Tensor& chunk : ids) {
    const int64_t n = chunk.numel();
    MINIDP_DISPATCH_FLOAT(grad.dtype(), T, {
      T* rows = packed.data<T>() + row * C;
      const int32_t* id = chunk.data<int32_t>();
      if (!grad.isCuda()) {
        scatter ? kernels::cpu::scatterRows<T>(rows, id, n, C, grad.data<T>())
                : kernels::cpu::gatherRows<T>(grad.data<T>(), id, n, C, rows);
      } else if (scatter) {
        MINIDP_ON_CUDA(kernels::cuda::scatterRows<T>(rows, id, n, C, grad.data<T>(), stream));
      } else {
        MINIDP_ON_CUDA(kernels::cuda::gatherRows<T>(grad.data<T>(), id, n, C, rows, runtime::computeStream()));
      }
    });
    row += n;
  }
}

}  // namespace

std::shared_ptr<Work> Reducer::reduceRows(size_t b, const Tensor& wire, const std::string& tag) {
  const auto& [name, param] = params_[reduction_.rowSparse];
  MINIDP_CHECK(!rowIdWorks_.empty(), "no row ids for the row-sparse parameter '"
                                         << name << "' in this step: call addRowIds every micro-batch");
  const int64_t V = param.shape()[0], C = param.shape()[1];
  int64_t n = 0;
  for (size_t k = 0; k < rowIdWorks_.size(); ++k) {
    rowIdWorks_[k]->wait();  // CUDA: the compute stream (the gather below) waits for the ids
    n += rowIds_[k].numel();
  }
  Tensor grad = buffers_[b];
  if (n >= V) return comm_->reduceGradients(grad, wire, reduction_.reduction, tag);  // not smaller: dense
  if (!packed_.defined() || packed_.numel() != n * C) {
    packed_ = Tensor::empty({n * C}, grad.dtype(), grad.device());
    if (wire.defined()) packedWire_ = Tensor::empty({n * C}, DType::BF16, grad.device());
  }
  const std::vector<Tensor> ids(rowIds_.begin(), rowIds_.begin() + static_cast<std::ptrdiff_t>(rowIdWorks_.size()));
  copyRows(grad, ids, C, packed_, false, nullptr);
  timings_[b].bytes = packed_.nbytes();
  Tensor packed = packed_;
  return comm_->reduceGradients(
      packed_, wire.defined() ? packedWire_ : Tensor(), reduction_.reduction, tag,
      [grad, ids, C, packed](cudaStream_t stream) { copyRows(grad, ids, C, packed, true, stream); });
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
  stepOpen_ = false;
}

}  // namespace minidp::distributed
