// MpiEnvironment: MPI's lifetime in a process started by mpirun, and the one thread that calls MPI.
//
// Threading: after MPI_Init_thread, every MPI call minidp makes runs on the environment's MPI thread
// (post / execute), in FIFO order, so calls are never concurrent. The one exception is MPI_Abort, the
// failure path, which may come from any thread (watchdog, main) while the MPI thread is stuck in a
// collective. That needs MPI_THREAD_MULTIPLE, which minidp requests; where MPI grants only
// MPI_THREAD_SERIALIZED, abortAll ends only the calling process from other threads (mpirun then ends
// the job) and calls MPI_Abort from the MPI thread alone.
//
// Deadlines: start-up (MPI_Init_thread and the communicator set-up), every blocking exchange
// (allGather, broadcastBytes) and MPI_Finalize end the process when they take longer than the
// environment's deadline; an exchange then names the ranks that did not arrive.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"

namespace minidp::distributed {

/// MPI's message for an error code.
std::string mpiErrorString(int code);

}  // namespace minidp::distributed

/// Checks an MPI call (MPI_COMM_WORLD returns errors instead of aborting, see MpiEnvironment).
#define MPI_CHECK(call) MINIDP_CHECK_STATUS(call, MPI_SUCCESS, ::minidp::distributed::mpiErrorString)

namespace minidp::distributed {

class CommThread;
class CpuWork;

/// Names the blocking exchanges this thread starts while it is alive ("DDP parameter check"), so that
/// an expired deadline says which one stalled. Nests: the innermost label wins.
class ExchangeLabel {
 public:
  explicit ExchangeLabel(std::string what);
  ~ExchangeLabel();
  ExchangeLabel(const ExchangeLabel&) = delete;
  ExchangeLabel& operator=(const ExchangeLabel&) = delete;
  /// The innermost label of this thread, or `fallback` when there is none.
  static std::string current(const std::string& fallback);

 private:
  std::string previous_;
};

/// RAII MPI_Init_thread / MPI_Finalize; rank, world, node-local rank; the MPI thread.
class MpiEnvironment {
 public:
  /// `deadlineSeconds` (> 0): how long start-up, a blocking exchange or MPI_Finalize may take.
  explicit MpiEnvironment(double deadlineSeconds = 300);
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
  /// The thread level MPI granted (MPI_THREAD_MULTIPLE or MPI_THREAD_SERIALIZED).
  int threadLevel() const { return threadLevel_; }

  /// True when this process was started by mpirun, srun or a PMI launcher (launcher.h).
  static bool launchedByMpirun();
  /// Ends every rank of the job with `code` (MPI_Abort where this thread may call it; std::abort when
  /// MPI is not running, or from another thread under MPI_THREAD_SERIALIZED).
  [[noreturn]] static void abortAll(int code);

 private:
  /// On the MPI thread: runs the nonblocking collective `start` posts, tagged `tag`, and polls it until
  /// it completes or the deadline passes; each rank first tells every other rank that it arrived, so an
  /// expired deadline names the ranks that did not.
  void exchange(const std::string& tag, const std::vector<std::function<void(MPI_Request*)>>& stages);
  int rank_ = 0, world_ = 1, localRank_ = 0, localSize_ = 1;
  int threadLevel_ = 0;
  double deadlineSeconds_;
  long long exchanges_ = 0;  // exchanges so far (MPI thread only): the arrival messages' payload
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm arrivals_ = MPI_COMM_NULL;  // a second duplicate, for the arrival messages alone
  std::unique_ptr<CommThread> thread_;
};

}  // namespace minidp::distributed
