// The process-wide MPI environment and communicators of the distributed test binaries (mpi_main.cpp).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/job/mpi_environment.h"

namespace minidp::testing {

/// The MPI environment, or null when the binary was not started by mpirun.
distributed::MpiEnvironment* mpiEnvironment();
/// The communicator the tests of this process share for `device`: mpi (CPU under mpirun), single (CPU
/// alone), nccl (CUDA), or mpi for CUDA when
/// ranks share a GPU (or MINIDP_TEST_CUDA_COMM=mpi). Null with `skipReason` set when this process cannot have one.
std::shared_ptr<distributed::Communicator> sharedCommunicator(Device device, std::string* skipReason);
/// The backend of the CUDA communicator sharedCommunicator builds: nccl, or mpi where ranks share a GPU (or
/// MINIDP_TEST_CUDA_COMM=mpi).
std::string cudaTestBackend();

/// A test per device on the shared communicator of that device; skipped, with the reason, where this
/// process has none.
class CommunicatorTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    std::string reason;
    comm_ = sharedCommunicator(GetParam(), &reason);
    if (!comm_) GTEST_SKIP() << reason;
    world_ = comm_->worldSize();
    rank_ = comm_->rank();
  }
  std::shared_ptr<distributed::Communicator> comm_;
  int world_ = 1, rank_ = 0;
};

}  // namespace minidp::testing
