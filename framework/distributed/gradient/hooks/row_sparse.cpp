#include "framework/distributed/gradient/hooks/row_sparse.h"

#include <algorithm>

#include "framework/tensor/dispatch.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/rows.h"

namespace minidp::distributed {

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
  MINIDP_LAUNCH_ON(stream, grad, fill<T>, g, T(0), n);
  for (int r = 0; r < world; ++r) {
    const W* packed = rows.data<W>() + r * K * C;
    const int32_t* rowIds = ids.data<int32_t>() + r * K;
    if (grad.isCuda()) {
      MINIDP_ON_CUDA(kernels::cuda::scatterAddRows<W, T>(packed, rowIds, K, C, g, stream));
    } else {
      kernels::cpu::scatterAddRows<W, T>(packed, rowIds, K, C, g);
    }
  }
  MINIDP_LAUNCH_ON(stream, grad, scale<T>, g, inverse, g, n);
}

}  // namespace

RowSparseHook::RowSparseHook(std::unique_ptr<CommHook> inner, int param) : inner_(std::move(inner)), param_(param) {
  MINIDP_CHECK(inner_, "row-sparse hook without a hook for the other buckets");
}

void RowSparseHook::setup(const std::vector<GradBucket>& buckets, Communicator& comm) {
  bool found = false;
  for (const GradBucket& b : buckets) {
    for (const BucketEntry& e : b.entries) {
      if (e.param != param_) continue;
      MINIDP_CHECK(b.reduction == Reduction::AllReduce,
                   "row-sparse parameter '" << e.name << "': its rows are all-gathered, not reduce-scattered (ZeRO-1)");
      MINIDP_CHECK(e.shape.size() == 2,
                   "row-sparse parameter '" << e.name << "' must be 2-D (rows, columns), is " << shapeString(e.shape));
      MINIDP_CHECK(b.entries.size() == 1,
                   "row-sparse parameter '" << e.name << "' must have a bucket of its own (ParamInfo::solo)");
      bucket_ = b.index;
      found = true;
    }
  }
  MINIDP_CHECK(found, "row-sparse parameter #" << param_ << " is in no bucket");
  inner_->setup(buckets, comm);
}

void RowSparseHook::beginStep() {
  rowIds_.clear();
  open_ = true;
  inner_->beginStep();
}

void RowSparseHook::addRowIds(const Tensor& ids) {
  MINIDP_CHECK(open_, "addRowIds outside a step or after the row bucket was reduced: call it after prepareStep(), "
                      "before the micro-batch's backward");
  MINIDP_CHECK(ids.defined() && ids.dtype() == DType::I32, "row ids must be an int32 tensor");
  // A copy (on the compute stream): the batch's own memory is refilled with the next batch before this
  // step's bucket is reduced.
  rowIds_.push_back(Tensor::alias(ids.clone(), 0, {ids.numel()}));
}

