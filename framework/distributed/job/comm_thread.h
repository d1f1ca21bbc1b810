// The CPU side of collectives: one thread that runs queued tasks in FIFO order, so that backward keeps
// computing while a bucket is being reduced, and the Work that tracks one queued task.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "framework/distributed/job/mailbox.h"
#include "framework/distributed/job/work.h"

namespace minidp::distributed {

/// A task queued on a CommThread. Host timestamps: launched (queued), started, finished.
class CpuWork : public Work {
 public:
  CpuWork(std::string tag, size_t bytes, std::function<void()> task);
  /// Blocks until the comm thread finished the task; rethrows the task's error.
  void wait() override;
  bool completed() const override;
  /// Since when the task runs: a queued task waiting behind another is not stuck itself.
  double runningSinceMs() const override;
  WorkTiming timing(cudaEvent_t reference = nullptr) const override;

 private:
  friend class CommThread;
  void run();
  std::function<void()> task_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  bool started_ = false, finished_ = false;
  std::exception_ptr error_;
  WorkTiming timing_;
};

/// One thread executing tasks strictly in the order they were posted; joined (after draining) on
/// destruction.
class CommThread {
 public:
  CommThread();
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  /// Queues `task`; `tag` and `bytes` describe it in timings and watchdog messages.
  std::shared_ptr<CpuWork> post(std::function<void()> task, std::string tag, size_t bytes);
  /// post + wait: runs `task` on the thread and returns when it is done (rethrowing its error).
  void execute(std::function<void()> task, std::string tag);

 private:
  void loop();
  Mailbox<std::shared_ptr<CpuWork>> queue_;
  std::thread thread_;
};

}  // namespace minidp::distributed
