// MpiEnvironment: MPI's lifetime in a process started by mpirun, and the one thread that calls MPI.
//
// Threading: after MPI_Init_thread, every MPI call minidp makes runs on the environment's MPI thread
// (post / execute), in FIFO order. So calls are never concurrent, and MPI_THREAD_SERIALIZED suffices
// (checked at start-up). The one exception is MPI_Abort, the failure path, which may come from any
// thread (watchdog, main) while the MPI thread is stuck in a collective: ending the job is its purpose.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace minidp::distributed {

/// MPI's message for an error code.
std::string mpiErrorString(int code);

}  // namespace minidp::distributed

/// Checks an MPI call (MPI_COMM_WORLD returns errors instead of aborting, see MpiEnvironment).
#define MPI_CHECK(call) MINIDP_CHECK_STATUS(call, MPI_SUCCESS, ::minidp::distributed::mpiErrorString)

namespace minidp::distributed {

class CommThread;
class CpuWork;

/// RAII MPI_Init_thread / MPI_Finalize; rank, world, node-local rank; the MPI thread.
class MpiEnvironment {
 public:
  MpiEnvironment();
  /// Drains the MPI thread, then MPI_Finalize (logs failures, never throws).
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  int rank() const { return rank_; }
  int worldSize() const { return world_; }
  /// Rank among the processes of this node (MPI_COMM_TYPE_SHARED): the GPU this rank drives.
  int localRank() const { return localRank_; }
  int localSize() const { return localSize_; }
  /// minidp's communicator: a duplicate of MPI_COMM_WORLD, so user traffic on the world never matches ours.
  MPI_Comm comm() const { return comm_; }

  /// Queues `task` on the MPI thread; `tag` and `bytes` describe it.
  std::shared_ptr<CpuWork> post(std::function<void()> task, std::string tag, size_t bytes);
  /// Runs `task` on the MPI thread and returns when it is done, rethrowing its error.
  void execute(std::function<void()> task, std::string tag);
  /// Every rank's `bytes`, indexed by rank (MPI_Allgather of lengths, then MPI_Allgatherv).
  std::vector<std::string> allGather(const std::string& bytes);
  /// Copies `bytes` bytes at `data` from rank `root` to every rank.
  void broadcastBytes(void* data, size_t bytes, int root);

  /// True when this process was started by mpirun, srun or a PMI launcher (launcher.h).
  static bool launchedByMpirun();
  /// Ends every rank of the job with `code` (MPI_Abort; std::abort when MPI is not running).
  [[noreturn]] static void abortAll(int code);

 private:
  int rank_ = 0, world_ = 1, localRank_ = 0, localSize_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<CommThread> thread_;
};

}  // namespace minidp::distributed