std::shared_ptr<Work> RowSparseHook::reduce(const GradBucket& bucket, Communicator& comm) {
  if (bucket.index != bucket_) return inner_->reduce(bucket, comm);
  open_ = false;
  const BucketEntry& entry = bucket.entries.front();
  MINIDP_CHECK(!rowIds_.empty(), "no row ids for the row-sparse parameter '"
                                     << entry.name << "' in this step: call addRowIds every micro-batch");
  const int world = comm.worldSize();
  const int64_t V = entry.shape[0], C = entry.shape[1];
  // K, the rows each rank sends: its ids in the step (the same count on every rank), at most V.
  int64_t K = 0;
  for (const Tensor& ids : rowIds_) K += ids.numel();
  K = std::min(K, V);
  Tensor grad = bucket.buffer;
  // The branch below and the gathers' sizes need the same K on every rank: checked whenever K changes (a
  // blocking exchange, once in a run with fixed batches), before either is chosen.
  if (K != agreedK_) {
    const std::vector<std::string> all = comm.allGather(std::to_string(K));
    for (int r = 0; r < world; ++r) {
      MINIDP_CHECK(all[r] == all[0], "row-sparse parameter '" << entry.name << "': rank " << r << " has " << all[r]
                                                              << " row ids in this step, rank 0 " << all[0]
                                                              << "; every rank must pass as many");
    }
    agreedK_ = K;
  }
  // Each rank receives (world - 1) x K rows; a ring all-reduce moves 2 (world - 1) / world x V rows. Alone,
  // there is nothing to send: the wrapped hook (a bf16 round trip at most) is the cheaper one.
  if (world == 1 || K * world >= 2 * V) return inner_->reduce(bucket, comm);
  const Device device = grad.device();
  const DType wireType = inner_->wireDType(grad.dtype());
  MINIDP_CHECK(wireType == grad.dtype() || (wireType == DType::BF16 && grad.dtype() == DType::F32),
               "row-sparse parameter '" << entry.name << "': its rows travel in the gradient's dtype or in bf16 from "
                                        << "fp32, not in " << dtypeName(wireType) << " from " << dtypeName(grad.dtype())
                                        << " (--comm-hook " << inner_->name() << ")");
  if (!rowList_.defined() || rowList_.numel() != K || rowMarks_.numel() != V || packed_.dtype() != wireType) {
    rowMarks_ = Tensor::empty({V}, DType::I32, device);
    rowList_ = Tensor::empty({K}, DType::I32, device);
    packed_ = Tensor::empty({K * C}, wireType, device);
    // -1 (padding) until the first gather fills it: nothing is added for an id that never arrived.
    gatheredIds_ = Tensor::fromVector(std::vector<int32_t>(world * K, -1), {world * K}).to(device);
    gatheredRows_ = Tensor::empty({world * K * C}, wireType, device);
  }
  const std::string tag = "bucket " + std::to_string(bucket.index);
  std::vector<std::shared_ptr<Work>> works;
  // This rank's distinct rows, increasing, padded with -1 to K; packed in the wire's type.
  Tensor marks = rowMarks_, list = rowList_, packed = packed_;
  const std::vector<Tensor> idsOfStep = rowIds_;
  works.push_back(comm.enqueue(tag + " pack", grad, [=](cudaStream_t s) mutable {
    marks.zero(s);
    for (const Tensor& ids : idsOfStep) {
      MINIDP_LAUNCH_ON(s, marks, markRows, ids.data<int32_t>(), ids.numel(), V, marks.data<int32_t>());
    }
    MINIDP_LAUNCH_ON(s, marks, listMarkedRows, marks.data<int32_t>(), V, list.data<int32_t>(), K);
    if (packed.dtype() == DType::BF16) {
      MINIDP_LAUNCH_ON(s, grad, gatherRows, grad.data<float>(), list.data<int32_t>(), K, C, packed.data<bf16>());
    } else {
      MINIDP_DISPATCH_FLOAT(grad.dtype(), T, {
        MINIDP_LAUNCH_ON(s, grad, gatherRows, grad.data<T>(), list.data<int32_t>(), K, C, packed.data<T>());
      });
    }
  }));
  // Two all-gathers in comm order, the ids, then the rows; then every rank adds all of them.
  works.push_back(comm.allGather(rowList_, gatheredIds_, tag + " ids"));
  works.push_back(comm.allGather(packed_, gatheredRows_, tag));
  const Tensor ids = gatheredIds_, rows = gatheredRows_;
  works.push_back(comm.enqueue(tag + " add", grad, [grad, ids, rows, K, C, world](cudaStream_t s) {
    if (rows.dtype() == DType::BF16) {
      addGatheredRows<float, bf16>(grad, ids, rows, K, C, world, s);
    } else {
      MINIDP_DISPATCH_FLOAT(grad.dtype(), T, { addGatheredRows<T, T>(grad, ids, rows, K, C, world, s); });
    }
  }));
  // Bytes in the gradient's dtype, as a bucket's: what the bucket-cap model compares with the dense bucket.
  return std::make_shared<WorkChain>(tag, static_cast<size_t>(K * C) * dtypeSize(grad.dtype()), std::move(works));
}

}  // namespace minidp::distributed
