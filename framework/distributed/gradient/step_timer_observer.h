// The step timer as an observer of DDP's reducer (DistributedDataParallel::observe): grad-ready marks
// (detailed steps), the finalize phase from the moment the waits begin, and each timed step's bucket spans.
#pragma once

#include <vector>

#include "framework/distributed/gradient/reducer.h"
#include "framework/runtime/step_timer.h"

namespace minidp::distributed {

/// Marks a reducer's events on a step timer. A captured step (CUDA graph) runs with the timer closed: no marks.
class StepTimerObserver : public ReducerObserver {
 public:
  explicit StepTimerObserver(runtime::StepTimer& timer) : timer_(timer) {}
  void gradReady(size_t index) override { timer_.markGradReady(index); }
  void waitsBegin() override {
    if (timer_.isOpen()) timer_.phase(runtime::Phase::Finalize);
  }
  /// After finalize, in an open step: adds the buckets' spans (`timings`, the reducer's last step) to its
  /// record, read once the step's work has completed.
  void addBucketSpans(const std::vector<BucketTiming>& timings);

 private:
  runtime::StepTimer& timer_;
};

}  // namespace minidp::distributed
