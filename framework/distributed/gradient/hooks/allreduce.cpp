// The default comm hook: the bucket averaged as it is (all-reduce, or reduce-scatter under ZeRO-1).
#include "framework/distributed/gradient/comm_hook.h"

namespace minidp::distributed {

namespace {

class AllReduceHook : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::shared_ptr<Work> reduce(const GradBucket& bucket, Communicator& comm) override {
    const std::string tag = "bucket " + std::to_string(bucket.index);
    return bucket.reduction == Reduction::AllReduce ? comm.allReduce(bucket.buffer, ReduceOp::Avg, tag)
                                                    : comm.reduceScatter(bucket.buffer, ReduceOp::Avg, tag);
  }
};

}  // namespace

std::unique_ptr<CommHook> makeAllReduceHook(const CommHookOptions&) { return std::make_unique<AllReduceHook>(); }

}  // namespace minidp::distributed
