// MpiCommunicator: CPU tensors over MPI, collectives run on the MPI thread so backward keeps computing.
#pragma once

#include <memory>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/distributed/job/watchdog.h"

namespace minidp::distributed {

/// Reduces by MPI_Reduce(SUM) to rank 0 (an average: then a scale by 1/N on rank 0) and MPI_Bcast: every
/// rank receives rank 0's bits; a reduce-scatter is the same with MPI_Scatter instead of MPI_Bcast.
/// (MPI_Allreduce does not promise that: recursive doubling sums in a rank-dependent order, so ranks could
/// hold different bits and drift apart.) bf16 tensors travel as uint16; MPI_Reduce sums them with a
/// user-defined op that rounds each add to bf16, and an average pre-multiplies every rank's values by
/// bf16(1/N): what NCCL's ncclAvg on ncclBfloat16 computes, up to the summation order.
class MpiCommunicator : public Communicator {
 public:
  /// `env` must outlive the communicator.
  MpiCommunicator(MpiEnvironment& env, double watchdogSeconds);
  /// Frees the bf16 sum op (logs failures).
  ~MpiCommunicator() override;
  int rank() const override { return env_.rank(); }
  int worldSize() const override { return env_.worldSize(); }
  std::string name() const override { return "mpi"; }
  std::string describe() const override;
  bool supports(Device device) const override { return device == Device::CPU; }
  std::shared_ptr<Work> allReduce(Tensor buffer, ReduceOp op, const std::string& tag) override;
  /// MPI_Reduce to rank 0, then MPI_Scatter of the shards.
  std::shared_ptr<Work> reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) override;
  /// MPI_Allgather on the comm thread.
  std::shared_ptr<Work> allGather(Tensor input, Tensor output, const std::string& tag) override;
  /// MPI_Allgather in place.
  std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) override;
  /// Posts `task` to the comm thread.
  std::shared_ptr<Work> enqueue(const std::string& tag, Tensor keep,
                                const std::function<void(cudaStream_t)>& task) override;
  void broadcast(Tensor& tensor, int root) override;
  std::vector<std::string> allGather(const std::string& bytes) override;
  /// MPI_Abort: ends every rank.
  void abort() noexcept override;

 private:
  /// Posts the reduction of `buffer` (the whole of it, or this rank's shard under `scatter`) and watches it.
  std::shared_ptr<Work> reduce(Tensor buffer, ReduceOp op, bool scatter, const std::string& tag);
  MpiEnvironment& env_;
  Watchdog watchdog_;
  MPI_Op bf16Sum_ = MPI_OP_NULL;
};

}  // namespace minidp::distributed
