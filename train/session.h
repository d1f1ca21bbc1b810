// This process's place in the job (MPI, device, communicator) and how a program's failures end it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/job/mpi_environment.h"
#include "train/options.h"

namespace minidp::train {

/// This process's place in the job: MPI (when launched by mpirun), device, communicator.
struct Session {
  std::unique_ptr<distributed::MpiEnvironment> mpi;
  std::shared_ptr<distributed::Communicator> comm;
  Device device = Device::CPU;
  DType dtype = DType::F32;    // parameters, gradient buckets, optimizer state
  DType compute = DType::F32;  // activations: dtype, or BF16 (mixed precision, CUDA only)
  bool verbose = false;        // runGuarded prints source locations
  std::string attention;       // the attention kernels bf16 takes here (ops::attentionKernels), read at opening
  int rank() const { return comm->rank(); }
  int world() const { return comm->worldSize(); }
};

/// Initialises MPI if launched by mpirun, picks the GPU by node-local rank, builds the communicator.
/// Fills the caller's `session` as it goes, so that when a step throws, runGuarded still finds MPI and
/// can end the other ranks (which would otherwise wait in the communicator's setup).
void openSession(Options& opts, Session& session);

/// All-gathers every rank's `parsedFlags` (Options::parsedFlags); where a rank's differ from rank 0's, every
/// rank throws AgreedError (kUsageExit) naming the first flag that differs, its values and the two ranks.
/// Ranks that parsed other flags would issue other collectives and wait for each other until the watchdog.
void agreeOnOptions(distributed::MpiEnvironment& mpi, const std::string& parsedFlags);

/// Runs `body`; on an exception, one line (train/errors.h's userMessage) and exit status 1. Under
/// mpirun with more than one rank (even when the communicator was never built), every rank ends and one
/// rank prints the line (distributed::MpiEnvironment::endJob: no MPI_Abort banner); before MPI started,
/// the first rank prints it. An AgreedError, which every rank threw alike, is printed by rank 0 alone and
/// ends no one: every rank returns its status (1, or kUsageExit for flags the ranks disagree on) and
/// finalises MPI cleanly.
int runGuarded(const char* program, Session& session, const std::function<int()>& body);

}  // namespace minidp::train
