// NcclCommunicator: CUDA tensors over NCCL, collectives on the rank's own high-priority comm stream.
// Compiled only with CUDA.
#pragma once

#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/comm/cuda_work.h"
#include "framework/distributed/job/watchdog.h"

/// Checks an NCCL call.
#define NCCL_CHECK(call) MINIDP_CHECK_STATUS(call, ncclSuccess, ncclGetErrorString)

namespace minidp::distributed {

/// NCCL buffers whose last tensor went away, waiting to be deregistered and freed on the thread that uses
/// the communicator: a tensor can go on any thread (the watchdog drops the works it held), and NCCL's
/// registration calls must not run beside collectives issued from another thread. Shared by the
/// communicator and the buffers' release functions, so that a buffer may outlive its communicator.
/// Symmetric windows are different: their (de)registration is collective, so every rank must make the
/// calls in the same order, whatever thread dropped a tensor when. They are all deregistered together, in
/// allocation order, when the communicator goes; until then a released window keeps its memory.
struct NcclBufferReleases {
  std::mutex mutex;
  std::vector<std::pair<void*, void*>> pending;  // registered: (ncclMemAlloc memory, registration handle)
  std::vector<std::pair<void*, void*>> windows;  // symmetric, in allocation order: (memory, window)
  std::vector<void*> releasedWindows;            // symmetric memory whose last tensor went
  bool closed = false;  // the communicator is gone: a buffer released after that only frees its memory
};

/// One NCCL communicator per process on its GPU (--gpu, or the node-local rank modulo the visible
/// devices). Each collective is the NCCL call of its name (ncclAllReduce, ncclReduceScatter, ncclAllGather), in
/// place where the interface says so. Averages with ncclAvg: ring and tree all-reduce both end with every rank
/// holding the same reduced bits.
class NcclCommunicator : public Communicator {
 public:
  /// Collective over the ranks of `env` (world 1 when `env` is null). Selects the device of
  /// selectGpu (it may be current already); rank 0 creates the unique id and broadcasts it over MPI
  /// once every rank reported a usable device, else every rank throws the same error. Its watchdog also
  /// polls ncclCommGetAsyncError and aborts on an asynchronous error.
  NcclCommunicator(const CommOptions& opts, MpiEnvironment* env);
  /// Waits for the comm stream, stops the watchdog, then ncclCommDestroy (logs failures).
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int worldSize() const override { return world_; }
  std::string name() const override { return "nccl"; }
  std::string describe() const override;
  bool supports(Device device) const override { return device == Device::CUDA; }
  std::shared_ptr<Work> allReduce(Tensor buffer, ReduceOp op, const std::string& tag) override;
  std::shared_ptr<Work> reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) override;
  /// The work holds `input`; the caller keeps `output` alive.
  std::shared_ptr<Work> allGather(Tensor input, Tensor output, const std::string& tag) override;
  std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) override;
  std::shared_ptr<Work> enqueue(const std::string& tag, Tensor keep,
                                const std::function<void(cudaStream_t)>& task) override;
  void broadcast(Tensor& tensor, int root) override;
  std::vector<std::string> allGather(const std::string& bytes) override;
  /// ncclCommAbort (never while the watchdog queries the communicator), then MPI_Abort under mpirun.
  void abort() noexcept override;
  /// Watches the compute stream's progress past the replay just enqueued: a work on the comm stream that
  /// starts when the replay (and so every collective in it) is done.
  void watchReplay(const std::string& tag) override;
  /// Registered or symmetric: deregistered and freed when its last tensor goes, at the next allocation or at
  /// the communicator's end (after a device synchronisation).
  Tensor allocateCommBuffer(int64_t numel, DType dtype, Device device) override;
  /// The comm stream (for the benchmark's timeline).
  cudaStream_t stream() const { return stream_->stream(); }

 private:
  /// The watchdog's health check: the line to print for NCCL's asynchronous error, empty while none.
  std::string asyncError() const;
  /// ncclAllReduce or ncclReduceScatter of `buffer`, in place.
  std::shared_ptr<Work> reduce(Tensor buffer, ReduceOp op, bool scatter, const std::string& tag);
  /// Hands a work to the watchdog (CommStream::launch calls it before enqueueing the collective).
  std::function<void(const std::shared_ptr<Work>&)> watch();
  /// Deregisters and frees the buffers released since the last call (synchronises the device first);
  /// `close`: the communicator goes, and buffers released later only free their memory.
  void releasePendingBuffers(bool close);
  MpiEnvironment* env_;
  int rank_ = 0, world_ = 1, device_ = 0;
  int maxCtas_ = 0, minCtas_ = 0;
  NcclCtaPolicy ctaPolicy_ = NcclCtaPolicy::Default;
  CommBuffers buffers_ = CommBuffers::Plain;
  std::shared_ptr<NcclBufferReleases> releases_ = std::make_shared<NcclBufferReleases>();
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<CommStream> stream_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace minidp::distributed
