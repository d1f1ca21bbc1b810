// The CUDA side of collectives: a comm stream, and the event protocol that orders a collective after
// the compute stream's work and the compute stream after the collective, without host synchronisation.
// Compiled only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/distributed/comm/communicator.h"

namespace minidp::distributed {

/// Event triples (ready, start, done) reused across collectives, so that steady-state training creates no
/// events. A triple may go back while its events are pending: the next cudaEventRecord replaces them.
class EventPool {
 public:
  using Events = std::array<cudaEvent_t, 3>;
  ~EventPool();
  Events acquire();
  void release(const Events& events);

 private:
  std::mutex mutex_;
  std::vector<Events> free_;
};

/// A collective enqueued on a comm stream between a start and a done event. It holds the tensor the
/// collective reads and writes (PyTorch's record_stream): whoever holds the work until it completes (the
/// comm stream, the watchdog) keeps that memory from going back to the allocator under the comm stream.
class CudaWork : public Work {
 public:
  CudaWork(std::string tag, Tensor buffer, std::shared_ptr<EventPool> pool);
  ~CudaWork() override;
  /// The compute stream waits on the done event (cudaStreamWaitEvent); the host does not wait. A work
  /// captured into a CUDA graph is waited for only inside its capture (the join of its comm stream).
  void wait() override;
  /// A captured work counts as complete: the graph's replays launch its collective, and each replay, which
  /// joins the comm stream back into the compute stream, is watched as a whole (Communicator::watchReplay).
  bool completed() const override;
  /// Since launch: a collective waiting on the GPU for its gradients counts too (the timeout is long).
  double runningSinceMs() const override;
  WorkTiming timing(cudaEvent_t reference = nullptr) const override;

 private:
  friend class CommStream;
  std::shared_ptr<EventPool> pool_;
  Tensor keepAlive_;
  cudaEvent_t ready_ = nullptr, start_ = nullptr, done_ = nullptr;
  double launchedMs_ = 0;
  /// False while launch() enqueues it (a watchdog may already hold it: not complete yet); true once the
  /// done event is recorded, or when the launch failed (nothing left to wait for).
  std::atomic<bool> settled_{false};
  bool captured_ = false;  // launched while the compute stream was being captured into a CUDA graph
};

/// A rank's comm stream (non-blocking, optionally at the greatest priority) on the current device. It
/// holds every launched work until the work completes, so a caller may drop a work (and its tensor) early.
class CommStream {
 public:
  explicit CommStream(bool highPriority);
  /// Waits for the stream, then releases the works (logs failures).
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  cudaStream_t stream() const { return stream_; }
  int priority() const { return priority_; }
  /// Records "ready" on the compute stream, makes the comm stream wait on it, then runs `issue` (which
  /// enqueues the collective on `buffer` on the comm stream) between the start and done events.
  /// `watch` (the watchdog's) gets the work before anything is enqueued, so a launch that blocks is watched.
  std::shared_ptr<CudaWork> launch(std::string tag, Tensor buffer, const std::function<void(cudaStream_t)>& issue,
                                   const std::function<void(const std::shared_ptr<Work>&)>& watch = {});

 private:
  cudaStream_t stream_ = nullptr;
  int priority_ = 0;
  std::shared_ptr<EventPool> events_ = std::make_shared<EventPool>();
  std::vector<std::shared_ptr<CudaWork>> inFlight_;  // launched, not seen complete yet
};

/// Warns on stderr (from rank 0) when CUDA_DEVICE_MAX_CONNECTIONS=1 serialises all streams onto one
/// hardware queue, which removes the overlap of communication with backward.
void warnIfSerialisedStreams(int rank);

}  // namespace minidp::distributed
