#include "framework/distributed/comm/cuda_work.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/cuda_check.h"
#include "framework/runtime/device.h"
#include "framework/runtime/graph.h"

namespace minidp::distributed {

EventPool::~EventPool() {
  // Destroying a pending event is allowed: its resources are released once it completes.
  for (const Events& events : free_) {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
}

EventPool::Events EventPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      Events events = free_.back();
      free_.pop_back();
      return events;
    }
  }
  Events events{};
  CUDA_CHECK(cudaEventCreateWithFlags(&events[0], cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreate(&events[1]));
  CUDA_CHECK(cudaEventCreate(&events[2]));
  return events;
}

void EventPool::release(const Events& events) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(events);
}

CudaWork::CudaWork(std::string tag, Tensor buffer, std::shared_ptr<EventPool> pool)
    : Work(std::move(tag), buffer.nbytes()),
      pool_(std::move(pool)),
      keepAlive_(std::move(buffer)),
      launchedMs_(hostNowMs()) {
  const EventPool::Events events = pool_->acquire();
  ready_ = events[0];
  start_ = events[1];
  done_ = events[2];
}

CudaWork::~CudaWork() { pool_->release({ready_, start_, done_}); }

void CudaWork::wait() {
  cudaStream_t compute = runtime::computeStream();
  if (captured_ && !runtime::capturing(compute)) return;
  CUDA_CHECK(cudaStreamWaitEvent(compute, done_, 0));
}

bool CudaWork::completed() const {
  if (!settled_) return false;
  if (captured_) return true;  // its events were recorded into a graph: querying them is an error
  const cudaError_t status = cudaEventQuery(done_);
  if (status == cudaErrorNotReady) return false;
  CUDA_CHECK(status);
  return true;
}

double CudaWork::runningSinceMs() const { return completed() ? -1 : launchedMs_; }

WorkTiming CudaWork::timing(cudaEvent_t reference) const {
  MINIDP_CHECK(completed(), "timing of '" << tag() << "' before it completed: synchronise first");
  WorkTiming t;
  t.launchedMs = launchedMs_;
  float ms = 0;
  if (reference) {
    CUDA_CHECK(cudaEventElapsedTime(&ms, reference, start_));
    t.startedMs = ms;
  }
  CUDA_CHECK(cudaEventElapsedTime(&ms, start_, done_));
  t.finishedMs = t.startedMs + ms;
  return t;
}

CommStream::CommStream(bool highPriority) {
  runtime::computeStream();     // the device's context first
  int least = 0, greatest = 0;  // least is the default priority
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  priority_ = highPriority ? greatest : least;
  CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority_));
}

CommStream::~CommStream() {
  cudaError_t status = cudaStreamSynchronize(stream_);
  if (status == cudaSuccess) status = cudaStreamDestroy(stream_);
  if (status != cudaSuccess) {
    std::fprintf(stderr, "minidp: destroying the comm stream failed: %s\n", cudaGetErrorString(status));
  }
  // inFlight_ goes after this: every work it releases has completed (or the stream failed).
}

std::shared_ptr<CudaWork> CommStream::launch(std::string tag, Tensor buffer,
                                             const std::function<void(cudaStream_t)>& issue,
                                             const std::function<void(const std::shared_ptr<Work>&)>& watch) {
  inFlight_.erase(std::remove_if(inFlight_.begin(), inFlight_.end(),
                                 [](const std::shared_ptr<CudaWork>& w) { return w->completed(); }),
                  inFlight_.end());
  auto work = std::make_shared<CudaWork>(std::move(tag), std::move(buffer), events_);
  work->captured_ = runtime::capturing(runtime::computeStream());  // before a watchdog can see it
  if (watch) watch(work);
  try {
    CUDA_CHECK(cudaEventRecord(work->ready_, runtime::computeStream()));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, work->ready_, 0));
    CUDA_CHECK(cudaEventRecord(work->start_, stream_));
    issue(stream_);
    CUDA_CHECK(cudaEventRecord(work->done_, stream_));
  } catch (...) {
    work->settled_ = true;  // the error goes to the caller; the watchdog lets the work go
    throw;
  }
  work->settled_ = true;
  inFlight_.push_back(work);
  return work;
}

void warnIfSerialisedStreams(int rank) {
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (rank == 0 && connections && std::strcmp(connections, "1") == 0) {
    std::fprintf(stderr,
                 "minidp: warning: CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream on one hardware queue; "
                 "all-reduce will not overlap backward\n");
  }
}

}  // namespace minidp::distributed
