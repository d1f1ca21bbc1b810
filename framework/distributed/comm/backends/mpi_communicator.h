// MpiCommunicator: CPU tensors over MPI, collectives run on the MPI thread so backward keeps computing.
#pragma once

#include <array>
#include <memory>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/distributed/job/watchdog.h"

namespace minidp::distributed {

/// Reduces by MPI_Reduce(SUM) to rank 0 (an average: then a scale by 1/N on rank 0) and MPI_Bcast: every
/// rank receives rank 0's bits; a reduce-scatter is the same with MPI_Scatter instead of MPI_Bcast.
/// (MPI_Allreduce does not promise that: recursive doubling sums in a rank-dependent order, so ranks could
/// hold different bits and drift apart.) Max and min reduce the same way (MPI_MAX, MPI_MIN). bf16 and fp16
/// tensors travel as uint16; MPI_Reduce combines them with user-defined ops that compute in float and round
/// each add to the type, and an average pre-multiplies every rank's values by 1/N rounded to the type: what
/// NCCL's ncclAvg on ncclBfloat16 and ncclFloat16 computes, up to the summation order. int8 and uint8 go as
/// MPI_INT8_T and MPI_UINT8_T.
class MpiCommunicator : public Communicator {
 public:
  /// `env` must outlive the communicator.
  MpiCommunicator(MpiEnvironment& env, double watchdogSeconds);
  /// Frees the bf16 and fp16 ops (logs failures).
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
  /// The user-defined ops of the 16-bit floats: bf16 sum, max, min, then fp16 sum, max, min (halfOp()).
  std::array<MPI_Op, 6> halfOps_{};
};

}  // namespace minidp::distributed
