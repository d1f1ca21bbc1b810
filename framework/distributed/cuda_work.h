// The CUDA side of collectives: a comm stream, and the event protocol that orders a collective after
// the compute stream's work and the compute stream after the collective, without host synchronisation.
// Compiled only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

#include "framework/distributed/communicator.h"

namespace minidp::distributed {

/// A collective enqueued on a comm stream between a start and a done event.
class CudaWork : public Work {
 public:
  CudaWork(std::string tag, size_t bytes);
  ~CudaWork() override;
  /// The compute stream waits on the done event (cudaStreamWaitEvent); the host does not wait.
  void wait() override;
  bool completed() const override;
  /// Since launch: a collective waiting on the GPU for its gradients counts too (the timeout is long).
  double runningSinceMs() const override;
  WorkTiming timing(cudaEvent_t reference = nullptr) const override;

 private:
  friend class CommStream;
  cudaEvent_t ready_ = nullptr, start_ = nullptr, done_ = nullptr;
  double launchedMs_ = 0;
};

/// A rank's comm stream (non-blocking, optionally at the greatest priority) on the current device.
class CommStream {
 public:
  explicit CommStream(bool highPriority);
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  cudaStream_t stream() const { return stream_; }
  int priority() const { return priority_; }
  /// Records "ready" on the compute stream, makes the comm stream wait on it, then runs `issue` (which
  /// enqueues the collective on the comm stream) between the start and done events.
  std::shared_ptr<CudaWork> launch(std::string tag, size_t bytes, const std::function<void(cudaStream_t)>& issue);

 private:
  cudaStream_t stream_ = nullptr;
  int priority_ = 0;
};

/// Warns on stderr (from rank 0) when CUDA_DEVICE_MAX_CONNECTIONS=1 serialises all streams onto one
/// hardware queue, which removes the overlap of communication with backward.
void warnIfSerialisedStreams(int rank);

}  // namespace minidp::distributed
