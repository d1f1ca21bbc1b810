#include "framework/distributed/gradient/step_timer_observer.h"

namespace minidp::distributed {

void StepTimerObserver::addBucketSpans(const std::vector<BucketTiming>& timings) {
  if (!timer_.isOpen()) return;
  // Host times are on hostNowMs()'s clock. CUDA: Work::timing is relative to the step's start event;
  // CPU: it is host time too.
  const double hostStart = timer_.hostStartMs();
  cudaEvent_t start = timer_.startEvent();
  timer_.atResolve([timings, hostStart, start](runtime::StepRecord& r) {
    const double origin = start ? 0 : hostStart;
    for (const BucketTiming& t : timings) {
      const WorkTiming w = t.work->timing(start);
      r.buckets.push_back(runtime::BucketSpan{t.bucket, t.bytes, t.readyMs - hostStart, t.launchMs - hostStart,
                                              w.startedMs - origin, w.finishedMs - origin});
    }
  });
}

}  // namespace minidp::distributed
