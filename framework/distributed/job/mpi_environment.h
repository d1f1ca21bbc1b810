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
// environment's deadline; an exchange (and a watchdog's stuck collective) first takes a census, which
// names the ranks that did not arrive.
//
// The census runs on the failure path only, once a deadline has expired: this rank sends what it waits
// in to every other rank and listens, for a short grace, for theirs. A rank waiting with it has a
// deadline of its own that expires at about the same time, so it answers; a rank that never came, or
// stopped or died (even inside the same collective, after its part was posted), stays silent and is
// named. (Arrival messages sent at every collective could not tell a rank stopped inside the collective
// from one waiting in it.) It cannot hang: it posts nonblocking sends and receives on a communicator of
// its own, polls the receives for the grace alone, never waits for a send, and the job is aborted right
// after, so nothing it leaves pending matters. It costs nothing while no deadline expires.
//
// Ending the job (endJob, abortAll): a rank that must end the job (an error, an expired deadline) does not
// call MPI_Abort, whose banner buries the one line that says what went wrong. It sends a note on a third
// communicator to every other rank and waits, for at most the grace, to hear from each. Every rank's
// listener thread polls for notes (every 20 ms, with MPI_THREAD_MULTIPLE) and, on another rank's failure,
// answers and waits for the line to be printed. Of the ranks that failed, the lowest prints one line (the
// message alone when every rank failed alike, else naming its rank) and tells the others; every process then
// exits with the code, without MPI_Finalize, from wherever it was (inside a collective too). A rank that
// never answers (stopped, or stuck outside MPI) is ended by mpirun, which ends a job one of whose processes
// exits non-zero (after SIGCONT and SIGTERM, SIGKILL); under another launcher, or where mpirun was told
// not to (orte_abort_on_non_zero_status 0), MPI_Abort ends it instead.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  /// Starts the greatest of every rank's `value` on the MPI thread, in order with what was posted before
  /// (an exchange under the deadline, named `tag`), and returns at once: once the work completes,
  /// `*result` holds it.
  std::shared_ptr<CpuWork> allReduceMax(int value, std::shared_ptr<int> result, const std::string& tag);
  /// The thread level MPI granted (MPI_THREAD_MULTIPLE or MPI_THREAD_SERIALIZED).
  int threadLevel() const { return threadLevel_; }
  /// The failure path, after `waitingIn` (the stuck operation) outlived its deadline: the census above.
  /// Returns the message's part that names the ranks, "rank(s) 1, 3 did not arrive" (and "rank 2 waits
  /// in 'bucket 1'" for a rank waiting in another collective, e.g. one further on), or "every rank
  /// arrived, the collective itself stalled"; empty when it cannot be taken (a second census of this
  /// process, or another thread than the MPI thread under MPI_THREAD_SERIALIZED). Blocks for at most
  /// the grace.
  std::string census(const std::string& waitingIn);

  /// The failure path of this rank when the job must end ("Ending the job" above); any thread may call it.
  /// `message` says what failed (ranks that failed alike print it once); `line(alike)` is the line this rank
  /// prints if it is the lowest rank that failed, `alike` when every rank failed with the same message; an
  /// empty `line` prints nothing (the caller printed already). Ends this process with `code`.
  [[noreturn]] void endJob(int code, const std::string& message, const std::function<std::string(bool alike)>& line);

  /// True when this process was started by mpirun, srun or a PMI launcher (launcher.h).
  static bool launchedByMpirun();
  /// Ends every rank of the job with `code`: endJob of the live environment, printing nothing; without one
  /// (or without the listener), MPI_Abort where this thread may call it, std::abort when MPI is not running
  /// or from another thread under MPI_THREAD_SERIALIZED.
  [[noreturn]] static void abortAll(int code);

 private:
  /// On the MPI thread: runs the nonblocking collectives `stages` post, tagged `tag`, and polls each
  /// until it completes or the deadline passes; then takes the census and aborts every rank.
  void exchange(const std::string& tag, const std::vector<std::function<void(MPI_Request*)>>& stages);
  int rank_ = 0, world_ = 1, localRank_ = 0, localSize_ = 1;
  int threadLevel_ = 0;
  double deadlineSeconds_;
  long long exchanges_ = 0;  // exchanges so far (MPI thread only): numbers them in messages
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm censusComm_ = MPI_COMM_NULL;   // a second duplicate, for the census messages alone
  std::atomic<bool> censusTaken_{false};  // one census per process: the job ends after it
  using CensusNote = std::array<char, 160>;
  std::vector<CensusNote> censusNotes_;  // the census messages, by rank (this rank's: what it waits in)
  std::unique_ptr<CommThread> thread_;

  // Ending the job: the notes ranks send each other, what this rank heard, and the listener.
  struct Note {
    int32_t kind = 0;               // kFailed, kQuit or kDone (mpi_environment.cpp)
    int32_t code = 0;               // the exit code
    std::array<char, 1016> text{};  // a failure's message, truncated
  };
  struct Heard {
    int kind = 0;  // kFailed or kQuit, 0 while nothing came
    std::string message;
    bool done = false;  // the rank printed the job's line
  };
  /// The listener thread: receives notes; on another rank's failure, answers and ends this process.
  void listen();
  /// Sends a note to every other rank (nonblocking; the buffers live until the process ends).
  void sendNote(int kind, int code, const std::string& text);
  /// Waits, for at most `seconds`, until `ready` holds (checked whenever a note comes).
  void waitForNotes(double seconds, const std::function<bool()>& ready);
  /// Whether the sends of this rank's notes completed, trying for at most `seconds`.
  void flushNotes(double seconds);
  /// Ends the process with `code` once the line is out: _Exit, or MPI_Abort when a rank never answered
  /// and mpirun will not end it (see above).
  [[noreturn]] void exitProcess(int code, bool silentRanks);
  double graceSeconds() const;
  MPI_Comm notesComm_ = MPI_COMM_NULL;  // a third duplicate, for the notes alone
  Note inbox_;
  MPI_Request inboxRequest_ = MPI_REQUEST_NULL;
  std::mutex notesMutex_;  // guards heard_, outbox_, sends_
  std::condition_variable notesChanged_;
  std::vector<Heard> heard_;        // by rank
  std::vector<bool> censusSilent_;  // the ranks the census did not hear from
  std::deque<Note> outbox_;         // the notes sent (their buffers stay put)
  std::vector<MPI_Request> sends_;  // their requests
  std::atomic<int> ending_{0};      // 0 running, 1 this rank failed, 2 another rank failed
  std::atomic<bool> stopListening_{false};
  std::thread listener_;
};

}  // namespace minidp::distributed
