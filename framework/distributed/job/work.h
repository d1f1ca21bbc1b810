// Work: one asynchronous task of the job (a collective, or a task on the MPI thread) that its owner waits
// on and the watchdog watches; its timings; and two compositions (already complete, a chain run in order).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/stream.h"
#include "framework/runtime/clock.h"

namespace minidp::distributed {

using runtime::hostNowMs;

/// When one collective ran, in ms. `launchedMs` is the host time it was issued. CPU: started and
/// finished are host times on the comm thread. CUDA: they are the comm stream's start and end events,
/// as ms after a reference event (or started = 0 and finished = duration without one).
struct WorkTiming {
  double launchedMs = 0;
  double startedMs = 0;
  double finishedMs = 0;
};

/// One collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  /// CPU: blocks until the collective finished and rethrows its error. CUDA: makes the compute stream
  /// wait on the collective's completion event and returns at once (no host synchronisation).
  virtual void wait() = 0;
  /// Whether the collective has finished; never blocks.
  virtual bool completed() const = 0;
  /// Host ms since which the collective has been running unfinished; negative when it finished or has
  /// not started. The watchdog's input.
  virtual double runningSinceMs() const = 0;
  /// Timings, valid once the collective finished (CUDA: after a synchronisation). `reference` (CUDA):
  /// an event recorded earlier on any stream of the device.
  virtual WorkTiming timing(cudaEvent_t reference = nullptr) const = 0;
  /// What the collective is, e.g. "bucket 3".
  const std::string& tag() const { return tag_; }
  size_t bytes() const { return bytes_; }

 protected:
  Work(std::string tag, size_t bytes) : tag_(std::move(tag)), bytes_(bytes) {}

 private:
  std::string tag_;
  size_t bytes_;
};

/// A collective that was complete when issued (world 1).
class CompletedWork : public Work {
 public:
  CompletedWork(std::string tag, size_t bytes);
  void wait() override {}
  bool completed() const override { return true; }
  double runningSinceMs() const override { return -1; }
  WorkTiming timing(cudaEvent_t reference = nullptr) const override;

 private:
  double launchedMs_;
};

/// Several works issued in order on one communicator, as one: a comm hook's collectives and the local work
/// between them. wait() waits for each in turn (so an earlier one's error is reported); timings run from the
/// first one's start to the last one's end.
class WorkChain : public Work {
 public:
  /// `bytes`: what the chain stands for in timings (a bucket's gradient bytes, say).
  WorkChain(std::string tag, size_t bytes, std::vector<std::shared_ptr<Work>> works);
  void wait() override;
  bool completed() const override;
  double runningSinceMs() const override;
  WorkTiming timing(cudaEvent_t reference = nullptr) const override;

 private:
  std::vector<std::shared_ptr<Work>> works_;
};

}  // namespace minidp::distributed
