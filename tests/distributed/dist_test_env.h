// The process-wide MPI environment and communicators of the distributed test binaries (mpi_main.cpp).
#pragma once

#include <memory>
#include <string>

#include "framework/distributed/communicator.h"
#include "framework/distributed/mpi_environment.h"

namespace minidp::testing {

/// The MPI environment, or null when the binary was not started by mpirun.
distributed::MpiEnvironment* mpiEnvironment();
/// The communicator the tests of this process share for `device`: mpi (CPU under mpirun), single (CPU
/// alone), nccl (CUDA). Null with `skipReason` set when this process cannot have one.
std::shared_ptr<distributed::Communicator> sharedCommunicator(Device device, std::string* skipReason);

}  // namespace minidp::testing
