// Watchdog: turns a collective that never completes (a bug, or a dead rank) into an error that ends
// every rank, instead of a silent hang.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/distributed/job/mailbox.h"
#include "framework/distributed/job/work.h"

namespace minidp::distributed {

/// A thread that polls the collectives it watches; when one has been running unfinished for longer
/// than the timeout, or the backend's health check reports an error, it calls `onFailure` with one line
/// naming it; `onFailure` is expected to print the line (or have one rank print it) and end the process
/// (MpiEnvironment::endJob / ncclCommAbort).
class Watchdog {
 public:
  /// `timeoutSeconds` <= 0: no timeout (works are still held until they complete, and the health check
  /// still runs). `threadInit` runs first on the watchdog thread (CUDA: select the device whose events
  /// it queries); it must not throw. `healthCheck`, when set, runs every period on the watchdog thread
  /// and returns the line to print on a failure (e.g. NCCL's asynchronous error), empty while healthy.
  /// `census`, when set, runs on a timeout with the stuck collective's tag and returns the part of the
  /// line that names the ranks that did not arrive (MpiEnvironment::census), empty when it cannot tell.
  Watchdog(double timeoutSeconds, int rank, std::function<void(const std::string& line)> onFailure,
           std::function<void()> threadInit = {}, std::function<std::string()> healthCheck = {},
           std::function<std::string(const std::string&)> census = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Watches `work` and holds it until it completes, even when its owner released it earlier: a
  /// collective whose caller returned from wait() at once (CUDA) is still watched, and its events and
  /// buffer stay out of reuse until it is done.
  void watch(const std::shared_ptr<Work>& work);

  /// Runs `action` while no health check is running and stops the health checks for good: what
  /// `action` frees (ncclCommAbort frees the communicator) is never queried afterwards. Callable from
  /// the watchdog thread itself (its onFailure).
  void runExclusive(const std::function<void()>& action);

  /// The line printed on a timeout; `missing` names the ranks that did not arrive (empty: unknown).
  static std::string describeTimeout(const Work& work, int rank, double ageSeconds, const std::string& missing = {});

 private:
  void loop(const std::function<void()>& threadInit);
  /// Calls onFailure with `line`.
  void fail(const std::string& line);
  /// Checks `works` outside the lock: drops the completed ones, reports a stuck or failed one.
  void scan(std::vector<std::shared_ptr<Work>>& works);
  const double timeoutMs_;
  const int rank_;
  std::function<void(const std::string&)> onFailure_;
  std::function<std::string()> healthCheck_;
  std::function<std::string(const std::string&)> census_;
  double resumedMs_ = -1;  // hostNowMs() when this process last resumed after being stopped (watchdog thread only)
  std::mutex healthMutex_;  // held while the health check runs, and by runExclusive
  bool healthStopped_ = false;
  Mailbox<std::shared_ptr<Work>> incoming_;  // its own lock only: watch() never waits for a scan
  std::thread thread_;
};

/// A deadline for one blocking call that the watchdog cannot see (MPI_Init_thread, MPI_Finalize,
/// ncclCommInitRank): when the scope is still open after `seconds`, prints `line` (unless empty: then
/// `onExpire` says what happened) and calls `onExpire` (which ends the process) on its own thread. Time this
/// process spent stopped does not count: woken more than a second after the deadline, it waits `seconds` more.
class Deadline {
 public:
  Deadline(double seconds, std::string line, std::function<void()> onExpire);
  ~Deadline();
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool closed_ = false;
  std::thread thread_;
};

}  // namespace minidp::distributed
