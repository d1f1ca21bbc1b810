// MpiCommunicator: CPU tensors over MPI, collectives run on the MPI thread so backward keeps computing;
// CUDA tensors staged through pinned host buffers on that thread (several ranks on one GPU).
#pragma once

#include <array>
#include <map>
#include <memory>

#include "framework/distributed/comm/communicator.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/distributed/job/watchdog.h"

namespace minidp::distributed {

/// Reduces by MPI_Reduce(SUM) to rank 0 (an average: then a scale by 1/N on rank 0) and MPI_Bcast: every
/// rank receives rank 0's bits; a reduce-scatter is the same with MPI_Scatter instead of MPI_Bcast.
/// (MPI_Allreduce does not promise that: recursive doubling sums in a rank-dependent order, so ranks could
/// hold different bits and drift apart.) Max and min reduce the same way (MPI_MAX, MPI_MIN). bf16 and fp16
/// tensors travel as uint16; MPI_Reduce combines them with user-defined ops that compute in float and round
/// each add to the type, and an average pre-multiplies every rank's values by 1/N rounded to the type: what
/// NCCL's ncclAvg on ncclBfloat16 and ncclFloat16 computes, up to the summation order. int8 and uint8 go as
/// MPI_INT8_T and MPI_UINT8_T. All-gathers are MPI_Allgather (in place for allGatherShards).
///
/// CUDA tensors (a CUDA build; Horovod's and PyTorch's MPI backend's way): the calling thread records a
/// "ready" event on the compute stream; the MPI thread makes the communicator's comm stream wait on it,
/// copies the tensor into a pinned host buffer on the comm stream (D2H), waits for that copy, runs the same
/// MPI collective on the host copy, copies the result back (H2D) on the comm stream and records "done";
/// wait() blocks the host until the MPI thread is past the collective, then makes the compute stream wait on
/// "done" (cudaStreamWaitEvent). The MPI thread then waits for the comm stream, so a tensor released after
/// the task is no longer read or written by it. Pinned buffers are allocated once per size class (a power
/// of two) and kept for the communicator's life; only the MPI thread touches them. enqueue's tasks run on
/// the MPI thread too, on the comm stream, in order with the collectives.
class MpiCommunicator : public Communicator {
 public:
  /// `env` must outlive the communicator. `cuda`: the comm stream for CUDA tensors is created on the current
  /// device (at the greatest priority with `highPriority`); without it only CPU tensors are reduced.
  MpiCommunicator(MpiEnvironment& env, double watchdogSeconds, bool cuda = false, bool highPriority = true);
  /// Frees the bf16 and fp16 ops, the pinned buffers and the comm stream (logs failures).
  ~MpiCommunicator() override;
  int rank() const override { return env_.rank(); }
  int worldSize() const override { return env_.worldSize(); }
  std::string name() const override { return "mpi"; }
  std::string describe() const override;
  /// The CPU, and CUDA in a CUDA build (staged through pinned host buffers).
  bool supports(Device device) const override;
  std::shared_ptr<Work> allReduce(Tensor buffer, ReduceOp op, const std::string& tag) override;
  std::shared_ptr<Work> reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) override;
  std::shared_ptr<Work> allGather(Tensor input, Tensor output, const std::string& tag) override;
  std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) override;
  std::shared_ptr<Work> enqueue(const std::string& tag, Tensor keep,
                                const std::function<void(cudaStream_t)>& task) override;
  void broadcast(Tensor& tensor, int root) override;
  std::vector<std::string> allGather(const std::string& bytes) override;
  /// MPI_Abort: ends every rank.
  void abort() noexcept override;

 private:
  /// Posts the reduction of `buffer` (the whole of it, or this rank's shard under `scatter`) and watches it.
  std::shared_ptr<Work> reduce(Tensor buffer, ReduceOp op, bool scatter, const std::string& tag);
  /// Posts `run` on the MPI thread and watches it. CPU tensors: `run` gets their host memory. CUDA (`cuda`):
  /// the staging protocol above; `run` gets the pinned copies of `in` (and of `out`, when defined: it is
  /// only copied back, never to the host), and their contents go back to the device after it.
  std::shared_ptr<Work> post(const std::string& tag, bool cuda, Tensor in, Tensor out,
                             std::function<void(void* in, void* out)> run);
  /// MPI thread only: a pinned buffer of at least `bytes` (slot 0: inputs, 1: all-gather outputs), kept.
  void* staging(size_t bytes, int slot);
  /// CUDA: posts `body` on the MPI thread between the comm stream's wait on a "ready" event recorded now on
  /// the compute stream and its "done" event; the returned work's wait() makes the compute stream wait on it.
  std::shared_ptr<Work> postCuda(const std::string& tag, size_t bytes, std::function<void(cudaStream_t)> body);
  MpiEnvironment& env_;
  Watchdog watchdog_;
  /// The user-defined ops of the 16-bit floats: bf16 sum, max, min, then fp16 sum, max, min (halfOp()).
  std::array<MPI_Op, 6> halfOps_{};
  int device_ = -1;                        // CUDA: the device of the comm stream
  cudaStream_t stream_ = nullptr;          // CUDA: the comm stream of the staging copies and tasks
  std::map<size_t, void*> staging_[2];     // size class -> pinned buffer, per slot (MPI thread only)
};

}  // namespace minidp::distributed
