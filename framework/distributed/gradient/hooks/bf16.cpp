// bf16 on the wire (PyTorch's bf16_compress_hook): the fp32 bucket rounded into a bf16 copy, averaged in
// bf16 (ncclAvg: every rank's values times bf16(1/N), then summed, one rounding per operation), and widened
// back into the bucket (this rank's shard under ZeRO-1). Half the bytes; the same bits on every rank.
#include "framework/distributed/gradient/comm_hook.h"
#include "framework/tensor/dispatch.h"
#include "kernels/bf16_cast.h"

namespace minidp::distributed {

namespace {

class Bf16Hook : public CommHook {
 public:
  std::string name() const override { return "bf16"; }
  DType wireDType(DType) const override { return DType::BF16; }  // setup refuses all but fp32 buckets

  void setup(const std::vector<GradBucket>& buckets, Communicator& comm) override {
    wires_.clear();
    for (const GradBucket& b : buckets) {
      MINIDP_CHECK(b.buffer.dtype() == DType::F32, "--comm-hook bf16 needs fp32 gradients, bucket "
                                                       << b.index << " holds " << dtypeName(b.buffer.dtype()));
      wires_.push_back(comm.allocateCommBuffer(b.buffer.numel(), DType::BF16, b.buffer.device()));
    }
  }

  std::shared_ptr<Work> reduce(const GradBucket& bucket, Communicator& comm) override {
    const std::string tag = "bucket " + std::to_string(bucket.index);
    const Tensor buffer = bucket.buffer, wire = wires_.at(bucket.index);
    const int64_t n = buffer.numel();
    const bool scatter = bucket.reduction == Reduction::ReduceScatter;
    const int64_t count = scatter ? n / comm.worldSize() : n, first = scatter ? comm.rank() * count : 0;
    std::vector<std::shared_ptr<Work>> works;
    works.push_back(comm.enqueue(tag + " to bf16", buffer, [buffer, wire, n](cudaStream_t s) {
      MINIDP_LAUNCH_ON(s, buffer, castToBf16, buffer.data<float>(), wire.data<bf16>(), n);
    }));
    works.push_back(scatter ? comm.reduceScatter(wire, ReduceOp::Avg, tag) : comm.allReduce(wire, ReduceOp::Avg, tag));
    works.push_back(comm.enqueue(tag + " from bf16", buffer, [buffer, wire, first, count](cudaStream_t s) {
      MINIDP_LAUNCH_ON(s, buffer, castFromBf16, wire.data<bf16>() + first, buffer.data<float>() + first, count);
    }));
    return std::make_shared<WorkChain>(tag, buffer.nbytes(), std::move(works));
  }

 private:
  std::vector<Tensor> wires_;  // per bucket: the bf16 copy the collective sends
};

}  // namespace

std::unique_ptr<CommHook> makeBf16Hook(const CommHookOptions&) { return std::make_unique<Bf16Hook>(); }

}  // namespace minidp::distributed
