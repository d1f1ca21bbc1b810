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

#include "framework/distributed/communicator.h"

namespace minidp::distributed {

/// A thread that polls the collectives it watches; when one has been running unfinished for longer
/// than the timeout, or the backend's health check reports an error, it prints one line naming it and
/// calls `onTimeout`, which is expected to end the process (MPI_Abort / ncclCommAbort).
class Watchdog {
 public:
  /// `timeoutSeconds` <= 0: no timeout (works are still held until they complete, and the health check
  /// still runs). `threadInit` runs first on the watchdog thread (CUDA: select the device whose events
  /// it queries); it must not throw. `healthCheck`, when set, runs every period on the watchdog thread
  /// and returns the line to print on a failure (e.g. NCCL's asynchronous error), empty while healthy.
  Watchdog(double timeoutSeconds, int rank, std::function<void()> onTimeout, std::function<void()> threadInit = {},
           std::function<std::string()> healthCheck = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Watches `work` and holds it until it completes, even when its owner released it earlier: a
  /// collective whose caller returned from wait() at once (CUDA) is still watched, and its events and
  /// buffer stay out of reuse until it is done.
  void watch(const std::shared_ptr<Work>& work);

  /// The line printed on a timeout.
  static std::string describeTimeout(const Work& work, int rank, double ageSeconds);

 private:
  void loop(const std::function<void()>& threadInit);
  /// Prints `line` and calls onTimeout.
  void fail(const std::string& line);
  const double timeoutMs_;
  const int rank_;
  std::function<void()> onTimeout_;
  std::function<std::string()> healthCheck_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<Work>> watched_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace minidp::distributed
