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
/// than the timeout, it prints one line naming it (tag, bytes, age) and calls `onTimeout`, which is
/// expected to end the process (MPI_Abort / ncclCommAbort).
class Watchdog {
 public:
  /// `timeoutSeconds` <= 0 disables the watchdog. `threadInit` runs first on the watchdog thread
  /// (CUDA: select the device whose events it queries); it must not throw.
  Watchdog(double timeoutSeconds, int rank, std::function<void()> onTimeout,
           std::function<void()> threadInit = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Watches `work` until it completes or is released by its owner.
  void watch(const std::shared_ptr<Work>& work);

  /// The line printed on a timeout.
  static std::string describeTimeout(const Work& work, int rank, double ageSeconds);

 private:
  void loop(const std::function<void()>& threadInit);
  const double timeoutMs_;
  const int rank_;
  std::function<void()> onTimeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::weak_ptr<Work>> watched_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace minidp::distributed
