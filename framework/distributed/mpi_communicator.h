// MpiCommunicator: CPU tensors over MPI, collectives run on the MPI thread so backward keeps computing.
#pragma once

#include <memory>

#include "framework/distributed/communicator.h"
#include "framework/distributed/mpi_environment.h"
#include "framework/distributed/watchdog.h"

namespace minidp::distributed {

/// Averages by MPI_Reduce(SUM) to rank 0, a scale by 1/N on rank 0, and MPI_Bcast: every rank receives
/// rank 0's bits. (MPI_Allreduce does not promise that: recursive doubling sums in a rank-dependent
/// order, so ranks could hold different bits and drift apart.)
class MpiCommunicator : public Communicator {
 public:
  /// `env` must outlive the communicator.
  MpiCommunicator(MpiEnvironment& env, double watchdogSeconds);
  int rank() const override { return env_.rank(); }
  int worldSize() const override { return env_.worldSize(); }
  std::string name() const override { return "mpi"; }
  std::string describe() const override;
  bool supports(Device device) const override { return device == Device::CPU; }
  std::shared_ptr<Work> allReduceAverage(Tensor buffer, const std::string& tag) override;
  void broadcast(Tensor& tensor, int root) override;
  std::vector<std::string> allGather(const std::string& bytes) override;
  /// MPI_Abort: ends every rank.
  void abort() noexcept override;

 private:
  MpiEnvironment& env_;
  Watchdog watchdog_;
};

}  // namespace minidp::distributed
